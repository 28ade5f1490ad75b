"""Does a trained agent look at the screen? A check for a run whose return stays at random
play's level: play its checkpoint, then replay the same steps with the torso's features held
at their average, and count the steps whose greedy action changes.

  .venv/bin/python -m impala.diagnose --run_dir=runs/PongNoFrameskip-v4_SimpleConvNetAgent

It reads the run's flags from its meta.json and prints, for the checkpoint and for the same
network freshly initialised (the starting point it learned from):
- `screen_decides`: the share of steps whose greedy action the screen decides. An agent
  that plays Pong at all must follow the ball: a value near 0 is a policy that ignores it.
- `feature_std`, `dead_features`: the torso's features over the steps played (as the
  learner logs them for its batches).
- `action_spread`: the per-action head's mean gap between its best and worst action.
- for an agent with an LSTM, the spread over steps of the LSTM's gate inputs that come from
  the screen, from the last action and from the last reward: which input the core hears.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from impala.algorithm import Algorithm
from impala.config import Config
from impala.environment_loop import EnvironmentLoop, agent_step
from impala.envs import create_env
from impala.evaluate import play_agent
from impala.flags import parse_config
from impala.nets import Agent


@dataclass
class Steps:
    """What the agent saw over `T` steps of `B` environments, from each one's reset."""

    frames: torch.Tensor  # [T, B, *observation]
    last_action: torch.Tensor  # [T, B] long
    reward: torch.Tensor  # [T, B]
    done: torch.Tensor  # [T, B] bool: an episode starts here


def run_config(run_dir: Path) -> Config:
    """The run's Config, from the flags its meta.json recorded."""
    meta = run_dir / "meta.json"
    try:
        flags = json.loads(meta.read_text())["flags"]
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"{meta}: cannot read the run's flags ({error})") from None
    flags.update(logdir=str(run_dir.parent), run_name=run_dir.name)
    return parse_config([f"--{name}={value}" for name, value in flags.items()])


def load_agent(cfg: Config, trained: bool) -> tuple[Agent, Algorithm, int]:
    """The run's network in eval mode: its checkpoint's weights, or fresh ones (seeded by
    the run's seed); and the frames it was trained on."""
    torch.manual_seed(cfg.seed)
    parts, frames = play_agent(cfg, trained)
    return parts.model, parts.algorithm, frames


@torch.no_grad()
def play(model: Agent, algorithm: Algorithm, cfg: Config, envs: int, steps: int,
         epsilon: float) -> Steps:
    """`steps` steps of `envs` fresh environments through the environment loop,
    epsilon-greedy in the evaluation action (a little randomness, so that a policy stuck on
    one action still sees the game move)."""
    loop = EnvironmentLoop([create_env(cfg.env_config) for _ in range(envs)])
    step = loop.reset([cfg.seed + i for i in range(envs)])
    core = model.initial_state(envs)
    seen = []
    for _ in range(steps):
        seen.append(step)
        output, core = agent_step(model, step, core)
        action = algorithm.evaluation_action(output.heads)[0]  # [B]
        explore = torch.rand(envs) < epsilon
        action = torch.where(explore, torch.randint_like(action, model.num_actions), action)
        step = loop.step(action.numpy())
    loop.close()
    return Steps(*(torch.from_numpy(np.stack([getattr(s, name) for s in seen]))
                   for name in ("observation", "last_action", "reward", "done")))


@contextmanager
def screen_held(model: Agent, features: torch.Tensor) -> Iterator[None]:
    """The model's torso replaced by `features` [F] on every step: the screen removed,
    everything else (last action, reward, recurrent state) as it was."""
    torso = model.torso
    model.torso = lambda x: features.expand(x.shape[0], -1)
    try:
        yield
    finally:
        model.torso = torso


@torch.no_grad()
def measure(model: Agent, algorithm: Algorithm, steps: Steps) -> dict[str, float]:
    """The figures the module docstring lists, over `steps`, each replayed from the initial
    state in one forward pass."""
    T, B = steps.last_action.shape
    inputs = (steps.frames, steps.last_action, steps.reward, steps.done)
    output, _ = model(*inputs, model.initial_state(B))
    features = output.features.flatten(0, 1)  # [T * B, F]
    with screen_held(model, features.mean(dim=0)):
        blind, _ = model(*inputs, model.initial_state(B))
    greedy = algorithm.evaluation_action(output.heads)
    figures = {
        "screen_decides": (greedy != algorithm.evaluation_action(blind.heads)).float().mean(),
        "feature_std": features.std(dim=0).mean(),
        "dead_features": (features == 0).all(dim=0).float().mean(),
        "action_spread": action_spread(algorithm, output.heads),
    }
    if hasattr(model, "lstm"):
        figures.update(core_inputs(model, features, steps))
    return {name: float(value) for name, value in figures.items()}


def action_spread(algorithm: Algorithm, heads: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean gap between the best and the worst action in the algorithm's per-action head
    (a dueling head's Q is its value plus the centred advantage: the same gap)."""
    name = next(spec.name for spec in algorithm.heads if spec.per_action)
    per_action = heads[name]
    return (per_action.max(dim=-1).values - per_action.min(dim=-1).values).mean()


def core_inputs(model: Agent, features: torch.Tensor, steps: Steps) -> dict[str, torch.Tensor]:
    """Spread over steps of the LSTM's gate pre-activations from each of its inputs:
    W_screen f_t, W_action onehot(a_t-1), W_reward r_t-1; mean over the 4H gate units."""
    weights = model.lstm.weight_ih_l0  # [4H, F (+ A + 1)]
    width = features.shape[1]
    parts = {"core_from_screen": features @ weights[:, :width].T}
    if model.action_reward_inputs:
        actions = F.one_hot(steps.last_action.flatten(), model.num_actions).float()
        rewards = steps.reward.flatten().clamp(-1, 1).unsqueeze(-1)
        parts["core_from_action"] = actions @ weights[:, width:width + model.num_actions].T
        parts["core_from_reward"] = rewards @ weights[:, width + model.num_actions:].T
    return {name: part.std(dim=0).mean() for name, part in parts.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run_dir", type=Path, required=True)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=600, help="agent steps per environment")
    parser.add_argument("--epsilon", type=float, default=0.05)
    args = parser.parse_args(argv)
    cfg = run_config(args.run_dir)
    rows = []
    for trained in (False, True):
        model, algorithm, frames = load_agent(cfg, trained)
        steps = play(model, algorithm, cfg, args.envs, args.steps, args.epsilon)
        rows.append({"network": "checkpoint" if trained else "fresh", "frames": frames,
                     **measure(model, algorithm, steps)})
    names = list(rows[0])
    print("| " + " | ".join(names) + " |\n|" + " --- |" * len(names))
    for row in rows:
        print("| " + " | ".join(value if isinstance(value, str) else f"{value:.4g}"
                                for value in row.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
