"""One learner update, the one sequence that the learner and the benchmarks both run: the
fresh batch with (under replay) replayed unrolls written after it, the algorithm's loss,
backward, the allreduce, clip and optimizer step (`--passes` times), the algorithm's
after-update work (a target copy), and the replayed unrolls' new priorities. No sockets,
no processes, no clocks.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from impala.algorithm import Learning
from impala.distributed import Backend
from impala.nets import Agent
from impala.schedules import scheduled_learning_rate
from impala.step import StepResult, learn_step, torso_health, untimed
from impala.unroll.batches import Batch, core_state, to_device, with_stacks
from impala.unroll.replay import UnrollReplay

if TYPE_CHECKING:
    from impala.config import Config
    from impala.redo import Recycler


@dataclass(frozen=True)
class UpdateConfig:
    learning_rate: float
    total_frames: int  # the frame budget the learning rate anneals over
    lr_hold_fraction: float
    passes: int  # optimizer steps per batch
    max_grad_norm: float

    @classmethod
    def of(cls, cfg: Config) -> UpdateConfig:
        return cls(cfg.learning_rate, cfg.total_environment_frames, cfg.lr_hold_fraction,
                   cfg.passes, cfg.gradients_clipping)


@dataclass
class UpdateStats:
    """What one update reports (its last optimizer step's numbers)."""

    total_loss: float
    grad_norm: float
    skipped: bool  # some step was not applied: a non-finite loss or gradient
    learning_rate: float
    scalars: dict[str, float]  # the algorithm's `log_scalars`
    health: dict[str, float]  # the torso's: feature_std, dead_features (step.torso_health)
    replay: dict[str, Any] = field(default_factory=dict)  # mixing.UnrollReplay.stats

    def row(self) -> dict[str, Any]:
        """As logs.csv columns."""
        return {"total_loss": self.total_loss, "grad_norm": self.grad_norm,
                "learning_rate": self.learning_rate, **self.scalars, **self.health,
                **self.replay}


class PhaseTimes:
    """Wall seconds per phase of the updates it timed: a profile for the benchmarks (the
    learner times nothing). On a GPU, `synchronize` (torch.cuda.synchronize) makes each
    phase end when its kernels do."""

    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.synchronize = synchronize or (lambda: None)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self.synchronize()
        start = time.perf_counter()
        yield
        self.synchronize()
        self.seconds[phase] += time.perf_counter() - start


def tensor_operations(call: Callable[[], object]) -> int:
    """Tensor operations `call` dispatches (top-level aten operations, counted by
    torch.profiler). On a GPU each is a kernel launch or more, and for a network this small
    their CPU cost is most of an update (profiled on an H200): fewer is
    faster there, and the count is the same on any machine."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        call()
    return sum(1 for event in prof.events() if event.name.startswith("aten::") and (
        event.cpu_parent is None or not event.cpu_parent.name.startswith("aten::")))


class Update:
    def __init__(self, model: Agent, optimizer: torch.optim.Optimizer, backend: Backend,
                 learning: Learning, replay: UnrollReplay | None, device: torch.device,
                 config: UpdateConfig, phases: PhaseTimes | None = None,
                 recycler: Recycler | None = None) -> None:
        self.model, self.optimizer, self.backend = model, optimizer, backend
        self.learning, self.replay = learning, replay
        self.device, self.config = device, config
        self.phase = phases or untimed
        self.recycler = recycler  # ReDo (--redo_threshold), or None

    def __call__(self, batch: Batch, number: int, frames_before: int,
                 frames_after: int) -> UpdateStats:
        """Update number `number` (from 0) on a full batch; `frames_before`/`after`: the
        run's frames over all learners before and after it (every rank passes the same)."""
        s = self.config
        learning_rate = scheduled_learning_rate(s.learning_rate, frames_before,
                                                s.total_frames, s.lr_hold_fraction)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        part = None
        tensors = batch.columns(batch.size)
        if self.replay is not None:
            with self.phase("replay sample and rebuild"):
                part = self.replay.mix_into(batch, number, frames_before)
            tensors = batch.columns(part.columns) | part.loss_inputs
        with self.phase("to device"):
            tensors = to_device(tensors, self.device)
            core = tuple(t.contiguous() for t in core_state(tensors))  # the LSTM needs it
        with self.phase("stack frames"):  # where the batch carries frames (--stack_frames)
            tensors = with_stacks(tensors)
        self.learning.before_update(frames_before)
        skipped = False
        for _ in range(s.passes):  # every rank makes the same number: allreduces pair up
            result = learn_step(self.model, self.optimizer, self.backend, tensors, core,
                                self.learning, s.max_grad_norm, self.phase)
            skipped = skipped or result.skipped
        with self.phase("after update"):
            self.learning.after_update(self.model, frames_before, frames_after,
                                       self.backend.allreduce_sum)
        recycler = self.recycler
        if recycler is not None and recycler.due(frames_before, frames_after):
            with self.phase("recycle dormant units"):
                recycler(tensors["observation"], self.optimizer, frames_after,
                         self.backend.allreduce_sum)
        with self.phase("statistics"):
            stats, errors = self._read_statistics(result, skipped, learning_rate,
                                                  with_errors=part is not None)
        if recycler is not None:
            stats.health |= {"dormant_units": recycler.last_dormant,
                             "recycled_units": float(recycler.recycled)}
        if part is not None:
            with self.phase("priorities"):
                self.replay.reprioritize(part, errors)
                stats.replay = self.replay.stats(part)
        return stats

    @staticmethod
    def _read_statistics(result: StepResult, skipped: bool, learning_rate: float,
                         with_errors: bool) -> tuple[UpdateStats, np.ndarray | None]:
        """The update's report and (`with_errors`) its column errors, in one host read."""
        loss = result.loss
        health = torso_health(loss.features)
        read, errors = read_to_host(
            {("total", "loss"): loss.total_loss,
             **{("scalar", name): v for name, v in loss.scalars.items()},
             **{("health", name): v for name, v in health.items()}},
            loss.column_errors if with_errors else None)
        stats = UpdateStats(read["total", "loss"], result.grad_norm, skipped, learning_rate,
                            {name: read["scalar", name] for name in loss.scalars},
                            {name: read["health", name] for name in health})
        return stats, errors


def read_to_host(values: Mapping[Hashable, torch.Tensor | float], errors: torch.Tensor | None
                 ) -> tuple[dict[Hashable, float], np.ndarray | None]:
    """An update's statistics (0-dim tensors, or floats) and, where given, its column
    errors `[B]` as floats and a float32 array, in one device-to-host read.

    Why one: each read waits for the device to finish everything queued before it. The
    losses make none (a GPU learner queues the whole update without waiting); this is the
    update's one wait for its statistics, after its optimizer step."""
    scalars = [v for v in values.values() if isinstance(v, torch.Tensor)]
    # A few operations for all of them, not three each: on a GPU each is a launch.
    with torch.no_grad():
        parts = [torch.stack(scalars)] if scalars else []
        if errors is not None:
            parts.append(errors.reshape(-1))
        host = (torch.cat(parts).float().cpu().numpy() if parts
                else np.empty(0, np.float32))
    read, position = {}, 0
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            read[key], position = float(host[position]), position + 1
        else:
            read[key] = float(value)
    return read, (host[position:] if errors is not None else None)
