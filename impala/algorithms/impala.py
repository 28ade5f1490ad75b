"""IMPALA (Espeholt et al. 2018): actors sample from the policy and record its logits; the
learner trains with the V-trace actor-critic loss (losses.py, vtrace.py). With
`--replay_ratio` > 0 each update also replays unrolls, with LASER's trust region on them
(Schmitt et al. 2019). Tensor code is imported inside the methods that act or learn, so that
reading flags loads no torch (impala/algorithm.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from impala.algorithm import (
    Algorithm,
    Exploration,
    Head,
    Learning,
    LossResult,
    Panel,
    Preset,
    StatusItem,
    flag,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from impala.config import Config
    from impala.losses import ImpalaLossConfig
    from impala.nets import Agent


@dataclass(frozen=True)
class ImpalaFlags:
    entropy_cost: float = flag(0.01, "weight of the entropy bonus")
    baseline_cost: float = flag(0.5, "weight of the baseline loss")
    trust_region_threshold: float = flag(0.0, "LASER's trust region: replayed steps whose "
                                         "KL(learner policy || behaviour policy) exceeds "
                                         "this many nats are left out of the loss (0: off)")


ATARI = Preset(
    name="atari", families=("atari", "image"),
    values={"batch_size": 8, "learning_rate": 0.0012, "lr_hold_fraction": 0.8,
            "total_environment_frames": 20_000_000, "initial_replay_ratio": 4.0,
            "initial_replay_frames": 2_000_000, "replay_ratio": 3.0, "replay_size": 3000,
            "priority_exponent": 0.6, "trust_region_threshold": 0.3},
    rule="4x the paper's updates per frame at 2x its rate, held for 80% of the budget; "
         "LASER replay of the last 3,000 unrolls, 4 per fresh one for 2M frames, then 3",
    record=("impala-pong-preset-s1", "impala-pong-preset-s1-b", "impala-pong-preset-s1-c",
            "impala-pong-preset-s1-d", "impala-pong-preset-s2", "impala-pong-preset-s2-b",
            "impala-pong-preset-s2-c",
            "tests/e2e/test_training.py::"
            "test_an_image_task_that_needs_stacked_frames_is_learned_with_the_defaults"))
CLASSIC = Preset(
    name="classic", families=("classic",),
    values={"agent_name": "MLPAgent", "num_envs": 16, "batch_size": 16,
            "learning_rate": 0.005, "baseline_cost": 0.25, "discounting": 0.98,
            "total_environment_frames": 300_000},
    rule="small fast updates for vector observations",
    record=("tests/e2e/test_training.py::"
            "test_cartpole_is_learned_within_the_frame_budget_with_the_defaults",))


class Impala(Algorithm):
    name = "impala"
    is_default = True
    flags_class = ImpalaFlags
    presets = (ATARI, CLASSIC)
    heads = (Head("policy_logits", per_action=True, init_gain=0.01),
             Head("baseline", per_action=False, init_gain=1.0))
    recorded = "policy_logits"  # the behaviour policy, for V-trace's importance weights
    log_scalars = ("pg_loss", "baseline_loss", "entropy", "policy_kl", "rho_clipped",
                   "trust_region_masked")
    panels = (Panel("loss terms (sums over the batch)", ("total_loss", "pg_loss",
                                                         "baseline_loss"), symlog=True),
              Panel("policy entropy (nats per step)", ("entropy",)))
    status = (StatusItem("loss", "total_loss"),)
    old_head_names = {"policy": "policy_logits", "baseline": "baseline"}

    @classmethod
    def problems(cls, cfg: Config):
        if not cfg.algorithm_flags.trust_region_threshold >= 0:
            yield (f"--trust_region_threshold must be >= 0, got "
                   f"{cfg.algorithm_flags.trust_region_threshold}")

    def exploration(self, first_env: int, count: int, total: int) -> Exploration:
        return SampleFromPolicy()

    def learning(self, model: Agent) -> Learning:
        from impala.losses import ImpalaLossConfig

        s, cfg = self.flags, self.cfg
        return ImpalaLearning(ImpalaLossConfig(cfg.discounting, s.baseline_cost, s.entropy_cost,
                                           cfg.reward_clipping, s.trust_region_threshold))

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        from impala.losses import sample_actions

        return sample_actions(heads["policy_logits"])  # sampled, as the paper evaluates


class SampleFromPolicy(Exploration):
    def act(self, heads: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        from impala.losses import sample_actions

        logits = heads["policy_logits"]
        return sample_actions(logits)[0].numpy(), logits[0].numpy()


class ImpalaLearning(Learning):
    def __init__(self, config: ImpalaLossConfig) -> None:
        self.config = config

    def loss(self, model: Agent, batch: dict[str, torch.Tensor],
             core_state: tuple[torch.Tensor, ...]) -> LossResult:
        from impala.losses import impala_loss
        from impala.mixing import IMPORTANCE_WEIGHT, REPLAYED

        output, _ = model(batch["observation"], batch["last_action"], batch["reward"],
                          batch["done"], core_state)
        stats = impala_loss(
            target_logits=output.heads["policy_logits"], baseline=output.heads["baseline"],
            behavior_logits=batch["policy_logits"], actions=batch["action"],
            rewards=batch["reward"], done=batch["done"], config=self.config,
            column_weights=batch.get(IMPORTANCE_WEIGHT), replayed=batch.get(REPLAYED),
        )
        scalars = {"pg_loss": stats.pg_loss, "baseline_loss": stats.baseline_loss,
                   "entropy": stats.entropy, "policy_kl": stats.policy_kl,
                   "rho_clipped": stats.rho_clipped,
                   "trust_region_masked": stats.trust_region_masked}
        return LossResult(stats.total_loss, scalars, stats.unroll_errors,
                          output.features.detach())
