"""Ape-X (Horgan et al. 2018): many actors, each environment with its own epsilon
(eps_i = 0.4^(1 + 7 i / (N - 1))), n-step (3) dueling double-Q with a target network,
prioritized replay (alpha 0.6, beta 0.4) whose first priorities the actors compute.

Its network sees the frames only, as the paper's dueling network does: with the last action
as an input (IMPALA's agents have it) a feed-forward agent learned to carry a cue in its
own actions and half-solved impala/Recall-v0 (sandbox/value.md)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from impala.algorithms.value import ValueBased

if TYPE_CHECKING:
    from impala.config import Config


def apex(cfg: Config) -> ValueBased:
    settings = dataclasses.replace(cfg.value_settings, rescaled=False, priority_eta=0.0)
    return ValueBased("apex", settings, cfg.unroll_length, action_reward_inputs=False)
