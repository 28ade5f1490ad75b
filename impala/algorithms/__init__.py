"""One runtime, several algorithms: what differs per algorithm, behind one small interface.

The actor loop, the unroll and its transport, replay, the launcher, logs, checkpoints and
the Horovod step are shared. Each algorithm module says only:
- on the actor: how actions are chosen from the agent's output and what is recorded beside
  them (`act`, `head_field`), how many steps neighbouring unrolls share (`overlap`), and
  the priority each unroll enters replay with (`actor_priorities`, or None for "the
  largest so far");
- on the learner: the loss of a batch and what to do after an update (`learner`);
- in evaluation: the action it plays (`evaluation_action`).

`impala` (V-trace actor-critic, optional LASER replay: impala.py), `apex` (Horgan et al.
2018: apex.py) and `r2d2` (Kapturowski et al. 2019: r2d2.py); the last two share the
value-based machinery of value.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from impala.nets import build_agent

if TYPE_CHECKING:
    from impala.config import Config
    from impala.envs import EnvInfo
    from impala.nets import Agent, AgentOutput


class LossResult(NamedTuple):
    total_loss: torch.Tensor  # scalar, with gradient
    scalars: dict[str, float]  # what logs.csv shows of this update
    column_errors: torch.Tensor  # [B] each unroll's error: its replay priority
    features: torch.Tensor  # [T', B, F] the torso's output (detached), for its health


class Algorithm:
    """The interface the shared runtime calls; subclasses fill it in."""

    name = "base"
    head_field = "policy_logits"  # what the actor records per step beside its action
    # Whether the agent's core also sees the last action and reward (IMPALA's and R2D2's
    # agents do; Ape-X's dueling network sees frames only).
    action_reward_inputs = True
    explores_with_epsilons = False  # the actor's per-environment epsilons are used (Ape-X)

    def build_agent(self, agent_name: str, env: EnvInfo) -> Agent:
        """The agent the learner, every actor and evaluation build, alike."""
        return build_agent(agent_name, env, self.action_reward_inputs)

    @property
    def overlap(self) -> int:
        """Steps an unroll shares with the previous one of its environment (>= 1)."""
        return 1

    # -------------------------------------------------------------------- actor side
    def act(self, output: AgentOutput, epsilons: torch.Tensor
            ) -> tuple[np.ndarray, np.ndarray]:
        """(actions [N], recorded head [N, A]) from one forward pass over N envs ([1, N])."""
        raise NotImplementedError

    def actor_priorities(self, buffers: dict[str, np.ndarray]) -> np.ndarray | None:
        """Each env's replay priority for the unroll in `buffers` ([N, T+1, ...]), or None."""
        return None

    # ------------------------------------------------------------------ learner side
    def learner(self, model: Agent) -> Learning:
        raise NotImplementedError

    # ------------------------------------------------------------------- evaluation
    def evaluation_action(self, output: AgentOutput) -> torch.Tensor:
        """The action played by --mode=test/video: [T, B]."""
        raise NotImplementedError


class Learning:
    """The learner's side of an algorithm: the loss of one batch, and any state of its own
    (a target network) kept in step with the updates."""

    def loss(self, model: Agent, batch: dict[str, torch.Tensor],
             core_state: tuple[torch.Tensor, ...]) -> LossResult:
        """`batch`: `[T+1, B, ...]` tensors as rollout.Batch holds them (with replay also
        `importance_weight` and `replayed`, [B])."""
        raise NotImplementedError

    def after_update(self, model: Agent, frames_before: int, frames_after: int) -> None:
        """Called on every rank after each update, with the run's frames (over all ranks,
        so every rank sees the same numbers) before and after it."""


def build_algorithm(cfg: Config) -> Algorithm:
    """The algorithm `--algorithm` names, with its settings from the Config."""
    if cfg.algorithm == "impala":
        from impala.algorithms.impala import Impala

        return Impala(cfg.loss_settings)
    if cfg.algorithm == "apex":
        from impala.algorithms.apex import apex

        return apex(cfg)
    if cfg.algorithm == "r2d2":
        from impala.algorithms.r2d2 import r2d2

        return r2d2(cfg)
    raise ValueError(f"unknown algorithm {cfg.algorithm!r}")
