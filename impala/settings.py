"""Settings that both the flags (config.py) and the tensor code (losses.py, mixing.py)
need, so that each imports them from here, downward, and neither imports the other. No
torch."""

from __future__ import annotations

from dataclasses import dataclass

# How the losses clip rewards (rewards.clip_rewards).
REWARD_CLIPPING_MODES = ("abs_one", "soft_asymmetric", "none")


@dataclass(frozen=True)
class ReplaySchedule:
    """Replayed unrolls per fresh one (mixing.py): `initial` until the run has
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
