"""What changes with the run's frames (over all learners), so that every rank changes it on
the same update and a slow machine and a fast one follow the same schedule: the learning
rate (held, then annealed), the replay ratio (a first ratio, then another) and IMPALA's
entropy floor (falling, then constant). No torch."""

from __future__ import annotations

from dataclasses import dataclass


def scheduled_learning_rate(base: float, frames: int, budget: int, hold_fraction: float) -> float:
    """The learning rate after `frames` of a `budget` of frames: `base` for the first
    `hold_fraction` of the budget, then falling linearly to 0 at the budget. A hold of 0 is
    the paper's anneal from the first frame; a hold of 1 keeps `base` to the end. Holding
    lets a late riser climb at the full rate and still settles it at the end."""
    hold_frames = hold_fraction * budget
    if frames <= hold_frames or hold_fraction >= 1.0:
        return base
    return base * max(0.0, (budget - frames) / (budget - hold_frames))


@dataclass(frozen=True)
class ReplaySchedule:
    """Replayed unrolls per fresh one (unroll/replay.py): `initial` until the run has
    `initial_frames` fresh frames, then `ratio` (--initial_replay_ratio,
    --initial_replay_frames, --replay_ratio)."""

    initial: float
    initial_frames: int
    ratio: float

    @classmethod
    def constant(cls, ratio: float) -> ReplaySchedule:
        return cls(ratio, 0, ratio)

    def at(self, frames: int) -> float:
        return self.initial if frames < self.initial_frames else self.ratio

    @property
    def largest(self) -> float:
        """The most any update uses (0: replay is off)."""
        return max(self.initial, self.ratio) if self.initial_frames > 0 else self.ratio


@dataclass(frozen=True)
class FloorSchedule:
    """The entropy floor over a run: `start` at frame 0, falling linearly to `end` at
    `frames` and staying there; `frames` 0: always `end`. An `end` of 0 is no floor at all
    (the bonus always applies), whatever `start`: `--entropy_floor=0` turns off the
    preset's falling floor without its two other flags."""

    end: float = 0.0
    start: float = 0.0
    frames: int = 0

    def at(self, run_frames: int) -> float:
        if self.frames <= 0 or self.end == 0:
            return self.end
        done = min(1.0, run_frames / self.frames)
        return self.start + (self.end - self.start) * done
