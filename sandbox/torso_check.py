"""Is a Pong checkpoint's conv torso alive? (docs/notes/pong-init-and-step-size.md)

    .venv/bin/python sandbox/torso_check.py runs/pong_curve/pong_D/checkpoint.pt [...]

Plays 400 random Pong steps and feeds every second stacked screen through each checkpoint's
SimpleConvNetAgent torso. Prints, per ReLU layer, the share of units (channels for the convs)
that are never positive on any of those screens, and the torso's feature variation: the std
over screens of each of the 512 features, averaged. A live run's logs.csv has the same two
measures per update (`dead_features`, `feature_std`); this reads old checkpoints too.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from impala.envs import random_play_observations
from impala.nets import create_agent


def pong_screens(steps: int = 400) -> torch.Tensor:
    """[steps / 2, 4, 84, 84] float screens in [0, 1] from random play (every second one)."""
    observations = random_play_observations("PongNoFrameskip-v4", steps, seed=7)[::2]
    return torch.from_numpy(observations).float() / 255.0


@torch.no_grad()
def torso_report(path: str, screens: torch.Tensor) -> str:
    state = torch.load(path, map_location="cpu", weights_only=True)
    agent = create_agent(state["flags"]["agent_name"], tuple(screens.shape[1:]), 6)
    agent.load_state_dict(state["model"])
    dead, x = [], screens
    for layer in [*agent.convs, *agent.fc]:
        x = layer(x)
        if isinstance(layer, nn.ReLU):
            per_unit = x.flatten(2).amax(-1) if x.dim() == 4 else x  # [screens, units]
            dead.append(f"{(per_unit.amax(0) <= 0).float().mean().item():.2f}")
    frames = state.get("counters", {}).get("frames", "?")
    return (f"{path}: {frames} frames; never-active share per ReLU layer (conv1, conv2, conv3, "
            f"fc): {', '.join(dead)}; feature variation {x.std(0).mean().item():.4f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    screens = pong_screens()
    for checkpoint_path in sys.argv[1:]:
        print(torso_report(checkpoint_path, screens))
