"""Several learners under a real mpirun, kept in sync by Horovod or torch.distributed. The
mpirun command itself is `test_mpirun.py`."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from impala.distributed import process_group_backend, reduces_through_host
from impala.launcher.mpi import LearnerLaunch, MpiOptions, mpirun_command
from tests.helpers import (
    CARTPOLE_FLAGS,
    CARTPOLE_RUN,
    ROOT,
    assert_ranks_in_sync,
    assert_stopped_at_the_target,
    dealer_to,
    free_port,
    last_value,
    read_csv,
    start,
    stop,
    wait_for,
    with_program,
)
from tests.wire import good_arrays, unroll

RUN = CARTPOLE_RUN
# Two learners of batch 8 average into one update of 16 unrolls: the single-learner
# setting, so the single-learner budget applies.
MULTI_FLAGS = [f for f in CARTPOLE_FLAGS if not f.startswith("--batch_size")] + [
    "--batch_size=8", "--log_interval_s=1", "--learner_threads=1"]


def test_a_gpu_learner_reduces_what_its_backend_can_take():
    """Horovod as setup.sh builds it (no CUDA) gets host copies from a GPU learner; a
    torch.distributed group on a GPU keeps its host counters on gloo (nccl refuses them)."""
    import horovod.torch as hvd

    assert not hvd.cuda_built()  # this machine's build, whose GPU learner takes host copies
    assert reduces_through_host(torch.device("cuda"), horovod_cuda_built=False)
    assert not reduces_through_host(torch.device("cuda"), horovod_cuda_built=True)
    assert not reduces_through_host(torch.device("cpu"), horovod_cuda_built=False)
    assert process_group_backend(torch.device("cuda")) == "cpu:gloo,cuda:nccl"
    assert process_group_backend(torch.device("cpu")) == "gloo"


@pytest.mark.parametrize("mode", ["horovod", "horovod_through_host", "torch"])
def test_ranks_start_equal_and_step_on_the_mean_gradient(tmp_path, mode):
    """Two ranks under a real mpirun, different weights and gradients on each: after the
    start-up broadcast both hold rank 0's weights, and after one update both moved by the
    mean gradient, bit for bit alike. `horovod_through_host` is the path of a GPU learner
    whose Horovod was built without CUDA (host copies), run here on host tensors."""
    learners = [LearnerLaunch("127.0.0.1", port, sys.executable, str(ROOT))
                for port in (1, 2)]
    command = mpirun_command(learners, [], MpiOptions(master_port=free_port()))
    result = subprocess.run(with_program(command, ["-m", "tests.rank_sync", str(tmp_path),
                                                   mode]),
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ranks = [dict(np.load(tmp_path / f"rank-{r}.npz")) for r in (0, 1)]
    assert not np.array_equal(ranks[0]["init.weight"], ranks[1]["init.weight"])
    assert np.array_equal(ranks[1]["start.weight"], ranks[0]["init.weight"])  # rank 0's
    for name in ranks[0]:
        if not name.startswith("init."):
            assert np.array_equal(ranks[0][name], ranks[1][name]), name
    # The mean over ranks 0 and 1 of dW = 4 (r + 1) and db = 4 (tests/rank_sync.py).
    mean_weight_grad, mean_bias_grad = 4 * 1.5, 4.0
    first = ranks[0]
    np.testing.assert_allclose(first["end.weight"],
                               first["start.weight"] - 0.5 * mean_weight_grad, rtol=1e-6)
    np.testing.assert_allclose(first["end.bias"], first["start.bias"] - 0.5 * mean_bias_grad,
                               rtol=1e-6)
    assert np.isclose(first["norm"], np.sqrt(6 * mean_weight_grad**2 + 2 * mean_bias_grad**2))


class Cluster:
    """Two learner ranks under one mpirun on this host, one actor each."""

    def __init__(self, tmp_path, backend: str, frames: int, extra: list[str] | None = None,
                 stop_grace_s: int = MpiOptions.stop_grace_s):
        self.tmp_path = tmp_path
        self.ports = [free_port(), free_port()]
        flags = [*MULTI_FLAGS, f"--allreduce_backend={backend}", f"--logdir={tmp_path}",
                 f"--total_environment_frames={frames}", *(extra or [])]
        learners = [LearnerLaunch("127.0.0.1", port, sys.executable, str(ROOT))
                    for port in self.ports]
        self.command = mpirun_command(learners, flags,
                                      MpiOptions(master_port=free_port(),
                                                 stop_grace_s=stop_grace_s))
        self.actor_flags = [f for f in flags if not f.startswith("--total")]

    def start(self) -> None:
        log = open(self.tmp_path / "mpirun.log", "ab")  # noqa: SIM115
        self.mpirun = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True,
                                       cwd=ROOT)
        self.actors = [start(["--job_name=actor", f"--task={i}", *self.actor_flags,
                              f"--learner_host=127.0.0.1:{port}"],
                             self.tmp_path / f"actor-{i}.out")
                       for i, port in enumerate(self.ports)]

    def wait(self, timeout: float) -> int:
        try:
            return self.mpirun.wait(timeout=timeout)
        finally:
            for actor in self.actors:
                stop(actor)

    @property
    def run_dir(self):
        return self.tmp_path / RUN


def trained_in_sync(tmp_path, frames: int, extra: list[str]):
    """Two Horovod learners trained for `frames` with `extra` flags, which must end cleanly
    with both ranks holding the same state on every row; returns the cluster and the rows
    of both ranks side by side (helpers.assert_ranks_in_sync)."""
    cluster = Cluster(tmp_path, "horovod", frames, [*extra, "--log_interval_s=0.2"])
    cluster.start()
    assert cluster.wait(timeout=300) == 0, (tmp_path / "mpirun.log").read_text()[-3000:]
    return cluster, assert_ranks_in_sync(cluster.run_dir)


def rows_in(path) -> int:
    frame = read_csv(path)
    return 0 if frame is None else len(frame)


# Two learners reach this mean over the last 100 episodes of both ranks within 500K frames:
# 10 runs of 10 here (16-20 s each); asked for 475, most runs reached it and one plateaued
# at ~300-380.
TWO_LEARNERS_TARGET = 300


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["horovod", "torch"])
def test_two_learners_stay_in_sync_and_learn_cartpole(tmp_path, backend):
    """Two learners reach TWO_LEARNERS_TARGET on CartPole within 500K frames, where
    --target_return stops both on the same update, and stay in sync all the way."""
    budget = 500_000
    cluster = Cluster(tmp_path, backend, budget, [f"--target_return={TWO_LEARNERS_TARGET}"])
    cluster.start()
    code = cluster.wait(timeout=600)
    assert code == 0, (tmp_path / "mpirun.log").read_text()[-3000:]
    merged = assert_ranks_in_sync(cluster.run_dir)
    assert merged["local_frames_0"].sum() > 0 and merged["local_frames_1"].sum() > 0
    learner_log = (cluster.run_dir / "learner-0.log").read_text()
    best = read_csv(cluster.run_dir / "logs.csv")["mean_episode_return"].max()
    assert "reached --target_return" in learner_log, f"best logged mean return {best:.1f}"
    stopped_at = assert_stopped_at_the_target(cluster.run_dir, TWO_LEARNERS_TARGET, budget,
                                              ranks=2)
    assert merged["frames_0"].iloc[-1] == stopped_at  # both ranks' last row: that update
    assert "learner 0/2" in learner_log and "learner 1/2" in (
        cluster.run_dir / "learner-1.log").read_text()
    # Rank 0 alone writes the run's logs.csv and checkpoint; every rank its own CSVs.
    assert read_csv(cluster.run_dir / "logs.csv") is not None
    assert not list(cluster.run_dir.glob("logs-*.csv"))


# No replay for the first 15K frames, then 1.5 B replayed per update: the ranks switch at
# the same update (the run's frames are allreduced), or the allreduces would not pair up.
# A row every update or so: on a fast machine (CI, 2026-11-25) the first 15,000 frames took
# under a second, so at one row a second logs.csv had no row from before replay began.
REPLAY = ["--replay_ratio=1.5", "--initial_replay_ratio=0", "--initial_replay_frames=15000",
          "--priority_exponent=0.6", "--trust_region_threshold=0.3", "--checkpoint_interval_s=1000",
          "--log_interval_s=0.02"]


@pytest.mark.slow
def test_two_learners_with_their_own_replay_resume_from_the_same_frame_count_in_sync(
        tmp_path):
    """Each rank replays its own actors' unrolls (different data, different priorities),
    yet every rank takes the same number of replayed unrolls per update, so the allreduces
    pair up and the parameters stay equal to the last bit; a resumed run starts both ranks
    from the same frames, updates and parameters, and each rank's replay as it was saved."""
    first = Cluster(tmp_path, "horovod", 30_000, REPLAY)
    first.start()
    assert first.wait(timeout=300) == 0, (tmp_path / "mpirun.log").read_text()[-3000:]
    assert_ranks_in_sync(first.run_dir)
    logs = read_csv(first.run_dir / "logs.csv")
    early = logs[logs["frames"] < 15_000]
    assert len(early) and (early["replayed_share"] == 0).all()
    assert logs["replayed_share"].iloc[-1] > 0.5
    saved_frames = last_value(first.run_dir / "learner-0.csv", "frames")
    saved_digest = read_csv(first.run_dir / "learner-0.csv")["state_digest"].iloc[-1]
    saved_fill = logs["replay_fill"].iloc[-1]
    assert {p.name for p in first.run_dir.glob("replay-*")} == {"replay-0.npz", "replay-1.npz"}
    second = Cluster(tmp_path, "horovod", 60_000, REPLAY)
    second.start()
    assert second.wait(timeout=300) == 0, (tmp_path / "mpirun.log").read_text()[-3000:]
    starts, restored = [], []
    for rank in (0, 1):
        log = (second.run_dir / f"learner-{rank}.log").read_text()
        starts.append(re.findall(r"rank \d \(pid \d+\) starts at (\d+) frames, (\d+) updates, "
                                 r"parameter checksum (\S+), state digest (\w+)", log)[-1])
        assert log.count("replay: 10000 unrolls") == 2  # each run builds its replay at start
        restored.append(re.findall(rf"rank {rank}: restored (\d+) unrolls from \S+replay-"
                                   rf"{rank}.npz", log))
    assert starts[0] == starts[1]  # same frames, updates and parameters on both ranks
    # and the optimizer's state as saved (Horovod's wrapper once started it afresh)
    assert starts[0][3] == saved_digest
    assert len(restored[0]) == 1 and restored[0] == restored[1]  # the same fill on both
    resumed = read_csv(second.run_dir / "logs.csv")
    resumed = resumed[resumed["frames"] > saved_frames]
    assert resumed["replay_fill"].iloc[0] >= saved_fill > 0  # not refilled from nothing
    assert int(starts[0][0]) == saved_frames > 0
    assert_ranks_in_sync(second.run_dir)
    assert last_value(second.run_dir / "learner-1.csv", "frames") >= 60_000  # fresh frames
    assert last_value(second.run_dir / "logs.csv", "replayed_share") > 0.5  # 1.5 B per B


