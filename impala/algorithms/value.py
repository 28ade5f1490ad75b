"""The value-based machinery Ape-X and R2D2 share: epsilon-greedy actors that record their
Q-values and compute each unroll's first priority, and a learner that trains a dueling
double-Q network on n-step targets (qlearning.py) against a periodically copied target
network, with an optional burn-in of the recurrent state.

Departures from the papers, and why (README, sandbox/value.md):
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

import numpy as np
import torch

from impala import qlearning
from impala.algorithms import Algorithm, Learning, LossResult
from impala.laser import IMPORTANCE_WEIGHT
from impala.losses import clip_rewards
from impala.nets import Agent, AgentOutput
from impala.settings import ValueSettings
from impala.unroll import ACTION, DONE, Q_VALUES, REWARD


class ValueBased(Algorithm):
    head_field = Q_VALUES
    explores_with_epsilons = True

    def __init__(self, name: str, settings: ValueSettings, unroll_length: int,
                 action_reward_inputs: bool) -> None:
        self.name = name
        self.action_reward_inputs = action_reward_inputs
        self.settings = settings
        self.unroll_length = unroll_length
        self.trained = qlearning.trained_steps(unroll_length, settings.burn_in,
                                               settings.overlap)

    @property
    def overlap(self) -> int:
        return self.settings.overlap

    def act(self, output: AgentOutput, epsilons: torch.Tensor
            ) -> tuple[np.ndarray, np.ndarray]:
        """Greedy in Q, except a uniformly random action with each env's epsilon."""
        q = qlearning.dueling_q(output.baseline, output.policy_logits)[0]  # [N, A]
        actions = q.argmax(dim=-1)
        explore = torch.rand(len(actions)) < epsilons
        random = torch.randint(q.shape[-1], (len(actions),))
        return torch.where(explore, random, actions).numpy(), q.numpy()

    def actor_priorities(self, buffers: dict[str, np.ndarray]) -> np.ndarray:
        """Each env's unroll priority from the Q-values its actor acted on (Ape-X computes
        first priorities in the actors): the same TD errors as the learner's, with the
        actor's network as both online and target network."""
        q = torch.from_numpy(buffers[Q_VALUES]).transpose(0, 1)  # [T+1, N, A]
        errors = self.td_errors(q, q, q, _time_major(buffers[REWARD]),
                                _time_major(buffers[DONE]), _time_major(buffers[ACTION]))
        return qlearning.sequence_priorities(errors, self.settings.priority_eta).numpy()

    def td_errors(self, q_taken_from: torch.Tensor, online_q: torch.Tensor,
                  target_q: torch.Tensor, rewards: torch.Tensor, done: torch.Tensor,
                  actions: torch.Tensor) -> torch.Tensor:
        """delta_t = y_t - Q(x_t, a_t) over the trained steps: [T', B]. `q_taken_from`
        [T+1, B, A] (may carry gradient); online_q, target_q [T+1, B, A]."""
        s = self.settings
        targets = qlearning.n_step_double_q_targets(
            clip_rewards(rewards.float(), s.reward_clipping), done, online_q, target_q,
            s.discounting, s.n_step, s.rescaled)
        first, end = self.trained
        taken = q_taken_from[first:end].gather(-1, actions[first:end].long().unsqueeze(-1))
        return targets[first:end] - taken.squeeze(-1)

    def learner(self, model: Agent) -> Learning:
        return ValueLearning(self, model)

    def evaluation_action(self, output: AgentOutput) -> torch.Tensor:
        return qlearning.dueling_q(output.baseline, output.policy_logits).argmax(dim=-1)


def _time_major(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).transpose(0, 1)


class ValueLearning(Learning):
    """The learner's half: the online network is the model the runtime trains; this keeps
    the target network, a copy refreshed each time the run's frames pass a multiple of
    `target_update_frames`. Counted in frames, not updates, so the period means the same
    whatever the batch, the unroll length or the number of learners; the frames are
    global, so every rank copies on the same update and ranks stay bit-identical."""

    def __init__(self, algorithm: ValueBased, model: Agent) -> None:
        self.algorithm = algorithm
        self.target = copy.deepcopy(model)
        self.target.requires_grad_(False)

    def loss(self, model: Agent, batch: dict[str, torch.Tensor],
             core_state: tuple[torch.Tensor, ...]) -> LossResult:
        burn_in = self.algorithm.settings.burn_in
        inputs = [batch[name] for name in ("observation", "last_action", "reward", "done")]
        online_q, features = self._online_q(model, inputs, core_state, burn_in)
        with torch.no_grad():
            target_output, _ = self.target(*inputs, core_state)
            target_q = qlearning.dueling_q(target_output.baseline, target_output.policy_logits)
        errors = self.algorithm.td_errors(online_q, online_q.detach(), target_q,
                                          batch["reward"], batch["done"], batch["action"])
        weights = batch.get(IMPORTANCE_WEIGHT)
        weights = torch.ones(errors.shape[1]) if weights is None else weights
        loss = 0.5 * (errors.pow(2) * weights.to(errors.dtype)).mean()
        priorities = qlearning.sequence_priorities(errors.detach(),
                                                   self.algorithm.settings.priority_eta)
        first, end = self.algorithm.trained
        scalars = {"td_error": errors.detach().abs().mean().item(),
                   "q_value": online_q[first:end].detach().max(dim=-1).values.mean().item()}
        return LossResult(loss, scalars, priorities, features)

    @staticmethod
    def _online_q(model: Agent, inputs: list[torch.Tensor],
                  core_state: tuple[torch.Tensor, ...], burn_in: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """Q [T+1, B, A] of the online network: the first `burn_in` steps only warm the
        recurrent state up (no gradient: R2D2's burn-in), the rest carry the gradient.
        Also the torso's features of the trained part, detached."""
        if burn_in:
            with torch.no_grad():
                warm, core_state = model(*(x[:burn_in] for x in inputs), core_state)
            output, _ = model(*(x[burn_in:] for x in inputs), core_state)
            q = torch.cat([qlearning.dueling_q(warm.baseline, warm.policy_logits),
                           qlearning.dueling_q(output.baseline, output.policy_logits)])
        else:
            output, _ = model(*inputs, core_state)
            q = qlearning.dueling_q(output.baseline, output.policy_logits)
        return q, output.features.detach()

    def after_update(self, model: Agent, frames_before: int, frames_after: int) -> None:
        period = self.algorithm.settings.target_update_frames
        if frames_after // period > frames_before // period:
            self.target.load_state_dict(model.state_dict())
