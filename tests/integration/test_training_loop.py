"""The learner's loop decisions alone (seconds, no sockets, no processes): when it stops,
logs, checkpoints and finishes, with a fake allreduce backend standing in for the other
ranks and a fake receiver; batches, updates and log files are real."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from impala.config import Config
from impala.counters import Control
from impala.distributed import SingleLearner
from impala.learner import Learner
from impala.logs import LearnerLogs
from impala.receiver import ReceiverCounts, ReceiverStopped
from impala.unroll.batches import BatchQueue
from impala.unroll.reader import EpisodeStats
from tests.helpers import read_csv

T, B = 5, 2


class FakeBackend(SingleLearner):
    """One rank of a pretend group of two: the other rank's part of each Control comes
    from `others` (one per update; afterwards it mirrors this rank's data: same frames and
    episodes, no stop, no clock)."""

    def __init__(self, rank: int = 0, others: list[Control] | None = None) -> None:
        self.rank, self.size = rank, 2
        self.others = list(others or [])
        self.sent: list[Control] = []
        self.steps = 0  # optimizer steps asked for

    def apply_gradients(self, model, optimizer, max_norm: float) -> float:
        self.steps += 1
        return super().apply_gradients(model, optimizer, max_norm)

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        mine = Control.from_array(values)
        self.sent.append(mine)
        other = self.others.pop(0) if self.others else dataclasses.replace(
            mine, stop=0.0, log_now=0.0, checkpoint_now=0.0)
        return values + other.to_array()


class FakeReceiver:
    """The receiver's surface the loop uses, recording the versions it was handed."""

    address = "tcp://fake:1"

    def __init__(self, alive: bool = True) -> None:
        self.alive = alive
        self.published: list[int] = []

    def raise_if_stopped(self) -> None:
        if not self.alive:
            raise ReceiverStopped("the unroll receiver thread ended: a test")

    def counts(self) -> ReceiverCounts:
        return ReceiverCounts(unrolls=0, unroll_bytes=0, dropped=0, drop_reasons={},
                              stream_restarts=0, senders=0)

    def publish(self, version: int, arrays: dict[str, np.ndarray], run_frames: int = 0
                ) -> None:
        self.published.append(version)


def make_learner(tmp_path, backend: FakeBackend, **flags) -> Learner:
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent", preset="none", auth="none",
                 logdir=str(tmp_path), run_name="run", batch_size=B, unroll_length=T,
                 learner_threads=1, **flags)
    return Learner(cfg, backend, stop=threading.Event())


def queue_with(learner: Learner, count: int, seed: int = 0) -> BatchQueue:
    """A batch queue holding `count` full batches of valid random CartPole unrolls."""
    rng = np.random.default_rng(seed)
    batches = BatchQueue(learner.layout, B, capacity=count)
    for _ in range(count):
        batch = batches.free.get_nowait()
        arrays = batch.arrays
        arrays["observation"][:] = rng.normal(size=arrays["observation"].shape)
        arrays["reward"][:] = rng.normal(size=arrays["reward"].shape)
        arrays["policy_logits"][:] = rng.normal(size=arrays["policy_logits"].shape)
        arrays["action"][:] = rng.integers(0, 2, arrays["action"].shape)
        arrays["last_action"][:] = rng.integers(0, 2, arrays["last_action"].shape)
        batch.filled, batch.policy_versions = B, [0] * B
        batch.episodes.extend(EpisodeStats([10.0], [10], [{}]))
        batches.ready.put(batch)
    return batches


def train(learner: Learner, batches: BatchQueue, receiver: FakeReceiver) -> str:
    logs = LearnerLogs(learner.run_dir, learner.rank)
    try:
        return learner.train(receiver, batches, logs)
    finally:
        logs.close()


def test_it_finishes_on_the_update_that_reaches_the_budget_counting_every_ranks_frames(
        tmp_path):
    per_update = B * T  # CartPole: one frame per agent step
    learner = make_learner(tmp_path, FakeBackend(), total_environment_frames=6 * per_update,
                           log_interval_s=3600.0, checkpoint_interval_s=3600.0)
    receiver = FakeReceiver()
    assert train(learner, queue_with(learner, 5), receiver) == "finished"
    # Two ranks' frames per update: the budget of six updates' frames is met after three.
    assert (learner.counters.frames, learner.counters.updates) == (6 * per_update, 3)
    assert receiver.published == [0, 1, 2, 3]  # the first weights, then after every update
    rows = read_csv(learner.run_dir / "logs.csv")
    assert list(rows["updates"]) == [3]  # the last row only, once
    assert rows["episodes"].iloc[0] == 6  # both ranks' episodes
    assert not (learner.run_dir / "checkpoint.pt").exists()  # saving at the end is run()'s


def test_another_ranks_stop_stops_this_rank_before_it_updates(tmp_path):
    backend = FakeBackend(others=[Control(frames=B * T), Control(stop=1.0)])
    learner = make_learner(tmp_path, backend, log_interval_s=3600.0)
    batches = queue_with(learner, 3)
    assert train(learner, batches, FakeReceiver()) == "stopped"
    assert learner.counters.updates == 1
    assert batches.free.qsize() == 2 + 2  # both taken batches went back to the pool


def test_a_stop_request_is_sent_to_the_other_ranks_without_waiting_for_a_batch(tmp_path):
    backend = FakeBackend()
    learner = make_learner(tmp_path, backend)
    learner.stop_requested.set()
    assert train(learner, queue_with(learner, 0), FakeReceiver()) == "stopped"
    assert backend.sent == [Control(stop=1.0)]  # no frames, and rank 0's clock not yet due
    assert learner.counters.updates == 0


