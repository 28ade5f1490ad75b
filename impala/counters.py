"""What the learner counts and what its ranks agree on: the per-update control vector that
one small allreduce sums, the run's counters, a log interval's sums, and the window of
recent returns behind --target_return."""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np


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
    last: dict[str, float | None] = field(default_factory=dict)  # the last update's row


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
