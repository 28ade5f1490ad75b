"""The value-based machinery Ape-X (apex.py) and R2D2 (r2d2.py) share: epsilon-greedy actors
that record their Q-values and compute each unroll's first priority, and a learner that
trains a dueling double-Q network on n-step targets (qlearning.py) against a target network
copied every `--target_update_frames` frames, with an optional burn-in of the recurrent
state. Tensor code is imported inside the methods that act or learn (impala/algorithm.py).

Departures from the papers, and why:
- Replay holds unrolls (sequences), not single transitions, for Ape-X too, so one format
  (unroll.py: frames once per step) serves every algorithm. An unroll's priority is the
  mix eta max|delta| + (1 - eta) mean|delta| of its trained transitions (R2D2: eta 0.9;
  Ape-X: eta 0, the mean, so an unroll is drawn in proportion to its transitions' total).
- As LASER does, each update trains on the B fresh unrolls plus replay_ratio x B replayed
  ones: every transition is learned from at least once, and every rank makes the same
  updates whatever its replay holds, so the allreduces pair up.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

from impala.algorithm import (
    Algorithm,
    Exploration,
    Head,
    Learning,
    LossResult,
    Panel,
    StatusItem,
    flag,
)

if TYPE_CHECKING:
    import numpy as np
    import torch

    from impala.config import Config
    from impala.nets import Agent
    from impala.unroll import RecordedSteps

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
    heads = (Head("advantage", per_action=True, init_gain=0.01),
             Head("value", per_action=False, init_gain=1.0))
    recorded = "q_values"  # what the actor was greedy in, for its priorities
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
    old_head_names = {"policy": "advantage", "baseline": "value"}
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

    @property
    def trained(self) -> tuple[int, int]:
        from impala.qlearning import trained_steps

        s = self.loss_config
        return trained_steps(self.cfg.unroll_length, s.burn_in, s.overlap)

    def exploration(self, first_env: int, count: int, total: int) -> Exploration:
        from impala.qlearning import exploration_epsilons

        epsilons = exploration_epsilons(first_env, count, total, self.flags.actor_epsilon,
                                        self.flags.actor_epsilon_alpha)
        return EpsilonGreedy(epsilons, self.loss_config, self.trained, first_env, total,
                             self.flags.exploration_frames)

    def learning(self, model: Agent) -> Learning:
        return ValueLearning(self.loss_config, self.trained, model)

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        from impala.qlearning import dueling_q

        return dueling_q(heads["value"], heads["advantage"]).argmax(dim=-1)


class EpsilonGreedy(Exploration):
    """Each environment greedy in Q but for its own epsilon (Ape-X's schedule over the run's
    environments), floored for the run's first `exploration_frames` by DQN's linear anneal
    from 1; each unroll's first priority from the Q-values it acted on."""

    def __init__(self, epsilons: torch.Tensor, config: QLossConfig,
                 trained: tuple[int, int], first_env: int, total: int,
                 exploration_frames: int = 0) -> None:
        self.own_epsilons = epsilons  # [N] Ape-X's, for good
        self.epsilon_tensor = epsilons  # [N] now
        self.epsilons = epsilons.numpy()
        self.config = config
        self.trained = trained
        self.first_env, self.total = first_env, total
        self.exploration_frames = exploration_frames
        self.at_frames(0)

    def at_frames(self, frames: int) -> None:
        if self.exploration_frames > 0:
            floor = max(0.0, 1.0 - frames / self.exploration_frames)
            self.epsilon_tensor = self.own_epsilons.clamp(min=floor)
            self.epsilons = self.epsilon_tensor.numpy()

    def episode_tags(self) -> dict[str, np.ndarray]:
        """The epsilon each environment explores with now: its episodes' tag."""
        return {EPSILON_TAG: self.epsilons}

    def act(self, heads: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        from impala.qlearning import dueling_q, epsilon_greedy

        q = dueling_q(heads["value"], heads["advantage"])[0]  # [N, A]
        return epsilon_greedy(q, self.epsilon_tensor).numpy(), q.numpy()

    def priorities(self, steps: RecordedSteps) -> np.ndarray:
        """The same TD errors as the learner's, with the actor's network as both online and
        target network (Ape-X computes first priorities in the actors)."""
        import torch

        from impala.qlearning import sequence_priorities, td_errors

        q = torch.from_numpy(steps.recorded)  # [T+1, N, A]
        errors = td_errors(q, q, q, torch.from_numpy(steps.reward),
                           torch.from_numpy(steps.done), torch.from_numpy(steps.action),
                           self.config, self.trained)
        return sequence_priorities(errors, self.config.priority_eta).numpy()

    def describe(self) -> str:
        floor = (f", at least 1 - frames / {self.exploration_frames} until then"
                 if self.exploration_frames else "")
        return (f"environments {self.first_env}-{self.first_env + len(self.epsilons) - 1} "
                f"of {self.total}, epsilon {self.own_epsilons.max():.3g} down to "
                f"{self.own_epsilons.min():.3g}{floor}")


class ValueLearning(Learning):
    """The learner's half: the online network is the model the runtime trains; this keeps
    the target network, a copy refreshed each time the run's frames pass a multiple of
    `target_update_frames`. Counted in frames, not updates, so the period means the same
    whatever the batch, the unroll length or the number of learners; the frames are
    global, so every rank copies on the same update and ranks stay bit-identical."""

    def __init__(self, config: QLossConfig, trained: tuple[int, int], model: Agent) -> None:
        self.config = config
        self.trained = trained
        self.target = copy.deepcopy(model)
        self.target.requires_grad_(False)

    def loss(self, model: Agent, batch: dict[str, torch.Tensor],
             core_state: tuple[torch.Tensor, ...]) -> LossResult:
        import torch

        from impala.mixing import IMPORTANCE_WEIGHT
        from impala.qlearning import dueling_q, sequence_priorities, td_errors

        inputs = [batch[name] for name in ("observation", "last_action", "reward", "done")]
        q, features = self._online_q(model, inputs, core_state)
        with torch.no_grad():
            target_output, _ = self.target(*inputs, core_state)
            target_q = dueling_q(target_output.heads["value"], target_output.heads["advantage"])
        errors = td_errors(q, q.detach(), target_q, batch["reward"], batch["done"],
                           batch["action"], self.config, self.trained)
        weights = batch.get(IMPORTANCE_WEIGHT)
        if weights is None:
            weights = torch.ones(errors.shape[1], device=errors.device)
        loss = 0.5 * (errors.pow(2) * weights.to(errors)).mean()
        priorities = sequence_priorities(errors.detach(), self.config.priority_eta)
        first, end = self.trained
        scalars = {"td_error": errors.detach().abs().mean(),
                   "q_value": q[first:end].detach().max(dim=-1).values.mean()}
        return LossResult(loss, scalars, priorities, features)

    def _online_q(self, model: Agent, inputs: list[torch.Tensor],
                  core_state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """Q [T+1, B, A] of the online network: the first `burn_in` steps only warm the
        recurrent state up (no gradient: R2D2's burn-in), the rest carry the gradient.
        Also the torso's features of the trained part, detached."""
        import torch

        from impala.qlearning import dueling_q

        burn_in = self.config.burn_in
        if burn_in:
            with torch.no_grad():
                warm, core_state = model(*(x[:burn_in] for x in inputs), core_state)
            output, _ = model(*(x[burn_in:] for x in inputs), core_state)
            q = torch.cat([dueling_q(warm.heads["value"], warm.heads["advantage"]),
                           dueling_q(output.heads["value"], output.heads["advantage"])])
        else:
            output, _ = model(*inputs, core_state)
            q = dueling_q(output.heads["value"], output.heads["advantage"])
        return q, output.features.detach()

    def after_update(self, model: Agent, frames_before: int, frames_after: int) -> None:
        period = self.config.target_update_frames
        if frames_after // period > frames_before // period:
            self.target.load_state_dict(model.state_dict())
