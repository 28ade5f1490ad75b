"""The learner: train on batches of unrolls, keep in sync with the other learners through
the allreduce backend, publish new weights, log and checkpoint.

`Learner` wires the parts and owns the training loop: the socket thread
(`receiver.serve`) fills batches and answers weight requests, every version of the weights,
the first included, reaches it through one `WeightPublisher`, the rows go through
`logs.LearnerLogs`, and the checkpoint and replay file through `persistence.LearnerState`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from impala import auth
from impala.assembly import assemble, build_optimizer
from impala.config import Config
from impala.cores import learner_io_threads
from impala.counters import Control, IntervalStats, ReturnWindow
from impala.distributed import Backend, parameter_checksum, state_digest
from impala.envs import describe_env
from impala.logs import LearnerLogs, status_line
from impala.meta import RunMeta
from impala.persistence import LearnerState
from impala.presets import preset_values
from impala.process import keep_freed_memory
from impala.publisher import WeightPublisher
from impala.receiver import UnrollReceiver, serve
from impala.redo import Recycler
from impala.step import TorsoWatch
from impala.unroll.batches import Batch, BatchQueue
from impala.unroll.replay import UnrollReplay
from impala.update import Update, UpdateConfig, UpdateStats

if TYPE_CHECKING:
    from impala.tracking import WandbRun

log = logging.getLogger("learner")


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
        self.keys = auth.ensure_keys(self.run_dir) if cfg.auth == "curve" else None

        env_info = describe_env(cfg.env_config)
        parts = assemble(cfg, env_info, self.device, training=True)
        self.algorithm, self.model, self.layout = parts.algorithm, parts.model, parts.layout
        # Fresh frames this learner consumes per update (agent steps x action repeat): an
        # unroll brings T + 1 - overlap steps the previous one of its environment did not.
        self.frames_per_update = (cfg.batch_size * (cfg.unroll_length + 1 - self.layout.overlap)
                                  * env_info.frames_per_step)
        self.frames_per_step = env_info.frames_per_step
        # Each rank replays its own actors' unrolls (kept with the checkpoint).
        self.replay = UnrollReplay(
            self.layout, cfg.batch_size, cfg.replay_schedule, cfg.replay_size,
            cfg.priority_exponent, cfg.importance_sampling_exponent, seed=cfg.seed + self.rank,
        ) if cfg.replay_schedule.largest > 0 else None
        optimizer = build_optimizer(cfg, self.model)
        self.state = LearnerState(cfg, backend, self.replay)
        self.counters = self.state.restore(self.model, optimizer, self.algorithm.old_head_names)
        self.skipped_updates = 0  # updates not applied: non-finite loss or gradient
        self.torso_watch = TorsoWatch()  # warns when the features stop varying
        self.optimizer = backend.prepare(self.model, optimizer)
        # After prepare: a target network copies the weights every rank now shares.
        self.update = Update(self.model, self.optimizer, backend,
                             self.algorithm.learning(self.model), self.replay, self.device,
                             UpdateConfig.of(cfg), recycler=self._recycler())
        log.info("rank %d (pid %d) starts at %d frames, %d updates, parameter checksum %r, "
                 "state digest %s", self.rank, os.getpid(), self.counters.frames,
                 self.counters.updates, parameter_checksum(self.model), self.state_digest())

    def _recycler(self) -> Recycler | None:
        """ReDo's recycler where --redo_threshold asks for one."""
        cfg = self.cfg
        if cfg.redo_threshold <= 0:
            return None
        recycler = Recycler(self.model, cfg.redo_threshold, cfg.redo_interval_frames, cfg.seed)
        log.info("ReDo: every %d frames, the torso's units at or below %g of their layer's "
                 "mean activity are recycled (%d layers)", cfg.redo_interval_frames,
                 cfg.redo_threshold, len(recycler.layers))
        return recycler

    def state_digest(self) -> str:
        """The hash of all this rank must hold as every other rank does."""
        return state_digest(self.model, self.optimizer, self.update.learning.state_tensors(),
                            (self.counters.frames, self.counters.updates))

    def save_checkpoint(self) -> None:
        self.state.save(self.model, self.optimizer, self.counters)

    # ----------------------------------------------------------------------- main loop
    def run(self) -> str:
        """Train until the frame budget or a stop request; returns the exit status."""
        tracker = self._tracker()  # before serving: a missing package stops the run here
        receiver, batches = self._serve()
        logs = LearnerLogs(self.run_dir, self.rank, self.algorithm.log_scalars,
                           self.algorithm.episode_tags, tracker, self.counters.frames)
        meta = plotter = None
        if self.is_chief:
            from impala.plotter import CurvePlotter  # pandas: only where curves are drawn

            # The panels go in meta.json, so curve.png can be redrawn from the directory.
            meta = RunMeta(self.run_dir, self.cfg.to_dict(), role="learner",
                           preset=preset_values(self.cfg),
                           panels=[dataclasses.asdict(p) for p in self.algorithm.panels])
            plotter = CurvePlotter(self.run_dir)
            plotter.start()
        status = "error"
        try:
            status = self.train(receiver, batches, logs)
        finally:
            receiver.stop()
            if status != "error":  # an error exit keeps the last good checkpoint
                self.save_checkpoint()
            logs.close()
            if meta is not None:
                meta.finish(status, frames=self.counters.frames, updates=self.counters.updates)
            if plotter is not None:
                plotter.close()  # the final picture, with every row
            if tracker is not None:
                tracker.finish(self.run_dir / "curve.png", exit_code=int(status == "error"))
        return status

    def _tracker(self) -> WandbRun | None:
        """Rank 0's W&B run where --wandb_project is set."""
        cfg = self.cfg
        if not (self.is_chief and cfg.wandb_project):
            return None
        from impala.tracking import WandbRun  # wandb: an optional extra

        return WandbRun(self.run_dir, cfg.to_dict(), cfg.wandb_project, cfg.wandb_entity,
                        cfg.wandb_group)

    def _serve(self) -> tuple[UnrollReceiver, BatchQueue]:
        cfg = self.cfg
        receiver, batches = serve(cfg, self.layout, self.device,
                                  self.replay.max_replayed if self.replay else 0, self.keys,
                                  name=f"learner-{self.rank}")
        io_threads = learner_io_threads(cfg.learner_io_threads)
        log.info("learner %d/%d listening on %s (%s on %s, %s, %s, preset %s, batch %d x "
                 "T=%d%s%s%s, %d ZeroMQ I/O thread%s)", self.rank, self.backend.size,
                 receiver.address, cfg.agent_name, self.device, cfg.level_name, cfg.algorithm,
                 cfg.preset, cfg.batch_size, cfg.unroll_length,
                 ", frame stacks gathered on the device"
                 if self.layout.frame_stack and cfg.stacks_on_device(self.device) else "",
                 self.model.activation_note(),
                 ", TF32 convolutions (--tf32=on)"
                 if self.device.type == "cuda" and cfg.tf32_allowed else "", io_threads,
                 "" if io_threads == 1 else "s")
        return receiver, batches

    def train(self, receiver: UnrollReceiver, batches: BatchQueue, logs: LearnerLogs) -> str:
        """Train, publishing the starting weights and then each update's to `receiver` from
        a second thread; returns `_train_loop`'s status once every version is published.
        Raises FloatingPointError if the weights became non-finite (they were not
        published)."""
        publisher = WeightPublisher(receiver.publish)
        publisher.start()
        try:
            publisher.submit(self.model, self.counters.updates, self.counters.frames)
            status = self._train_loop(receiver, batches, logs, publisher)
        finally:
            publisher.close()
        publisher.raise_if_failed()
        return status

    def _train_loop(self, receiver: UnrollReceiver, batches: BatchQueue, logs: LearnerLogs,
                    publisher: WeightPublisher) -> str:
        """The loop: take a batch, agree with the other ranks, update, hand the new
        weights to the publisher, then log and checkpoint when rank 0's clock says so.
        Returns "finished" at the frame budget or the target return, or "stopped" when
        any rank stops."""
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
                if self.counters.frames > interval.start_frames:  # updates since the last row
                    # Every rank stops on this same update: their last rows match.
                    self._write_logs(interval, receiver, batches, logs, run_start,
                                     run_start_frames)
                return "stopped"
            stats = self.update(batch, self.counters.updates, self.counters.frames,
                                self.counters.frames + int(control.frames))
            interval.lags.append(self.counters.updates - float(np.mean(batch.policy_versions)))
            logs.episodes(self.counters.frames, batch.episodes)
            batches.release(batch)
            self._count(interval, control, stats)
            publisher.submit(self.model, self.counters.updates, self.counters.frames)
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
            receiver.raise_if_stopped()  # never a live learner that no longer trains
            batch = batches.get(timeout=1.0)
            if batch is not None:
                return batch
            if time.time() - waiting_since > 30:
                log.info("waiting for unrolls on %s (%d received so far)",
                         receiver.address, receiver.counts().unrolls)
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

    def _count(self, interval: IntervalStats, control: Control, stats: UpdateStats) -> None:
        """Add an applied (or skipped) update to the counters and the log interval."""
        self.counters.frames += int(control.frames)
        self.counters.updates += 1
        interval.local_frames += self.frames_per_update
        interval.return_sum += control.return_sum
        interval.length_sum += control.length_sum
        interval.episodes += control.episodes
        if stats.skipped:
            self.skipped_updates += 1
            log.warning("update %d skipped: non-finite loss or gradient (grad norm %s); "
                        "%d skipped so far", self.counters.updates, stats.grad_norm,
                        self.skipped_updates)
        self.torso_watch.warn(stats.health, self.counters.updates)
        interval.last = stats.row()

    def _write_logs(self, interval: IntervalStats, receiver: UnrollReceiver, batches: BatchQueue,
                    logs: LearnerLogs, run_start: float, run_start_frames: int) -> None:
        row = logs.interval(interval, self.counters, parameter_checksum(self.model),
                            self.state_digest(), self.frames_per_step, receiver.counts(),
                            batches.depth(), self.skipped_updates)
        if row is not None and interval.last:
            log.info(status_line(row, self.cfg.total_environment_frames,
                                 time.time() - run_start, run_start_frames,
                                 self.algorithm.status))
