"""The one place an agent is assembled from a run's Config: its algorithm, its network on a
device in the activation layout chosen for that device, the unroll layout actors and
learners share, and a learner's optimizer. The learner, the actor, evaluation and the
benchmarks all build through here, so their weights, unrolls and optimizer always agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from impala import optim
from impala.algorithm import Algorithm
from impala.config import Config
from impala.devices import uses_bf16_torso
from impala.envs import EnvInfo
from impala.nets import Agent, build_agent
from impala.registry import build_algorithm
from impala.unroll.layout import UnrollLayout


@dataclass
class AgentParts:
    algorithm: Algorithm
    model: Agent
    layout: UnrollLayout


def assemble(cfg: Config, env: EnvInfo, device: torch.device | None = None,
             training: bool = True) -> AgentParts:
    """The run's algorithm, its agent on `device` (the CPU if None) and the unroll layout.
    `training`: for a learner (else an actor or evaluation), which may choose another
    activation layout (Config.uses_channels_last) and a bfloat16 torso (`--bf16_torso`)."""
    device = device or torch.device("cpu")
    algorithm = build_algorithm(cfg)
    model = build_agent(cfg.agent_name, env, algorithm).to(device)
    model.channels_last = cfg.uses_channels_last(device, model, training=training)
    model.bf16_torso = training and uses_bf16_torso(cfg.bf16_torso, device)
    layout = UnrollLayout.for_agent(cfg.unroll_length, env, model, algorithm.recorded,
                                    algorithm.overlap, algorithm.episode_tags)
    return AgentParts(algorithm, model, layout)


def build_optimizer(cfg: Config, model: Agent) -> torch.optim.Optimizer:
    """A learner's optimizer (`--optimizer`, TensorFlow 1's RMSProp by default) with every
    one of the run's optimizer flags."""
    return optim.build(cfg.optimizer, model.parameters(), lr=cfg.learning_rate,
                       decay=cfg.decay, momentum=cfg.momentum, epsilon=cfg.epsilon)
