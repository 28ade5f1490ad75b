"""Reward clipping for the losses of every algorithm (`--reward_clipping`)."""

from __future__ import annotations

import torch

from impala.settings import REWARD_CLIPPING_MODES


def clip_rewards(rewards: torch.Tensor, mode: str) -> torch.Tensor:
    """Clip rewards of any shape.

    - `abs_one`: to [-1, 1].
    - `soft_asymmetric` (scalable_agent): 5 * tanh(r / 5), with negative rewards scaled by 0.3.
    - `none`: unchanged.
    """
    if mode == "abs_one":
        return rewards.clamp(-1.0, 1.0)
    if mode == "soft_asymmetric":
        squeezed = torch.tanh(rewards / 5.0)
        return torch.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
    if mode == "none":
        return rewards
    raise ValueError(f"reward_clipping must be one of {REWARD_CLIPPING_MODES}, got {mode!r}")