@pytest.mark.slow
def test_two_apex_learners_agree_on_their_target_networks_and_optimizer_state(tmp_path):
    """Ape-X keeps a target network that each rank copies on its own, by the run's frames,
    and replay of its own: the gradient allreduce alone would keep the online weights equal
    even if the targets drifted apart, so the ranks' state digests, which cover the target
    network, the optimizer's state and the counters, must match on every row."""
    _, merged = trained_in_sync(tmp_path, 24_000, ["--algorithm=apex",
                                                   "--target_update_frames=1600",
                                                   "--replay_ratio=1"])
    # The target was copied several times over the rows compared (every 1,600 frames).
    assert merged["frames_0"].iloc[-1] - merged["frames_0"].iloc[0] > 5 * 1600
    assert merged["state_digest_0"].nunique() == len(merged)  # it changes as they train


@pytest.mark.slow
def test_two_adam_learners_hold_the_same_weights_and_adam_state(tmp_path):
    """--optimizer=adam under Horovod: rank 0's fresh Adam state reaches the other rank
    before the first step, and each rank's Adam then takes the same steps, so the state
    digests (weights, Adam's moments and step count) match on every row."""
    cluster, merged = trained_in_sync(tmp_path, 24_000, ["--optimizer=adam",
                                                         "--learning_rate=0.0005",
                                                         "--epsilon=1e-5"])
    assert merged["state_digest_0"].nunique() > 5
    state = torch.load(cluster.run_dir / "checkpoint.pt", weights_only=False)["optimizer"]
    steps = {float(entry["step"]) for entry in state["state"].values()}
    updates = last_value(cluster.run_dir / "logs.csv", "updates")
    assert steps == {updates}  # Adam counted every update and nothing else


