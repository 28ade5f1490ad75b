"""Settings that both the flags (config.py) and the algorithm (losses.py, laser.py) need,
so that each imports them from here, downward, and neither imports the other. No torch."""

from __future__ import annotations

from dataclasses import dataclass

# How the loss clips rewards (losses.clip_rewards).
REWARD_CLIPPING_MODES = ("abs_one", "soft_asymmetric", "none")


@dataclass(frozen=True)
class LossSettings:
    discounting: float = 0.99
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reward_clipping: str = "abs_one"
    # LASER's trust region: a replayed step whose KL(pi || mu) exceeds this (nats) is left
    # out of the policy-gradient and baseline losses; 0 turns the mask off.
    trust_region_threshold: float = 0.0


@dataclass(frozen=True)
class ReplaySchedule:
    """Replayed unrolls per fresh one (laser.py): `initial` until the run has
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


# The learning algorithms (`--algorithm`; impala/algorithms/).
ALGORITHMS = ("impala", "apex", "r2d2")


@dataclass(frozen=True)
class ValueSettings:
    """What the value-based algorithms (Ape-X, R2D2) learn with; qlearning.py's math."""

    discounting: float = 0.99
    n_step: int = 3
    burn_in: int = 0  # steps that only warm the recurrent state up (R2D2)
    reward_clipping: str = "abs_one"
    rescaled: bool = False  # R2D2's invertible value rescaling h instead of clipping
    priority_eta: float = 0.0  # priority = eta max|delta| + (1 - eta) mean|delta|
    target_update_frames: int = 32_000  # frames (all learners) between target-network copies

    @property
    def overlap(self) -> int:
        """Steps an unroll shares with the previous one of its environment: the burn-in
        plus the step both hold (the T+1 convention), and at least n, so every trained
        transition without burn-in sees its n steps ahead (qlearning.trained_steps)."""
        return max(self.burn_in + 1, self.n_step)
