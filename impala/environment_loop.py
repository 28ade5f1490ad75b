"""The one loop that steps environments for an agent: the actor's, evaluation's
(`--mode=test`, `--mode=video`) and diagnosis's (impala/diagnose.py) all step through it, so
what an agent sees cannot differ between training and playing. An actor may step its Atari
games on ale-py's vector environment instead (impala/ale_vector_loop.py, `--env_backend`),
under the same rules, checked step by step against this loop.

N environments step together behind one batched forward pass. The rules, the same
everywhere:
- An episode (a whole game, all lives) ends where the environment says terminated or
  truncated: its return and length are recorded and the environment is reset.
- A lost life while the game goes on (envs.LifeLossSignal) is an episode start for the
  agent: `done` is set, so its recurrent state starts afresh, as the learner trains it
  (the DeepMind "end of life as end of episode" heuristic), but the game is not reset.
- The agent's inputs at each step are the observation, the last action, the last reward
  and `done`, each [1, N, ...] (time first, as the learner's batches are).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from impala.nets import Agent, AgentOutput, CoreState


@dataclass
class EnvStep:
    """What all N environments show the agent now, each field with a leading [N]."""

    observation: np.ndarray
    reward: np.ndarray  # float32: the reward of the step that led here
    done: np.ndarray  # bool: an episode starts here for the agent (a lost life counts)
    last_action: np.ndarray  # int64: the action that led here
    episode_start: np.ndarray  # bool: the environment was reset (its frame stack restarted)


class EnvironmentLoop:
    """N environments stepped together under the rules of the module docstring. `finished[i]`
    lists environment i's finished episodes as (return, length in agent steps) until the
    caller takes them."""

    def __init__(self, envs: list[gym.Env]) -> None:
        self.envs = envs
        self.finished: list[list[tuple[float, int]]] = [[] for _ in envs]

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, seeds: list[int] | None = None) -> EnvStep:
        """Every environment's first step (reset with its seed where `seeds` are given)."""
        n = len(self.envs)
        seeds = seeds if seeds is not None else [None] * n
        observations = np.stack([np.asarray(env.reset(seed=seed)[0])
                                 for env, seed in zip(self.envs, seeds, strict=True)])
        return EnvStep(observations, np.zeros(n, np.float32), np.ones(n, bool),
                       np.zeros(n, np.int64), np.ones(n, bool))

    def step(self, actions: np.ndarray, previous: EnvStep | None = None,
             playing: np.ndarray | None = None,
             on_step: Callable[[gym.Env], None] | None = None) -> EnvStep:
        """Step each environment with its action [N]. Where `playing` [N] is False the
        environment is left as it was (`previous` shows it; its reward 0, its done False).
        `on_step(env)` is called after each step, before a finished game is reset."""
        n = len(self.envs)
        observations = []
        rewards, dones, resets = np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
        for i, env in enumerate(self.envs):
            if playing is not None and not playing[i]:
                observations.append(previous.observation[i])
                continue
            observation, reward, terminated, truncated, info = env.step(int(actions[i]))
            rewards[i] = reward
            if on_step is not None:
                on_step(env)
            if terminated or truncated:
                episode = info["episode"]
                self.finished[i].append((float(episode["r"]), int(episode["l"])))
                observation, _ = env.reset()
                dones[i] = resets[i] = True
            elif info.get("life_lost", False):
                dones[i] = True
            observations.append(np.asarray(observation))
        return EnvStep(np.stack(observations), rewards, dones,
                       np.asarray(actions).astype(np.int64), resets)

    def close(self) -> None:
        for env in self.envs:
            env.close()


@torch.no_grad()
def agent_step(model: Agent, step: EnvStep, core: CoreState,
               device: torch.device | None = None) -> tuple[AgentOutput, CoreState]:
    """One batched forward pass for all N environments: inputs [1, N, ...] on `device` (the
    CPU if None), where the core state stays between steps."""
    device = device or torch.device("cpu")
    inputs = (step.observation, step.last_action, step.reward, step.done)
    return model(*(torch.from_numpy(x).unsqueeze(0).to(device) for x in inputs), core)
