"""How IMPALA acts and learns: actors sample from the policy and record its logits; the
learner's loss is V-trace's actor-critic loss (loss.py), with LASER's trust region on the
replayed columns of a batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from impala.algorithm import (
    ACTION,
    DONE,
    IMPORTANCE_WEIGHT,
    LAST_ACTION,
    OBSERVATION,
    REPLAYED,
    REWARD,
    Behaviour,
    Exploration,
    Learning,
    LossResult,
)
from impala.algorithms.impala import BASELINE, POLICY
from impala.algorithms.impala.loss import ImpalaLossConfig, impala_loss, sample_actions
from impala.nets import Agent
from impala.schedules import FloorSchedule


class ImpalaBehaviour(Behaviour):
    def exploration(self, first_env: int, count: int, total: int) -> Exploration:
        return SampleFromPolicy()

    def learning(self, model: Agent) -> Learning:
        s, cfg = self.flags, self.cfg
        config = ImpalaLossConfig(cfg.discounting, s.baseline_cost, s.entropy_cost,
                                  cfg.reward_clipping, s.trust_region_threshold,
                                  s.entropy_floor)
        floor = FloorSchedule(s.entropy_floor, s.entropy_floor_start, s.entropy_floor_frames)
        popart_step = s.popart_step if s.value_normalization == "popart" else 0.0
        return ImpalaLearning(config, floor, popart_step)

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        return sample_actions(heads[POLICY])  # sampled, as the paper evaluates


class SampleFromPolicy(Exploration):
    def act(self, heads: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        logits = heads[POLICY]
        return sample_actions(logits)[0].numpy(), logits[0].numpy()


class ImpalaLearning(Learning):
    """The V-trace loss of each batch; with a `popart_step` (PopArt's beta, 0: off) the
    model's baseline head is a `ScaledHead`, whose statistics follow the value targets of
    every rank's batches after each update."""

    def __init__(self, config: ImpalaLossConfig, floor: FloorSchedule | None = None,
                 popart_step: float = 0.0) -> None:
        self.config, self.floor = config, floor or FloorSchedule(config.entropy_floor)
        self.popart_step = popart_step
        self.target_moments: torch.Tensor | None = None  # [2] of the last loss's targets

    def before_update(self, frames_before: int) -> None:
        self.config = replace(self.config, entropy_floor=self.floor.at(frames_before))

    def loss(self, model: Agent, batch: dict[str, torch.Tensor],
             core_state: tuple[torch.Tensor, ...]) -> LossResult:
        output, _ = model(batch[OBSERVATION], batch[LAST_ACTION], batch[REWARD], batch[DONE],
                          core_state)
        value_scale = model.heads[BASELINE].scale() if self.popart_step else None
        stats = impala_loss(
            target_logits=output.heads[POLICY], baseline=output.heads[BASELINE],
            behavior_logits=batch[POLICY], actions=batch[ACTION], rewards=batch[REWARD],
            done=batch[DONE], config=self.config,
            column_weights=batch.get(IMPORTANCE_WEIGHT), replayed=batch.get(REPLAYED),
            value_scale=value_scale,
        )
        self.target_moments = stats.target_moments
        scalars = {"pg_loss": stats.pg_loss, "baseline_loss": stats.baseline_loss,
                   "entropy": stats.entropy, "entropy_bonus_on": stats.entropy_bonus_on,
                   "policy_kl": stats.policy_kl,
                   "rho_clipped": stats.rho_clipped,
                   "trust_region_masked": stats.trust_region_masked}
        if value_scale is not None:  # PopArt's mu and sigma, in the units of the rewards
            scalars["value_mean"], scalars["value_sigma"] = value_scale
        return LossResult(stats.total_loss, scalars, stats.unroll_errors,
                          output.features.detach())

    def after_update(self, model: Agent, frames_before: int, frames_after: int,
                     allreduce_sum: Callable[[np.ndarray], np.ndarray]) -> None:
        """PopArt: every rank moves its statistics by the mean of all ranks' batches (the
        ranks' heads stay identical, as their weights do)."""
        if not self.popart_step or self.target_moments is None:
            return
        moments = np.append(self.target_moments.cpu().double().numpy(), 1.0)
        mean, mean_square, ranks = allreduce_sum(moments)
        # A non-finite loss on any rank makes the sum non-finite on all: every rank skips
        # the update and keeps its statistics alike.
        if np.isfinite([mean, mean_square]).all():
            model.heads[BASELINE].track(mean / ranks, mean_square / ranks, self.popart_step)
