"""One optimizer step: the algorithm's loss, backward, and the backend's averaging,
clipping and step; and the torso's health. No sockets, no processes, no clocks."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from impala.algorithm import Learning, LossResult
from impala.distributed import Backend
from impala.nets import Agent

log = logging.getLogger("learner")


class StepResult(NamedTuple):
    loss: LossResult
    grad_norm: float  # of the averaged gradient, before clipping

    @property
    def skipped(self) -> bool:
        """Not applied: the loss or the averaged gradient was not finite (on every rank)."""
        return not math.isfinite(self.grad_norm)


def untimed(phase: str) -> AbstractContextManager[None]:
    """A phase that is not timed: the default where no profile is asked for."""
    return nullcontext()


def learn_step(model: Agent, optimizer: torch.optim.Optimizer, backend: Backend,
               batch: dict[str, torch.Tensor], core_state: tuple[torch.Tensor, ...],
               learning: Learning, max_grad_norm: float,
               phase: Callable[[str], AbstractContextManager[None]] | None = None
               ) -> StepResult:
    """One step on a batch of `[T+1, B, ...]` tensors (observation, last_action, reward,
    done, action, what the algorithm records; with replay also `importance_weight` and
    `replayed`, [B]). `phase`: times each part, for a profile (update.PhaseTimes)."""
    phase = phase or untimed
    with phase("forward and loss"):
        result = learning.loss(model, batch, core_state)
    optimizer.zero_grad()  # Horovod's wrapper takes no set_to_none
    # A non-finite loss on this rank must stop the update on every rank: times NaN, every
    # gradient is NaN, so the averaged gradient's norm is NaN everywhere and all ranks skip
    # the step (no host sync here; the allreduce starts inside backward()).
    loss = result.total_loss
    loss = loss * torch.where(torch.isfinite(loss), 1.0, float("nan"))
    with phase("backward"):
        loss.backward()
    with phase("allreduce, clip and step"):
        grad_norm = backend.apply_gradients(model, optimizer, max_grad_norm)
    return StepResult(result, grad_norm)


def torso_health(features: torch.Tensor) -> dict[str, torch.Tensor]:
    """How much the torso's features [T, B, F] still tell the steps of a batch apart, as
    0-dim tensors on the features' device (read to the host with the update's other
    statistics).

    `feature_std`: the std over the batch's T x B steps, averaged over features;
    `dead_features`: the share of features that are zero at every step (dead ReLUs). A
    torso whose `feature_std` falls to ~0 shows the heads the same input on every screen:
    nothing can be learned."""
    flat = features.flatten(0, 1).float()
    return {"feature_std": flat.std(dim=0).mean(),
            "dead_features": (flat == 0).all(dim=0).float().mean()}


@dataclass
class TorsoWatch:
    """Follows `feature_std` update by update and says, once each, when the torso is dying
    and when it is dead, so that a run that can no longer learn does not train on silently.

    Dead: `feature_std` below `dead` (every step of the batch looks the same to the heads).
    Dying: its moving average (over ~1 / (1 - smoothing) updates) below `dying_fraction` of
    the highest average so far: Pong runs that died fell below a tenth of their peak by
    ~0.5M frames, live ones never below 27%."""

    dead: float = 1e-5
    dying_fraction: float = 0.1
    smoothing: float = 0.99
    average: float | None = None
    peak: float = 0.0
    said: set[str] = field(default_factory=set)

    def check(self, feature_std: float) -> str | None:
        """Take one update's `feature_std`; returns "dead" or "dying" the first time each
        is seen (dead first), else None."""
        self.average = feature_std if self.average is None else (
            self.smoothing * self.average + (1.0 - self.smoothing) * feature_std)
        self.peak = max(self.peak, self.average)
        if feature_std < self.dead:
            state = "dead"
        elif self.average < self.dying_fraction * self.peak:
            state = "dying"
        else:
            return None
        if state in self.said:
            return None
        self.said.add(state)
        return state

    def warn(self, stats: dict[str, float], update: int) -> None:
        """Take update `update`'s torso statistics (`torso_health`) and say once when the
        torso is dying and once when it is dead (dead ReLUs: nothing more is learned, and
        nothing else would show it but a flat curve)."""
        state = self.check(stats["feature_std"])
        if state is None:
            return
        seen = (f"feature_std {stats['feature_std']:.1e}, "
                f"{100 * stats['dead_features']:.0f}% of the features always zero")
        if state == "dead":
            log.warning("update %d: the torso's features no longer vary across the batch "
                        "(%s): the network cannot tell one observation from another and "
                        "will learn nothing more; restart with a smaller --learning_rate",
                        update, seen)
        else:
            log.warning("update %d: the torso's features vary %.0fx less than at their "
                        "peak (%s): its ReLUs are dying, and runs that got here on Pong "
                        "stopped learning; if feature_std in logs.csv keeps falling, "
                        "restart with a smaller --learning_rate", update,
                        self.peak / max(self.average, 1e-12), seen)
