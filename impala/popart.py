"""PopArt (van Hasselt et al. 2016, "Learning values across many orders of magnitude"; as
IMPALA uses it, Hessel et al. 2019, "Multi-task deep reinforcement learning with PopArt").

A value head learns normalized values n(x); the value is V(x) = sigma * n(x) + mu, where mu
and sigma are running estimates of the mean and spread of the value targets. The losses see
targets and advantages divided by sigma, so the size of the value gradient and of the policy
gradient no longer grows with the returns a game pays. Each time mu and sigma move, the
head's last layer is rescaled so that V(x) stays what it was for every x ("preserving the
outputs precisely").

The statistics are buffers of the head (`ScaledHead`): checkpoints, the ranks' broadcast
and their sync digest carry them with the weights.
"""

from __future__ import annotations

import torch
from torch import nn

SIGMA_BOUNDS = (1e-4, 1e6)  # Hessel et al.'s clip of the scale


class ScaledHead(nn.Linear):
    """A linear value head that outputs normalized values [N, 1], with the statistics that
    give them their scale: `mean` and `mean_square` (0-dim buffers) of the targets. The
    buffers are float32, as every array the weights' wire carries; the rescaling itself is
    computed in float64."""

    def __init__(self, in_features: int, out_features: int = 1) -> None:
        super().__init__(in_features, out_features)
        # mu 0 and nu 1: sigma 1, so the head starts as a plain value head
        self.register_buffer("mean", torch.zeros(()))
        self.register_buffer("mean_square", torch.ones(()))

    def scale(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mu, sigma) as 0-dim tensors on the head's device."""
        return self.mean, spread(self.mean, self.mean_square)

    @torch.no_grad()
    def track(self, target_mean: float, target_mean_square: float, step: float) -> None:
        """Move mu and nu a `step` (beta) towards a batch's mean and mean square of the
        targets, then rescale the weights so that every output's value is unchanged."""
        old_mean, old_square = self.mean.double(), self.mean_square.double()
        # rounded to the buffers' float32 first, so the layer preserves what they will hold
        new_mean = ((1 - step) * old_mean + step * target_mean).float().double()
        new_square = ((1 - step) * old_square + step * target_mean_square).float().double()
        weight, bias = preserved_layer(
            self.weight.double(), self.bias.double(),
            (old_mean, spread(old_mean, old_square)), (new_mean, spread(new_mean, new_square)))
        self.weight.copy_(weight)
        self.bias.copy_(bias)
        self.mean.copy_(new_mean)
        self.mean_square.copy_(new_square)


def spread(mean: torch.Tensor, mean_square: torch.Tensor) -> torch.Tensor:
    """sigma = sqrt(nu - mu^2), held inside SIGMA_BOUNDS."""
    variance = (mean_square - mean * mean).clamp(min=SIGMA_BOUNDS[0] ** 2)
    return variance.sqrt().clamp(*SIGMA_BOUNDS)


def preserved_layer(weight: torch.Tensor, bias: torch.Tensor,
                    old: tuple[torch.Tensor, torch.Tensor],
                    new: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The last layer (weight [1, F], bias [1]) under the new (mu, sigma) that gives every
    input the value the old layer gave under the old (mu, sigma):
    W' = sigma W / sigma',  b' = (sigma b + mu - mu') / sigma'."""
    (old_mean, old_sigma), (new_mean, new_sigma) = old, new
    return (weight * old_sigma / new_sigma,
            (old_sigma * bias + old_mean - new_mean) / new_sigma)
