"""How Ape-X and R2D2 act and learn: epsilon-greedy actors that record their Q-values and
compute each unroll's first priority, and a learner that keeps the target network and
trains the online one on n-step double-Q targets (qlearning.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch

from impala.algorithm import (
    ACTION,
    DONE,
    IMPORTANCE_WEIGHT,
    LAST_ACTION,
    OBSERVATION,
    REWARD,
    Behaviour,
    Exploration,
    Learning,
    LossResult,
)
from impala.algorithms.value import ADVANTAGE, EPSILON_TAG, VALUE, QLossConfig, ValueBased
from impala.algorithms.value.qlearning import (
    dueling_q,
    epsilon_greedy,
    exploration_epsilons,
    sequence_priorities,
    td_errors,
    trained_steps,
)
from impala.nets import Agent
from impala.unroll.layout import RecordedSteps


def heads_q(heads: dict[str, torch.Tensor]) -> torch.Tensor:
    """Q [T, B, A] from the dueling heads."""
    return dueling_q(heads[VALUE], heads[ADVANTAGE])


class ValueBehaviour(Behaviour):
    algorithm: ValueBased

    @property
    def trained(self) -> tuple[int, int]:
        s = self.algorithm.loss_config
        return trained_steps(self.cfg.unroll_length, s.burn_in, s.overlap)

    def exploration(self, first_env: int, count: int, total: int) -> Exploration:
        epsilons = exploration_epsilons(first_env, count, total, self.flags.actor_epsilon,
                                        self.flags.actor_epsilon_alpha)
        return EpsilonGreedy(epsilons, self.algorithm.loss_config, self.trained, first_env,
                             total, self.flags.exploration_frames)

    def learning(self, model: Agent) -> Learning:
        return ValueLearning(self.algorithm.loss_config, self.trained, model)

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        return heads_q(heads).argmax(dim=-1)


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
        q = heads_q(heads)[0]  # [N, A]
        return epsilon_greedy(q, self.epsilon_tensor).numpy(), q.numpy()

    def priorities(self, steps: RecordedSteps) -> np.ndarray:
        """The same TD errors as the learner's, with the actor's network as both online and
        target network (Ape-X computes first priorities in the actors)."""
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
        inputs = [batch[name] for name in (OBSERVATION, LAST_ACTION, REWARD, DONE)]
        q, features = self._online_q(model, inputs, core_state)
        with torch.no_grad():
            target_output, _ = self.target(*inputs, core_state)
            target_q = heads_q(target_output.heads)
        errors = td_errors(q, q.detach(), target_q, batch[REWARD], batch[DONE], batch[ACTION],
                           self.config, self.trained)
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
        burn_in = self.config.burn_in
        if burn_in:
            with torch.no_grad():
                warm, core_state = model(*(x[:burn_in] for x in inputs), core_state)
            output, _ = model(*(x[burn_in:] for x in inputs), core_state)
            q = torch.cat([heads_q(warm.heads), heads_q(output.heads)])
        else:
            output, _ = model(*inputs, core_state)
            q = heads_q(output.heads)
        return q, output.features.detach()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {f"target.{name}": value for name, value in self.target.state_dict().items()}

    def after_update(self, model: Agent, frames_before: int, frames_after: int,
                     allreduce_sum: Callable[[np.ndarray], np.ndarray]) -> None:
        period = self.config.target_update_frames
        if frames_after // period > frames_before // period:
            self.target.load_state_dict(model.state_dict())
