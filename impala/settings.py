"""Settings that both the flags (config.py) and the algorithm (losses.py) need, so that each
imports them from here, downward, and neither imports the other. No torch."""

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
