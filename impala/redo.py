"""ReDo (Sokar, Agarwal, Castro and Evci, "The Dormant Neuron Phenomenon in Deep
Reinforcement Learning", ICML 2023): every so many frames, score each unit of the torso by
its mean absolute activation over a batch, relative to its layer's mean; a unit scoring at
or below the threshold tau is dormant, and is recycled: its incoming weights drawn again
from the ReLU torso's orthogonal initialization, its bias zeroed, its outgoing weights
zeroed (so the network's outputs do not change at the moment of recycling), and the
optimizer's state of those weights set back to a fresh one.

Why: a ReLU unit whose input is negative on every screen gets no gradient and never comes
back by itself; the share of such units grows with the updates per frame (the paper's
finding), and a torso with fewer live units tells fewer screens apart.

Ranks: the scores are summed over every learner (`allreduce_sum`) and the new weights drawn
from a generator seeded by the run's seed and the recycling's frame count, so every rank
recycles the same units with the same weights. No sockets, no processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from impala.nets import RELU_GAIN, Agent, torso_input

SCORED_FRAMES = 1024  # observations a score averages over (a subsample of the batch)


@dataclass(frozen=True)
class UnitLayer:
    """One layer of units: the layer that makes them, and the weights that read them,
    each with the number of columns every unit owns there (a conv channel read by a linear
    layer after a flatten owns H x W columns, channel-major)."""

    producer: nn.Conv2d | nn.Linear
    activation: nn.Module  # its output is what a unit's score averages
    readers: tuple[tuple[torch.Tensor, int], ...]  # (weight [out, in, ...], columns per unit)


def unit_layers(agent: Agent) -> list[UnitLayer]:
    """The torso's layers of units in forward order, for the agents whose torso is a chain
    of convolutions or linear layers each followed by its activation (SimpleConvNetAgent,
    MLPAgent and their LSTM variants)."""
    chain = agent.torso_chain()
    if chain is None:
        raise ValueError(f"--redo_threshold: {type(agent).__name__} has no torso of "
                         "plain layers to recycle; use SimpleConvNetAgent or MLPAgent")
    producers = [(m, chain[i + 1]) for i, m in enumerate(chain)
                 if isinstance(m, (nn.Conv2d, nn.Linear))]
    layers = []
    for index, (producer, activation) in enumerate(producers):
        units = producer.out_features if isinstance(producer, nn.Linear) else producer.out_channels
        if index + 1 < len(producers):
            reader = producers[index + 1][0].weight
            readers = ((reader, reader.shape[1] // units),)
        else:  # the last layer's units are the features the core reads, first in its input
            readers = tuple((weight, 1) for weight in agent.feature_readers())
        layers.append(UnitLayer(producer, activation, readers))
    return layers


def unit_activity(agent: Agent, layers: list[UnitLayer], observation: torch.Tensor
                  ) -> list[torch.Tensor]:
    """Each layer's mean absolute activation per unit, [units], over up to SCORED_FRAMES of
    `observation` [T, B, *obs] (uint8 frames or floats), as the learner's torso sees them."""
    flat = observation.flatten(0, 1)
    flat = flat[::max(1, math.ceil(len(flat) / SCORED_FRAMES))]
    x = torso_input(flat)
    activity: list[torch.Tensor] = []

    def record(_module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        dims = [0, *range(2, output.dim())]  # every axis but the unit's (channel) axis
        activity.append(output.detach().abs().float().mean(dim=dims))

    hooks = [layer.activation.register_forward_hook(record) for layer in layers]
    try:
        with torch.no_grad():
            agent.torso(x)
    finally:
        for hook in hooks:
            hook.remove()
    return activity


def dormant_units(activity: torch.Tensor, threshold: float) -> torch.Tensor:
    """The units [units] (bool) whose score, activity over the layer's mean activity, is at
    or below `threshold`; all of them where the whole layer is silent (every unit is)."""
    mean = activity.mean()
    if mean <= 0:
        return torch.ones_like(activity, dtype=torch.bool)
    return activity / mean <= threshold


@torch.no_grad()
def recycle(layer: UnitLayer, units: torch.Tensor, optimizer: torch.optim.Optimizer,
            generator: torch.Generator) -> None:
    """Recycle `units` (bool [units]) of `layer`: incoming weights from a fresh orthogonal
    draw of the whole layer with the ReLU torso's gain (nets.RELU_GAIN; an MLP's tanh
    layers, which start from PyTorch's default, get the same draw), bias 0, outgoing
    weights 0, and the optimizer's state of each of them fresh."""
    producer = layer.producer
    fresh = torch.empty_like(producer.weight, device="cpu")
    nn.init.orthogonal_(fresh, gain=RELU_GAIN, generator=generator)
    index = units.nonzero().flatten().to(producer.weight.device)
    producer.weight[index] = fresh.to(producer.weight.device)[index]
    producer.bias[index] = 0.0
    reset_state(optimizer, producer.weight, rows=index)
    reset_state(optimizer, producer.bias, rows=index)
    for weight, columns in layer.readers:
        owned = (index[:, None] * columns + torch.arange(columns, device=index.device)
                 ).flatten()
        weight[:, owned] = 0.0
        reset_state(optimizer, weight, columns=owned)


def reset_state(optimizer: torch.optim.Optimizer, param: torch.Tensor,
                rows: torch.Tensor | None = None, columns: torch.Tensor | None = None
                ) -> None:
    """Set the optimizer's per-weight state of `param`'s `rows` (or `columns`) to what a
    fresh optimizer starts from: RMSProp's mean square 1 (optim.RMSpropTF), every other
    moment 0. Counters (Adam's step) are per tensor and stay."""
    for name, value in optimizer.state.get(param, {}).items():
        if not torch.is_tensor(value) or value.shape != param.shape:
            continue
        fill = 1.0 if name == "mean_square" else 0.0
        if rows is not None:
            value[rows] = fill
        if columns is not None:
            value[:, columns] = fill


class Recycler:
    """ReDo every `interval_frames` of the run (on every rank at the same update).
    `last_dormant`: the share of the torso's units found dormant at the last check, before
    recycling; `recycled`: units recycled by this process."""

    def __init__(self, agent: Agent, threshold: float, interval_frames: int, seed: int) -> None:
        self.agent, self.threshold = agent, threshold
        self.interval_frames, self.seed = interval_frames, seed
        self.layers = unit_layers(agent)
        self.last_dormant = 0.0
        self.recycled = 0

    def due(self, frames_before: int, frames_after: int) -> bool:
        """Whether an update from `frames_before` to `frames_after` (the run's frames, the
        same on every rank) crosses a multiple of the interval."""
        return frames_after // self.interval_frames > frames_before // self.interval_frames

    def __call__(self, observation: torch.Tensor, optimizer: torch.optim.Optimizer,
                 frames: int, allreduce_sum: Callable[[np.ndarray], np.ndarray]) -> int:
        """Score on `observation` [T, B, *obs], summed over the ranks, and recycle the
        dormant units; returns how many were recycled."""
        activity = unit_activity(self.agent, self.layers, observation)
        sizes = [len(a) for a in activity]
        summed = torch.from_numpy(allreduce_sum(torch.cat(activity).cpu().double().numpy())
                                  ).split(sizes)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + frames)
        dormant_total = 0
        for layer, layer_activity in zip(self.layers, summed, strict=True):
            units = dormant_units(layer_activity, self.threshold)
            dormant_total += int(units.sum())
            if units.any():
                recycle(layer, units, optimizer, generator)
        self.last_dormant = dormant_total / sum(sizes)
        self.recycled += dormant_total
        return dormant_total
