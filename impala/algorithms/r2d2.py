"""R2D2 (Kapturowski et al. 2019): a recurrent agent learning from replayed sequences with
the recurrent state the actor stored at their start, a burn-in that only warms that state
up, n-step (5) double-Q targets under the invertible value rescaling h (instead of reward
clipping), and priorities 0.9 max|delta| + 0.1 mean|delta| per sequence."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from impala.algorithms.value import ValueBased

if TYPE_CHECKING:
    from impala.config import Config


def r2d2(cfg: Config) -> ValueBased:
    settings = dataclasses.replace(cfg.value_settings, rescaled=True, priority_eta=0.9)
    # The paper's LSTM sees the last action and reward beside the frames, as IMPALA's does.
    return ValueBased("r2d2", settings, cfg.unroll_length, action_reward_inputs=True)