def test_rank_zeros_clock_decides_when_every_rank_logs_and_checkpoints(tmp_path):
    # Rank 1, whose own clock is always due but not asked: rank 0 asks for a row and a
    # checkpoint on the second update only.
    rank_zero_says = [Control(frames=B * T), Control(frames=B * T, log_now=1.0,
                                                     checkpoint_now=1.0)]
    backend = FakeBackend(rank=1, others=rank_zero_says + [Control(stop=1.0)])
    learner = make_learner(tmp_path, backend, log_interval_s=0.001, checkpoint_interval_s=0.001)
    assert train(learner, queue_with(learner, 3), FakeReceiver()) == "stopped"
    assert list(read_csv(learner.run_dir / "learner-1.csv")["updates"]) == [2]
    assert not (learner.run_dir / "logs.csv").exists()  # rank 0's file
    assert not (learner.run_dir / "checkpoint.pt").exists()  # rank 0 saves
    assert backend.sent[0].log_now == backend.sent[0].checkpoint_now == 0.0


def test_rank_zero_logs_and_checkpoints_when_its_clock_is_due(tmp_path):
    backend = FakeBackend(others=[Control(frames=B * T)] * 2 + [Control(stop=1.0)])
    learner = make_learner(tmp_path, backend, log_interval_s=0.001, checkpoint_interval_s=0.001)
    assert train(learner, queue_with(learner, 3), FakeReceiver()) == "stopped"
    # An update takes more than a millisecond, so the clock is due by the second one.
    assert backend.sent[1].log_now == backend.sent[1].checkpoint_now == 1.0
    assert read_csv(learner.run_dir / "logs.csv")["updates"].iloc[-1] == 2
    assert (learner.run_dir / "checkpoint.pt").exists()


def test_a_dead_receiver_ends_the_loop_with_an_error(tmp_path):
    learner = make_learner(tmp_path, FakeBackend())
    with pytest.raises(ReceiverStopped, match="receiver thread ended"):
        train(learner, queue_with(learner, 1), FakeReceiver(alive=False))


def test_a_non_finite_batch_is_counted_as_skipped_and_still_logged(tmp_path):
    backend = FakeBackend(others=[Control(frames=B * T)] * 2 + [Control(stop=1.0)])
    learner = make_learner(tmp_path, backend, log_interval_s=0.001, reward_clipping="none")
    batches = queue_with(learner, 3)
    # Finite on the wire; its square in the baseline loss is not.
    batches.ready.queue[0].arrays["reward"][3, 0] = 3e38
    assert train(learner, batches, FakeReceiver()) == "stopped"
    assert learner.skipped_updates == 1
    assert read_csv(learner.run_dir / "logs.csv")["skipped_updates"].iloc[-1] == 1


def test_passes_take_several_optimizer_steps_per_batch_and_count_one_update(tmp_path):
    backend = FakeBackend(others=[Control(frames=B * T)] * 2 + [Control(stop=1.0)])
    learner = make_learner(tmp_path, backend, passes=3)
    receiver = FakeReceiver()
    assert train(learner, queue_with(learner, 3), receiver) == "stopped"
    assert backend.steps == 6 and learner.counters.updates == 2
    assert receiver.published == [0, 1, 2]


def test_the_learner_holds_the_rate_then_anneals_it_to_zero_at_the_budget(tmp_path):
    learner = make_learner(tmp_path, FakeBackend(), learning_rate=0.001, lr_hold_fraction=0.5,
                           total_environment_frames=1000)
    batch = queue_with(learner, 1).ready.get_nowait()
    logged = []
    for frames in (0, 500, 750, 1000):
        logged.append(learner.update(batch, 0, frames, frames + B * T).learning_rate)
    assert logged == pytest.approx([0.001, 0.001, 0.0005, 0.0])
    assert all(group["lr"] == 0.0 for group in learner.optimizer.param_groups)


def test_a_torso_whose_features_stopped_varying_is_reported_once(tmp_path, caplog):
    """Dead ReLUs show as features that are the same at every step of a batch; the learner
    says so (once) instead of training on silently."""
    backend = FakeBackend(others=[Control(frames=B * T)] * 3 + [Control(stop=1.0)])
    learner = make_learner(tmp_path, backend, log_interval_s=0.001)
    for layer in (learner.model.mlp[0], learner.model.mlp[2]):
        layer.weight.data.zero_()  # every observation gives the same features
    with caplog.at_level("WARNING", logger="learner"):
        assert train(learner, queue_with(learner, 4), FakeReceiver()) == "stopped"
    warnings = [r.getMessage() for r in caplog.records if "no longer vary" in r.getMessage()]
    assert len(warnings) == 1 and "--learning_rate" in warnings[0]
    assert read_csv(learner.run_dir / "logs.csv")["feature_std"].iloc[0] < 1e-5


def test_a_dying_torso_is_reported_before_it_is_dead(tmp_path, caplog):
    """A torso whose features fade (ReLUs dying) is reported once while a few features
    still vary, so the user need not wait for it to die."""
    learner = make_learner(tmp_path, FakeBackend(others=[]))
    with caplog.at_level("WARNING", logger="learner"):
        for value in np.geomspace(0.006, 2e-4, 600):
            learner.torso_watch.warn({"feature_std": float(value), "dead_features": 0.7}, 1)
    warnings = [r.getMessage() for r in caplog.records if "dying" in r.getMessage()]
    assert len(warnings) == 1
    assert "less than at their peak" in warnings[0] and "70% of the features" in warnings[0]