@pytest.mark.slow
def test_two_popart_learners_move_their_value_statistics_together(tmp_path):
    """PopArt's statistics follow each rank's own value targets, which differ between the
    ranks; they are moved by the mean of both ranks' moments, so the heads' weights and
    statistics stay equal to the last bit (the state digest covers buffers) as they move
    away from the starting mu 0, sigma 1."""
    cluster, merged = trained_in_sync(tmp_path, 40_000, ["--value_normalization=popart",
                                                         "--popart_step=0.01"])
    assert merged["state_digest_0"].nunique() > 5
    weights = torch.load(cluster.run_dir / "checkpoint.pt", weights_only=False)["model"]
    mean, mean_square = (float(weights[f"heads.baseline.{name}"])
                         for name in ("mean", "mean_square"))
    assert mean > 1 and mean_square - mean**2 > 1  # CartPole's values: 1 a step, for tens


@pytest.mark.slow
def test_two_learners_recycle_the_same_units_with_the_same_weights(tmp_path):
    """ReDo scores the units on each rank's own batch: the scores are summed over the ranks
    and the new weights drawn from a shared seed, so after every recycling both ranks hold
    the same weights and optimizer state (the digests on every row). A threshold of half
    the layer's mean makes every scoring recycle some units."""
    cluster, merged = trained_in_sync(tmp_path, 24_000, ["--redo_threshold=0.5",
                                                         "--redo_interval_frames=2000"])
    logs = read_csv(cluster.run_dir / "logs.csv")
    assert logs["recycled_units"].iloc[-1] >= 10  # about one scoring per 2,000 frames
    assert merged["state_digest_0"].nunique() > 5


