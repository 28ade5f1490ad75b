"""Reward clipping for the losses of every algorithm (`--reward_clipping`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tensor methods only: the flags read the modes without loading torch
    import torch

REWARD_CLIPPING_MODES = ("abs_one", "soft_asymmetric", "none")


def clip_rewards(rewards: torch.Tensor, mode: str) -> torch.Tensor:
    """Clip rewards of any shape.

    - `abs_one`: to [-1, 1].
    - `soft_asymmetric` (scalable_agent): 5 * tanh(r / 5), with negative rewards scaled by 0.3.
    - `none`: unchanged.
    """
    if mode == "abs_one":
        return rewards.clamp(-1.0, 1.0)
    if mode == "soft_asymmetric":
        squeezed = (rewards / 5.0).tanh()
        return squeezed.where(rewards >= 0, 0.3 * squeezed) * 5.0
    if mode == "none":
        return rewards
    raise ValueError(f"reward_clipping must be one of {REWARD_CLIPPING_MODES}, got {mode!r}")
