"""IMPALA (Espeholt et al. 2018): actors sample from the policy and record its logits; the
learner trains with the V-trace actor-critic loss. With `--replay_ratio` > 0 each update also
replays unrolls, with LASER's trust region on them (Schmitt et al. 2019).

The package: this declaration (flags, presets, heads, columns); `behaviour.py`, how it acts
and learns; `loss.py`, the loss terms; `vtrace.py`, the off-policy targets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from impala.algorithm import Algorithm, Head, Panel, Preset, StatusItem, flag

if TYPE_CHECKING:
    from impala.config import Config


POLICY, BASELINE = "policy_logits", "baseline"  # its heads (and POLICY is recorded)


@dataclass(frozen=True)
class ImpalaFlags:
    entropy_cost: float = flag(0.01, "weight of the entropy bonus")
    entropy_floor: float = flag(0.0, "the entropy bonus applies only to batches whose mean "
                                "policy entropy is below this fraction of the uniform "
                                "policy's (0.8: 80%% of log A nats); 0: always")
    entropy_floor_start: float = flag(0.0, "with --entropy_floor_frames: the floor at the "
                                      "run's first frame (1: the bonus always applies "
                                      "there), falling linearly to --entropy_floor over "
                                      "that many frames")
    entropy_floor_frames: int = flag(0, "frames over which the floor falls from "
                                     "--entropy_floor_start to --entropy_floor; 0: it "
                                     "stays at --entropy_floor")
    baseline_cost: float = flag(0.5, "weight of the baseline loss")
    trust_region_threshold: float = flag(0.0, "LASER's trust region: replayed steps whose "
                                         "KL(learner policy || behaviour policy) exceeds "
                                         "this many nats are left out of the loss (0: off)")
    value_normalization: str = flag("off", "popart: the baseline head learns values "
                                    "normalized by running statistics of their targets, and "
                                    "the losses see targets and advantages in those units "
                                    "(PopArt, impala/popart.py); off: raw values",
                                    choices=("off", "popart"))
    popart_step: float = flag(0.0003, "with --value_normalization=popart: the step of the "
                              "targets' running mean and mean square per update (beta)")


ATARI = Preset(
    name="atari", families=("atari", "image"),
    values={"batch_size": 8, "learning_rate": 0.0012, "lr_hold_fraction": 0.8,
            "total_environment_frames": 20_000_000, "initial_replay_ratio": 4.0,
            "initial_replay_frames": 2_000_000, "replay_ratio": 3.0, "replay_size": 3000,
            "priority_exponent": 0.6, "trust_region_threshold": 0.3, "entropy_floor": 0.8,
            "entropy_floor_start": 1.0, "entropy_floor_frames": 2_000_000},
    rule="4x the paper's updates per frame at 2x its rate, held for 80% of the budget; "
         "LASER replay of the last 3,000 unrolls, 4 per fresh one for 2M frames, then 3; "
         "the entropy bonus only below 80% of the uniform policy's entropy, after a "
         "floor falling from 100% over the first 2M frames",
    record=("impala-pong-preset-s1", "impala-pong-preset-s1-b", "impala-pong-preset-s1-c",
            "impala-pong-preset-s1-d", "impala-pong-preset-s2", "impala-pong-preset-s2-b",
            "impala-pong-preset-s2-c", "impala-pong-preset-floor-s1",
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
    heads = (Head(POLICY, per_action=True, init_gain=0.01),
             Head(BASELINE, per_action=False, init_gain=1.0))
    recorded = POLICY  # the behaviour policy, for V-trace's importance weights
    log_scalars = ("pg_loss", "baseline_loss", "entropy", "entropy_bonus_on", "policy_kl",
                   "rho_clipped", "trust_region_masked")
    panels = (Panel("loss terms (sums over the batch)", ("total_loss", "pg_loss",
                                                         "baseline_loss"), symlog=True),
              Panel("policy entropy (nats per step)", ("entropy",)))
    status = (StatusItem("loss", "total_loss"),)
    old_head_names = {"policy": POLICY, "baseline": BASELINE}
    behaviour = "impala.algorithms.impala.behaviour:ImpalaBehaviour"

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        if self.flags.value_normalization == "popart":
            policy, baseline = type(self).heads
            self.heads = (policy, dataclasses.replace(baseline, normalized=True))
            self.log_scalars = (*type(self).log_scalars, "value_mean", "value_sigma")

    @classmethod
    def problems(cls, cfg: Config):
        if not cfg.algorithm_flags.trust_region_threshold >= 0:
            yield (f"--trust_region_threshold must be >= 0, got "
                   f"{cfg.algorithm_flags.trust_region_threshold}")
        s = cfg.algorithm_flags
        if not 0 <= s.entropy_floor < 1:
            yield (f"--entropy_floor must be in [0, 1) (a fraction of the uniform policy's "
                   f"entropy), got {s.entropy_floor}")
        if s.entropy_floor_frames < 0:
            yield f"--entropy_floor_frames must be >= 0, got {s.entropy_floor_frames}"
        if not 0 < s.popart_step < 1:
            yield f"--popart_step must be in (0, 1), got {s.popart_step}"
        if s.entropy_floor_frames and not s.entropy_floor < s.entropy_floor_start <= 1:
            yield (f"--entropy_floor_start must be above --entropy_floor ({s.entropy_floor}) "
                   f"and at most 1 when --entropy_floor_frames is set, got "
                   f"{s.entropy_floor_start}")
