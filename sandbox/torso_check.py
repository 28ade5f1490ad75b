"""Is an Atari checkpoint's conv torso alive? (docs/notes/pong-init-and-step-size.md)

    .venv/bin/python sandbox/torso_check.py runs/pong_curve/pong_D/checkpoint.pt [...]

Plays 400 random steps of the checkpoint's own game and feeds every second stacked screen
through its torso (SimpleConvNetAgent). Prints, per ReLU layer, the share of units (channels
for the convs) that are never positive on any of those screens, and the torso's feature
variation: the std over screens of each of the 512 features, averaged. A live run's
logs.csv has the same two measures per update (`dead_features`, `feature_std`); this reads
old checkpoints too.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from impala.envs import EnvConfig, describe_env, random_play_observations
from impala.nets import build_agent
from impala.registry import algorithm_class


def screens_of(level_name: str, steps: int = 400) -> torch.Tensor:
    """[steps / 2, 4, 84, 84] float screens in [0, 1] from random play (every second one)."""
    observations = random_play_observations(level_name, steps, seed=7)[::2]
    return torch.from_numpy(observations).float() / 255.0


@torch.no_grad()
def torso_report(path: str, steps: int = 400) -> str:
    state = torch.load(path, map_location="cpu", weights_only=True)
    flags = state["flags"]
    level_name = flags.get("level_name", "PongNoFrameskip-v4")
    algorithm = algorithm_class(flags.get("algorithm", "impala"))
    agent = build_agent(flags["agent_name"], describe_env(EnvConfig(level_name)), algorithm)
    if not hasattr(agent, "convs"):
        return f"{path}: {flags['agent_name']} has no conv torso to check"
    agent.load_state_dict(state["model"])
    dead, x = [], screens_of(level_name, steps)
    for layer in [*agent.convs, *agent.fc]:
        x = layer(x)
        if isinstance(layer, nn.ReLU):
            per_unit = x.flatten(2).amax(-1) if x.dim() == 4 else x  # [screens, units]
            dead.append(f"{(per_unit.amax(0) <= 0).float().mean().item():.2f}")
    frames = state.get("counters", {}).get("frames", "?")
    return (f"{path}: {frames} frames; never-active share per ReLU layer (conv1, conv2, conv3, "
            f"fc): {', '.join(dead)}; feature variation {x.std(0).mean().item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="checkpoint.pt files of Atari runs")
    parser.add_argument("--steps", type=int, default=400, help="random steps played")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for path in args.checkpoints:
        print(torso_report(path, args.steps))


if __name__ == "__main__":
    main()