def test_a_dead_rank_does_not_hang_the_others(tmp_path):
    """mpirun ends the other rank when one is killed. The rank left waits in an allreduce
    and answers only mpirun's SIGKILL, two grace periods later: 2 s here (10 s in a run)."""
    cluster = Cluster(tmp_path, "horovod", 100_000_000, ["--checkpoint_interval_s=1"],
                      stop_grace_s=2)
    cluster.start()
    run_dir = cluster.run_dir
    wait_for(lambda: last_value(run_dir / "learner-1.csv", "updates") > 20, 90, "training")
    wait_for(lambda: (run_dir / "checkpoint.pt").exists(), 30, "a checkpoint")
    pid = int(re.findall(r"rank 1 \(pid (\d+)\)", (run_dir / "learner-1.log").read_text())[0])
    import os
    import signal

    started = time.time()
    os.kill(pid, signal.SIGKILL)
    code = cluster.wait(timeout=120)
    assert code != 0 and time.time() - started < 120
    output = (tmp_path / "mpirun.log").read_text()
    assert "exited" in output or "terminated" in output  # mpirun says which rank died
    from impala import checkpoint
    from impala.config import Config

    state = checkpoint.load(run_dir / "checkpoint.pt", Config(
        level_name="CartPole-v1", agent_name="MLPAgent").to_dict())
    assert state["counters"]["frames"] > 0


@pytest.mark.slow
def test_a_non_finite_loss_on_one_rank_skips_that_update_on_both(tmp_path):
    """A finite but huge reward sent to rank 1 only (no clipping) makes its loss infinite:
    both ranks skip that update together, stay in sync, and nothing NaN is published."""
    import numpy as np


    cluster = Cluster(tmp_path, "horovod", 100_000_000,
                      ["--reward_clipping=none", "--checkpoint_interval_s=1"])
    cluster.start()
    run_dir = cluster.run_dir
    try:
        wait_for(lambda: last_value(run_dir / "learner-1.csv", "updates") > 5, 90, "training")
        arrays = good_arrays()
        arrays["reward"][5] = 3e38  # finite on the wire; squared in the baseline loss it is not
        sock = dealer_to(cluster.ports[1], run_dir)
        sock.send_multipart(unroll(arrays))
        sock.close()
        wait_for(lambda: last_value(run_dir / "logs.csv", "skipped_updates") >= 1, 60,
                 "the update to be skipped")
        updates_then = last_value(run_dir / "learner-1.csv", "updates")
        wait_for(lambda: last_value(run_dir / "learner-1.csv", "updates") > updates_then + 10
                 and rows_in(run_dir / "learner-1.csv") >= 3,  # the sync check needs 3 rows
                 60, "training to go on")
        assert cluster.mpirun.poll() is None
        for rank in (0, 1):
            assert "skipped: non-finite loss or gradient" in (
                run_dir / f"learner-{rank}.log").read_text()
    finally:
        import signal

        cluster.mpirun.send_signal(signal.SIGUSR1)  # mpirun forwards it to every rank
        code = cluster.wait(timeout=120)
    assert code == 0, (tmp_path / "mpirun.log").read_text()[-3000:]
    merged = assert_ranks_in_sync(run_dir)
    assert np.isfinite(merged["param_checksum_0"].astype(float)).all()
    from impala import checkpoint
    from impala.config import Config

    state = checkpoint.load(run_dir / "checkpoint.pt", Config(
        level_name="CartPole-v1", agent_name="MLPAgent").to_dict())  # finite, or refused
    assert state["counters"]["updates"] > updates_then
