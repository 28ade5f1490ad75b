"""The value-based machinery Ape-X (`apex/`) and R2D2 (`r2d2/`) share: epsilon-greedy actors
that record their Q-values and compute each unroll's first priority, and a learner that
trains a dueling double-Q network on n-step targets against a target network copied every
`--target_update_frames` frames, with an optional burn-in of the recurrent state.

The package: this declaration (the shared flags, heads and columns); `behaviour.py`, how
they act and learn; `qlearning.py`, the targets, TD errors and priorities.

Departures from the papers, and why:
- Replay holds unrolls (sequences), not single transitions, for Ape-X too, so one format
  (frames once per step) serves every algorithm. An unroll's priority is the
  mix eta max|delta| + (1 - eta) mean|delta| of its trained transitions (R2D2: eta 0.9;
  Ape-X: eta 0, the mean, so an unroll is drawn in proportion to its transitions' total).
- As LASER does, each update trains on the B fresh unrolls plus replay_ratio x B replayed
  ones: every transition is learned from at least once, and every rank makes the same
  updates whatever its replay holds, so the allreduces pair up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from impala.algorithm import Algorithm, Head, Panel, StatusItem, flag

if TYPE_CHECKING:
    from impala.config import Config

ADVANTAGE, VALUE = "advantage", "value"  # the dueling heads: Q = value + centred advantage
Q_VALUES = "q_values"  # what an actor records: the Q-values it was greedy in
EPSILON_TAG = "epsilon"  # each episode carries the epsilon its environment explored with
# The value-based presets' RMSProp: a small epsilon (inside the root), since the loss is a
# mean over transitions whose small gradients the default 0.01 shrinks ~30-fold.
QUIET_RMSPROP = {"decay": 0.95, "epsilon": 1e-6}


@dataclass(frozen=True)
class ValueFlags:
    """The flags Ape-X and R2D2 share."""

    n_step: int = flag(3, "steps of reward before the bootstrap value")
    burn_in: int = flag(0, "steps at the start of each unroll that only warm the recurrent "
                        "state up (no gradient); unrolls then overlap by max(burn_in + 1, "
                        "n_step) steps")
    target_update_frames: int = flag(32_000, "frames (over all learners) between copies of "
                                     "the online network into the target network; every "
                                     "rank copies on the same update")
    actor_epsilon: float = flag(0.4, "environment i of the run's N explores with epsilon "
                                "actor_epsilon^(1 + actor_epsilon_alpha i / (N - 1))")
    actor_epsilon_alpha: float = flag(7.0, "see --actor_epsilon")
    value_rescaling: str = flag("auto", "learn Q under R2D2's invertible rescaling h of the "
                                "returns (on) or in raw returns (off); auto: the algorithm's "
                                "own (R2D2 on, Ape-X off)", ("auto", "on", "off"))
    exploration_frames: int = flag(0, "for the run's first this many frames every "
                                   "environment explores at least with epsilon 1 - frames / "
                                   "this (DQN's linear anneal; few environments see little "
                                   "else early on); 0: Ape-X's epsilons alone")


@dataclass(frozen=True)
class QLossConfig:
    """What the value-based loss computes with, gathered from the run's flags (shared and
    ValueFlags) and the algorithm's constants; no defaults of its own, so none can drift
    from the flags'."""

    discounting: float
    n_step: int
    burn_in: int  # steps that only warm the recurrent state up (R2D2)
    reward_clipping: str
    rescaled: bool  # R2D2's invertible value rescaling h instead of clipping
    priority_eta: float  # priority = eta max|delta| + (1 - eta) mean|delta|
    target_update_frames: int  # frames (all learners) between target copies

    @property
    def overlap(self) -> int:
        """Steps an unroll shares with the previous one of its environment: the burn-in
        plus the step both hold (the T+1 convention), and at least n, so every trained
        transition without burn-in sees its n steps ahead (qlearning.trained_steps)."""
        return max(self.burn_in + 1, self.n_step)

# The lowest third of Ape-X's epsilons at the default flags (environments with
# i / (N - 1) >= 2/3): the environments whose return RLlib's Ape-X reports, close to greedy.
# The mean over all environments sits lower: those at epsilon 0.1-0.4 lose points to chance.
# (1 + 1e-6): the episode files hold epsilons as float32.
_DEFAULTS = ValueFlags()
LEAST_EXPLORING_EPSILON = (_DEFAULTS.actor_epsilon ** (1 + _DEFAULTS.actor_epsilon_alpha * 2 / 3)
                           * (1 + 1e-6))


class ValueBased(Algorithm):
    """Ape-X and R2D2 subclass this and set `rescaled` (what --value_rescaling=auto
    means) and `priority_eta`."""

    flags_class = ValueFlags
    heads = (Head(ADVANTAGE, per_action=True, init_gain=0.01),
             Head(VALUE, per_action=False, init_gain=1.0))
    recorded = Q_VALUES  # for the actor's first priorities
    log_scalars = ("td_error", "q_value")
    episode_tags = (EPSILON_TAG,)
    panels = (Panel("TD error (mean |delta| of the trained steps)", ("td_error",)),
              Panel("Q-value (mean of max_a Q over the trained steps)", ("q_value",)),
              Panel(f"return of the least-exploring third (epsilon <= "
                    f"{LEAST_EXPLORING_EPSILON:.4f}, mean of the last 30)",
                    tag_at_most=(EPSILON_TAG, LEAST_EXPLORING_EPSILON)),
              Panel("replay fill (share of its capacity)", ("replay_fill",)),
              Panel("replay age (unrolls stored since a sampled one)", ("replay_age",)))
    status = (StatusItem("td", "td_error"), StatusItem("q", "q_value"))
    old_head_names = {"policy": ADVANTAGE, "baseline": VALUE}
    behaviour = "impala.algorithms.value.behaviour:ValueBehaviour"
    rescaled = False
    priority_eta = 0.0

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        flags = self.flags
        self.loss_config = QLossConfig(
            discounting=cfg.discounting, n_step=flags.n_step, burn_in=flags.burn_in,
            reward_clipping=cfg.reward_clipping,
            rescaled={"on": True, "off": False}.get(flags.value_rescaling, self.rescaled),
            priority_eta=self.priority_eta, target_update_frames=flags.target_update_frames)

    @classmethod
    def problems(cls, cfg: Config):
        flags = cfg.algorithm_flags
        if flags.n_step < 1:
            yield f"--n_step must be >= 1, got {flags.n_step}"
        if flags.burn_in < 0:
            yield f"--burn_in must be >= 0, got {flags.burn_in}"
        if flags.target_update_frames < 1:
            yield f"--target_update_frames must be >= 1, got {flags.target_update_frames}"
        if not 0.0 <= flags.actor_epsilon <= 1.0:
            yield f"--actor_epsilon must be in [0, 1], got {flags.actor_epsilon}"
        if flags.exploration_frames < 0:
            yield f"--exploration_frames must be >= 0, got {flags.exploration_frames}"
        overlap = max(flags.burn_in + 1, flags.n_step)
        if flags.n_step >= 1 and flags.burn_in >= 0 and cfg.unroll_length + 1 - overlap < 1:
            yield (f"--unroll_length={cfg.unroll_length} leaves no step to train: "
                   f"unrolls overlap by max(--burn_in + 1, --n_step) = {overlap} steps, "
                   f"so it must be >= {overlap}")

    @property
    def overlap(self) -> int:
        return self.loss_config.overlap
