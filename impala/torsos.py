"""The agents' torsos, observation in, features out: two tanh layers for vectors, Nature
DQN's convolutions, and IMPALA's deep residual network. nets.py puts a torso, a core and the
algorithm's heads together into an agent."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def mlp_torso(inputs: int, hidden_size: int) -> nn.Sequential:
    """[B, inputs] -> [B, hidden_size]: two tanh layers."""
    return nn.Sequential(nn.Linear(inputs, hidden_size), nn.Tanh(),
                         nn.Linear(hidden_size, hidden_size), nn.Tanh())


def nature_convs(channels: int) -> nn.Sequential:
    """[B, channels, H, W] -> [B, flat]: Nature DQN's convolutions (32x8s4, 64x4s2, 64x3s1),
    flattened; a fully connected layer follows them."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, kernel_size=8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, kernel_size=3, stride=1), nn.ReLU(),
        nn.Flatten(),
    )


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv0(F.relu(x))
        out = self.conv1(F.relu(out))
        return x + out


class ResNetTorso(nn.Module):
    """IMPALA's deep torso: per section a conv, a 3x3/2 max-pool and two residual blocks."""

    def __init__(self, observation_shape: tuple[int, ...], sections=(16, 32, 32),
                 fc_size: int = 256) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = observation_shape[0]
        for out_channels in sections:
            layers += [
                nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1),
                nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
                ResidualBlock(out_channels),
                ResidualBlock(out_channels),
            ]
            in_channels = out_channels
        layers += [nn.ReLU(), nn.Flatten()]
        self.sections = nn.Sequential(*layers)
        self.fc = nn.Sequential(
            nn.Linear(flat_size(self.sections, observation_shape), fc_size), nn.ReLU()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.sections(x))


def flat_size(module: nn.Module, observation_shape: tuple[int, ...]) -> int:
    """The size of `module`'s flat output for one observation of `observation_shape`."""
    with torch.no_grad():
        return int(module(torch.zeros(1, *observation_shape)).shape[-1])
