"""IMPALA (Espeholt et al. 2018): sample from the policy, record its logits, learn with the
V-trace actor-critic loss (losses.py); with --replay_ratio > 0, LASER's replay (laser.py)."""

from __future__ import annotations

import numpy as np
import torch

from impala.algorithms import Algorithm, Learning, LossResult
from impala.laser import IMPORTANCE_WEIGHT, REPLAYED
from impala.losses import impala_loss
from impala.nets import Agent, AgentOutput
from impala.settings import LossSettings


class Impala(Algorithm):
    name = "impala"

    def __init__(self, settings: LossSettings) -> None:
        self.settings = settings

    def act(self, output: AgentOutput, epsilons: torch.Tensor
            ) -> tuple[np.ndarray, np.ndarray]:
        return output.action[0].numpy(), output.policy_logits[0].numpy()

    def learner(self, model: Agent) -> Learning:
        return ImpalaLearning(self.settings)

    def evaluation_action(self, output: AgentOutput) -> torch.Tensor:
        return output.action  # sampled, as the paper's evaluation does


class ImpalaLearning(Learning):
    def __init__(self, settings: LossSettings) -> None:
        self.settings = settings

    def loss(self, model: Agent, batch: dict[str, torch.Tensor],
             core_state: tuple[torch.Tensor, ...]) -> LossResult:
        output, _ = model(batch["observation"], batch["last_action"], batch["reward"],
                          batch["done"], core_state)
        stats = impala_loss(
            target_logits=output.policy_logits, baseline=output.baseline,
            behavior_logits=batch["policy_logits"], actions=batch["action"],
            rewards=batch["reward"], done=batch["done"], settings=self.settings,
            column_weights=batch.get(IMPORTANCE_WEIGHT), replayed=batch.get(REPLAYED),
        )
        scalars = {"pg_loss": stats.pg_loss, "baseline_loss": stats.baseline_loss,
                   "entropy": stats.entropy, "policy_kl": stats.policy_kl,
                   "rho_clipped": stats.rho_clipped,
                   "trust_region_masked": stats.trust_region_masked}
        return LossResult(stats.total_loss, scalars, stats.unroll_errors,
                          output.features.detach())
