"""The learner: train on batches of unrolls, keep in sync with the other learners through
the allreduce backend, publish new weights, log and checkpoint.

The socket thread (`impala.receiver.UnrollReceiver`) fills batches and answers weight
requests; `Learner.run` owns the training loop.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from impala import auth, checkpoint
from impala.algorithms import build_algorithm
from impala.config import PRESETS, Config, parse_host_port
from impala.distributed import Backend, parameter_checksum
from impala.envs import describe_env
from impala.laser import ReplayedPart, UnrollReplay
from impala.logs import LearnerLogs, RunMeta, status_line
from impala.optim import RMSpropTF, scheduled_learning_rate
from impala.process import keep_freed_memory
from impala.receiver import ReceiverStopped, UnrollReceiver
from impala.rollout import Batch, BatchQueue, core_state, to_device
from impala.step import TorsoWatch, learn_step
from impala.transport import MAX_HEADER_BYTES, LearnerSocket
from impala.unroll import UnrollLayout
from impala.weights import finite_weights

log = logging.getLogger("learner")


@dataclass
class Control:
    """What every rank must agree on before an update: each rank fills in its part and one
    small allreduce (a float64 vector) sums them, once per update."""

    stop: float = 0.0  # > 0: some rank has no batch, or was asked to stop
    frames: float = 0.0  # consumed by this update, over all ranks
    return_sum: float = 0.0  # of the episodes that ended in this update's batches
    length_sum: float = 0.0
    episodes: float = 0.0
    log_now: float = 0.0  # rank 0's clock decides, so all ranks log and save together
    checkpoint_now: float = 0.0

    def to_array(self) -> np.ndarray:
        return np.array(dataclasses.astuple(self), dtype=np.float64)

    @classmethod
    def from_array(cls, values: np.ndarray) -> Control:
        return cls(*(float(v) for v in values))


@dataclass
class Counters:
    """Frames consumed over all ranks and updates applied; the update count is also the
    version of the weights the learner publishes (actors report it back as policy lag)."""

    frames: int = 0
    updates: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"frames": self.frames, "updates": self.updates}


@dataclass
class IntervalStats:
    """What accumulates between two log rows."""

    start_time: float = field(default_factory=time.time)
    start_frames: int = 0
    local_frames: int = 0
    return_sum: float = 0.0
    length_sum: float = 0.0
    episodes: float = 0.0
    lags: list[float] = field(default_factory=list)
    last: dict[str, float] = field(default_factory=dict)


class ReturnWindow:
    """The mean raw return of the run's most recent episodes, over all ranks: at least
    `episodes` of them, in whole updates. Built from each update's agreed Control sums, so
    every rank computes the same mean and a target stops them on the same update."""

    def __init__(self, episodes: int) -> None:
        self.episodes = episodes
        self.updates: deque[tuple[float, float]] = deque()  # (return sum, episodes) per update
        self.count = 0.0

    def add(self, return_sum: float, count: float) -> None:
        if count == 0:
            return
        self.updates.append((return_sum, count))
        self.count += count
        while self.count - self.updates[0][1] >= self.episodes:  # the oldest is not needed
            self.count -= self.updates.popleft()[1]

    def reached(self, target: float) -> bool:
        return self.count >= self.episodes and self.mean >= target

    @property
    def mean(self) -> float:
        """Summed afresh each time (a few hundred numbers at most): a running sum that also
        subtracts would drift over millions of episodes."""
        total = sum(return_sum for return_sum, _ in self.updates)
        return total / self.count if self.count else float("nan")


class Learner:
    def __init__(self, cfg: Config, backend: Backend,
                 stop: threading.Event | None = None) -> None:
        self.cfg = cfg
        self.backend = backend
        self.rank = backend.rank
        self.is_chief = backend.rank == 0
        self.stop_requested = stop if stop is not None else threading.Event()
        self.device = cfg.device_for(backend.local_rank)
        torch.set_num_threads(cfg.learner_threads)
        keep_freed_memory()
        # Ranks start from different random weights on purpose: the broadcast from rank 0
        # must make them equal (the sync test would catch a missing broadcast).
        torch.manual_seed(cfg.seed + backend.rank)
        self.run_dir = cfg.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_path = self.run_dir / checkpoint.CHECKPOINT_NAME
        self.keys = auth.ensure_keys(self.run_dir) if cfg.auth == "curve" else None

        env_info = describe_env(cfg.env_settings)
        self.algorithm = build_algorithm(cfg)
        self.model = self.algorithm.build_agent(cfg.agent_name, env_info).to(self.device)
        self.layout = UnrollLayout.for_agent(cfg.unroll_length, env_info, self.model,
                                             self.algorithm.head_field, self.algorithm.overlap)
        # Fresh frames this learner consumes per update (agent steps x action repeat): an
        # unroll brings T + 1 - overlap steps the previous one of its environment did not.
        self.frames_per_update = (cfg.batch_size * (cfg.unroll_length + 1 - self.layout.overlap)
                                  * env_info.frames_per_step)
        self.frames_per_step = env_info.frames_per_step
        optimizer = RMSpropTF(self.model.parameters(), lr=cfg.learning_rate,
                              decay=cfg.decay, momentum=cfg.momentum, epsilon=cfg.epsilon)
        self.counters = self._restore(optimizer)
        # LASER: each rank replays its own actors' unrolls (rebuilt from new ones on resume).
        self.replay = UnrollReplay(
            self.layout, cfg.batch_size, cfg.replay_schedule, cfg.replay_size,
            cfg.priority_exponent, cfg.importance_sampling_exponent, seed=cfg.seed + self.rank,
        ) if cfg.replay_schedule.largest > 0 else None
        self.skipped_updates = 0  # updates not applied: non-finite loss or gradient
        self.torso_watch = TorsoWatch()  # warns when the features stop varying
        self.optimizer = backend.prepare(self.model, optimizer)
        # After prepare: a target network copies the weights every rank now shares.
        self.learning = self.algorithm.learner(self.model)
        log.info("rank %d (pid %d) starts at %d frames, %d updates, parameter checksum %r",
                 self.rank, os.getpid(), self.counters.frames, self.counters.updates,
                 parameter_checksum(self.model))

    # ----------------------------------------------------------------------- start-up
    def _restore(self, optimizer: torch.optim.Optimizer) -> Counters:
        """Rank 0 reads the checkpoint; the counters reach every rank by broadcast, the
        weights and optimizer state by `backend.prepare`."""
        counters = Counters()
        if self.is_chief and self.checkpoint_path.exists():
            counters = Counters(**checkpoint.resume(self.checkpoint_path, self.model,
                                                    optimizer, self.cfg.to_dict()))
            log.info("resumed from %s at %d frames, %d updates", self.checkpoint_path,
                     counters.frames, counters.updates)
        values = self.backend.broadcast_counters(
            np.array([counters.frames, counters.updates], dtype=np.float64))
        return Counters(*(int(v) for v in values))

    def save_checkpoint(self) -> None:
        if not self.is_chief:
            return
        checkpoint.save(self.checkpoint_path, self.model, self.optimizer,
                        self.counters.as_dict(), self.cfg.to_dict())
        log.info("checkpoint saved at %d frames: %s", self.counters.frames, self.checkpoint_path)

    def largest_frame(self) -> int:
        """The biggest frame an actor sends, with room for CURVE's per-frame envelope
        (tens of bytes): ZeroMQ cuts off a peer that sends more, before buffering it."""
        schemas = [self.layout.schema(), self.layout.schema(continued=True)]
        return 4096 + max(MAX_HEADER_BYTES, *(spec.nbytes for schema in schemas
                                              for spec in schema.values()))

    # ----------------------------------------------------------------------- main loop
    def run(self) -> str:
        """Train until the frame budget or a stop request; returns the exit status."""
        receiver, batches, sock = self._serve()
        logs = LearnerLogs(self.run_dir, self.rank)
        meta = RunMeta(self.run_dir, self.cfg.to_dict(), role="learner",
                       preset=PRESETS[self.cfg.preset]) if self.is_chief else None
        status = "error"
        try:
            status = self.train(receiver, batches, logs)
        finally:
            receiver.stop_event.set()
            receiver.join(timeout=5)
            sock.close()
            if status != "error":  # an error exit keeps the last good checkpoint
                self.save_checkpoint()
            logs.close()
            if meta is not None:
                meta.finish(status, frames=self.counters.frames, updates=self.counters.updates)
        return status

    def _serve(self) -> tuple[UnrollReceiver, BatchQueue, LearnerSocket]:
        """Bind the socket and start the receiver thread, serving the current weights."""
        cfg = self.cfg
        host, port = parse_host_port(cfg.learner_host)
        sock = LearnerSocket(host, port, self.largest_frame(),
                             receive_hwm=cfg.queue_capacity * cfg.batch_size + cfg.batch_size,
                             keys=self.keys)
        replay = self.replay
        batches = BatchQueue(self.layout, cfg.batch_size, cfg.queue_capacity,
                             extra_columns=replay.max_replayed if replay else 0,
                             keep_stored=replay is not None)
        receiver = self.receiver = UnrollReceiver(
            sock, self.layout, batches, int(cfg.max_message_mb * 2**20),
            name=f"learner-{self.rank}")
        receiver.publish(self.counters.updates, finite_weights(self.model))
        receiver.start()
        log.info("learner %d/%d listening on %s (%s, %s, batch %d x T=%d)", self.rank,
                 self.backend.size, sock.address, cfg.agent_name, cfg.level_name,
                 cfg.batch_size, cfg.unroll_length)
        return receiver, batches, sock

    def train(self, receiver: UnrollReceiver, batches: BatchQueue, logs: LearnerLogs) -> str:
        """The loop: take a batch, agree with the other ranks, update, publish the new
        weights, then log and checkpoint when rank 0's clock says so. Returns "finished"
        at the frame budget or the target return, or "stopped" when any rank stops."""
        cfg = self.cfg
        recent = ReturnWindow(cfg.target_return_episodes)
        interval = IntervalStats(start_frames=self.counters.frames)
        run_start, run_start_frames = time.time(), self.counters.frames
        last_checkpoint = time.time()
        while True:
            batch = self._next_batch(receiver, batches)
            now = time.time()
            control = self._agree(
                batch,
                log_now=now - interval.start_time >= cfg.log_interval_s,
                checkpoint_now=now - last_checkpoint >= cfg.checkpoint_interval_s,
            )
            if control.stop > 0:
                if batch is not None:
                    batches.release(batch)
                return "stopped"
            stats = self.step(batch, self.counters.frames + int(control.frames))
            interval.lags.append(self.counters.updates - float(np.mean(batch.policy_versions)))
            logs.episodes(self.counters.frames, batch.episodes.returns, batch.episodes.lengths)
            batches.release(batch)
            self._count(interval, control, stats)
            receiver.publish(self.counters.updates, finite_weights(self.model))
            # The frame count and the returns are global, so every rank finishes on the same
            # update; its last row is written once even when rank 0's log tick falls on it too.
            recent.add(control.return_sum, control.episodes)
            target_met = recent.reached(cfg.target_return)
            finished = self.counters.frames >= cfg.total_environment_frames or target_met
            if control.log_now > 0 or finished:
                self._write_logs(interval, receiver, batches, logs, run_start, run_start_frames)
                interval = IntervalStats(start_frames=self.counters.frames)
            if control.checkpoint_now > 0:
                self.save_checkpoint()
                last_checkpoint = time.time()
            if finished:
                if target_met:
                    log.info("mean return %.2f over the last %d episodes reached "
                             "--target_return=%g at %d frames: done", recent.mean,
                             recent.count, cfg.target_return, self.counters.frames)
                else:
                    log.info("reached %d frames: done", self.counters.frames)
                return "finished"

    def _next_batch(self, receiver: UnrollReceiver, batches: BatchQueue) -> Batch | None:
        """The next full batch, or None once a stop was requested; waits for actors as long
        as it takes (telling so every 30 s), but never past the receiver thread's end."""
        waiting_since = time.time()
        while not self.stop_requested.is_set():
            if not receiver.is_alive():  # never a live learner that no longer trains
                raise ReceiverStopped(f"the unroll receiver thread ended: {receiver.error}")
            batch = batches.get(timeout=1.0)
            if batch is not None:
                return batch
            if time.time() - waiting_since > 30:
                log.info("waiting for unrolls on %s (%d received so far)",
                         receiver.sock.address, receiver.unrolls)
                waiting_since = time.time()
        return None

    def _agree(self, batch: Batch | None, log_now: bool, checkpoint_now: bool) -> Control:
        """This rank's part of the Control, summed over every rank."""
        mine = Control(stop=float(batch is None or self.stop_requested.is_set()))
        if batch is not None:
            mine.frames = self.frames_per_update
            mine.return_sum = sum(batch.episodes.returns)
            mine.length_sum = sum(batch.episodes.lengths)
            mine.episodes = len(batch.episodes.returns)
        if self.is_chief:
            mine.log_now, mine.checkpoint_now = float(log_now), float(checkpoint_now)
        return Control.from_array(self.backend.allreduce_sum(mine.to_array()))

    def step(self, batch: Batch, frames_after: int) -> dict[str, float]:
        """One update (`--passes` optimizer steps) at the scheduled learning rate (held for
        `--lr_hold_fraction` of the frame budget, then annealed linearly to 0) on the
        batch's fresh unrolls and, with replay, replayed ones; returns the last step's
        logged scalars."""
        cfg = self.cfg
        learning_rate = scheduled_learning_rate(cfg.learning_rate, self.counters.frames,
                                                cfg.total_environment_frames,
                                                cfg.lr_hold_fraction)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        part = ReplayedPart(None, batch.size, 0)
        extra = {}
        if self.replay is not None:
            part = self.replay.mix_into(batch, self.counters.updates, self.counters.frames)
            extra = self.replay.loss_inputs(part)
            self.replay.keep(batch)
        tensors = to_device(batch.columns(part.columns) | extra, self.device)
        core = tuple(t.contiguous() for t in core_state(tensors))  # the LSTM needs it
        skipped = 0.0
        for _ in range(cfg.passes):  # every rank makes the same number: allreduces pair up
            stats = learn_step(self.model, self.optimizer, self.backend, tensors, core,
                               self.learning, cfg.gradients_clipping)
            skipped = max(skipped, stats["skipped"])
        self.learning.after_update(self.model, self.counters.frames, frames_after)
        unroll_errors = stats.pop("unroll_errors")
        if self.replay is not None:
            self.replay.update_priorities(part, unroll_errors)
            stats |= self.replay.stats(part)
        stats["skipped"] = skipped
        stats["learning_rate"] = learning_rate
        return stats

    def _count(self, interval: IntervalStats, control: Control,
               stats: dict[str, float]) -> None:
        """Add an applied (or skipped) update to the counters and the log interval."""
        self.counters.frames += int(control.frames)
        self.counters.updates += 1
        interval.local_frames += self.frames_per_update
        interval.return_sum += control.return_sum
        interval.length_sum += control.length_sum
        interval.episodes += control.episodes
        if stats.pop("skipped"):
            self.skipped_updates += 1
            log.warning("update %d skipped: non-finite loss or gradient (grad norm %s); "
                        "%d skipped so far", self.counters.updates, stats["grad_norm"],
                        self.skipped_updates)
        self._warn_about_the_torso(stats)
        interval.last = stats

    def _warn_about_the_torso(self, stats: dict[str, float]) -> None:
        """Say once when the torso is dying and once when it is dead (dead ReLUs: nothing
        more is learned, and nothing else would show it but a flat curve)."""
        state = self.torso_watch.check(stats["feature_std"])
        if state is None:
            return
        watch = self.torso_watch
        seen = (f"feature_std {stats['feature_std']:.1e}, "
                f"{100 * stats['dead_features']:.0f}% of the features always zero")
        if state == "dead":
            log.warning("update %d: the torso's features no longer vary across the batch "
                        "(%s): the network cannot tell one observation from another and "
                        "will learn nothing more; restart with a smaller --learning_rate",
                        self.counters.updates, seen)
        else:
            log.warning("update %d: the torso's features vary %.0fx less than at their "
                        "peak (%s): its ReLUs are dying, and runs that got here on Pong "
                        "stopped learning; if feature_std in logs.csv keeps falling, "
                        "restart with a smaller --learning_rate", self.counters.updates,
                        watch.peak / max(watch.average, 1e-12), seen)

    def _write_logs(self, interval: IntervalStats, receiver: UnrollReceiver, batches: BatchQueue,
                    logs: LearnerLogs, run_start: float, run_start_frames: int) -> None:
        now = time.time()
        elapsed = max(now - interval.start_time, 1e-9)
        logs.rank_row({
            "time": now, "updates": self.counters.updates, "frames": self.counters.frames,
            "local_frames": interval.local_frames,
            "local_sps": interval.local_frames / self.frames_per_step / elapsed,
            "param_checksum": parameter_checksum(self.model),
        })
        if not self.is_chief:
            return
        episodes = int(interval.episodes)
        row = {
            "time": now, "frames": self.counters.frames,
            "sps": (self.counters.frames - interval.start_frames)
            / self.frames_per_step / elapsed,
            "updates": self.counters.updates, "episodes": episodes,
            "mean_episode_return": interval.return_sum / episodes if episodes else None,
            "mean_episode_length": interval.length_sum / episodes if episodes else None,
            **interval.last,
            "policy_lag": float(np.mean(interval.lags)) if interval.lags else 0.0,
            "queue_depth": batches.depth(), "dropped_messages": receiver.drops.total,
            "unroll_bytes": receiver.unroll_bytes, "stream_restarts": receiver.stream_restarts,
            "skipped_updates": self.skipped_updates,
        }
        logs.run_row(row)
        if interval.last:
            log.info(status_line(row, self.cfg.total_environment_frames, now - run_start,
                                 run_start_frames))
