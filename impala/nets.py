"""Agents: a torso, then the one-hot last action and clipped reward, then (optionally) an
LSTM core, then the output heads the algorithm names (impala/algorithm.py `Head`): each a
linear layer on the core's output, one output per action or one per step. With
`action_reward_inputs=False` the core sees the torso's features only (frames in, nothing
else).

Every agent has one interface, on time-major inputs:
  forward(observation [T, B, *obs], last_action [T, B], reward [T, B], done [T, B],
          core_state) -> (AgentOutput(heads {name: [T, B, A] or [T, B]}, features [T, B, F]),
                          new core_state)
`initial_state(batch_size)` gives the core state to start from: an empty tuple for
feed-forward agents, `(h, c)` each `[num_layers, B, hidden]` for the LSTM agent.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from impala.algorithm import Head
from impala.popart import ScaledHead
from impala.torsos import ResNetTorso, flat_size, mlp_torso, nature_convs

if TYPE_CHECKING:  # annotations only: the agents need no gymnasium
    from impala.algorithm import Algorithm
    from impala.envs import EnvInfo

CoreState = tuple[torch.Tensor, ...]


class AgentOutput(NamedTuple):
    heads: dict[str, torch.Tensor]  # by the algorithm's names: [T, B, A] or [T, B]
    features: torch.Tensor  # [T, B, F] the torso's output, for the learner's health columns


class Agent(nn.Module):
    """Base class: subclasses define `torso` ([N, *obs] float -> [N, F]) and build the heads
    on its output plus (with `action_reward_inputs`) the one-hot last action and the
    clipped reward."""

    # Whether channels-last activations speed the torso up on a CPU (training, acting);
    # None: no convolutions. Measured with bench/learner.py and bench/inference.py.
    channels_last_pays: tuple[bool, bool] | None = None

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True) -> None:
        super().__init__()
        if not heads:
            raise ValueError("an agent needs at least one head")
        self.observation_shape = tuple(observation_shape)
        self.num_actions = num_actions
        self.head_specs = tuple(heads)
        self.action_reward_inputs = action_reward_inputs
        self.channels_last = False  # set by the process that runs it (--channels_last)
        self.bf16_torso = False  # set by a learner (--bf16_torso)

    @property
    def extra_inputs(self) -> int:
        """Core inputs beside the torso's features: the one-hot last action and reward."""
        return self.num_actions + 1 if self.action_reward_inputs else 0

    # Subclasses that have a recurrent core override these two.
    def initial_state(self, batch_size: int) -> CoreState:
        return ()

    def core(
        self, features: torch.Tensor, done: torch.Tensor, core_state: CoreState
    ) -> tuple[torch.Tensor, CoreState]:
        """features [T, B, F] -> ([T, B, F'], core_state); feed-forward by default."""
        return features, core_state

    def torso(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def torso_chain(self) -> list[nn.Module] | None:
        """The torso as a chain of modules in forward order, each convolution or linear
        layer followed by its activation (what impala/redo.py recycles); None where the
        torso is not such a chain (a residual network)."""
        return None

    def feature_readers(self) -> list[torch.Tensor]:
        """The weights [out, in] that read the torso's features, as the first columns of
        their input: the LSTM's input weights, or else every head's."""
        lstm = getattr(self, "lstm", None)
        if lstm is not None:
            return [lstm.weight_ih_l0]
        return [self.heads[spec.name].weight for spec in self.head_specs]

    def activation_note(self) -> str:
        """How this agent's torso runs, for a log line: '' for float32 in the default layout."""
        return ((", channels-last activations" if self.channels_last else "")
                + (", bfloat16 torso" if self.bf16_torso else ""))

    def _build_heads(self, core_output_size: int) -> None:
        self.heads = nn.ModuleDict({head.name: self._head(head, core_output_size)
                                    for head in self.head_specs})

    def _head(self, spec: Head, core_output_size: int) -> nn.Linear:
        if spec.normalized:
            if spec.per_action:
                raise ValueError(f"head {spec.name!r}: PopArt normalizes a one-output head")
            return ScaledHead(core_output_size)
        return nn.Linear(core_output_size, self.num_actions if spec.per_action else 1)

    def forward(
        self,
        observation: torch.Tensor,
        last_action: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        core_state: CoreState = (),
    ) -> tuple[AgentOutput, CoreState]:
        if observation.dim() != 2 + len(self.observation_shape):
            raise ValueError(
                f"{type(self).__name__}: observation must be [T, B, {self.observation_shape}], "
                f"got {tuple(observation.shape)}"
            )
        T, B = observation.shape[:2]
        x = observation.flatten(0, 1)
        if self.channels_last:  # the input only: parameters stay contiguous, as Horovod needs
            x = x.contiguous(memory_format=torch.channels_last)
        x = torso_input(x)
        # bfloat16 for the torso alone: it is most of an update's arithmetic, while the core,
        # the heads (whose action values differ by hundredths) and the losses stay float32.
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16_torso):
            features = self.torso(x)
        features = features.float()
        core_input = features
        if self.action_reward_inputs:
            one_hot_last_action = F.one_hot(last_action.flatten(0, 1).long(), self.num_actions)
            clipped_reward = reward.flatten(0, 1).float().clamp(-1, 1).unsqueeze(-1)
            core_input = torch.cat([features, one_hot_last_action.float(), clipped_reward],
                                   dim=-1)
        core_output, core_state = self.core(core_input.view(T, B, -1), done, core_state)
        core_output = core_output.flatten(0, 1)
        heads = {}
        for spec in self.head_specs:
            out = self.heads[spec.name](core_output)
            heads[spec.name] = out.view(T, B, -1) if spec.per_action else out.view(T, B)
        return AgentOutput(heads, features.view(T, B, -1)), core_state


class MLPAgent(Agent):
    """Two tanh layers of 64 for vector observations (CartPole and friends)."""

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True,
                 hidden_size: int = 64) -> None:
        super().__init__(observation_shape, num_actions, heads, action_reward_inputs)
        self.mlp = mlp_torso(math.prod(observation_shape), hidden_size)
        self._build_heads(hidden_size + self.extra_inputs)

    def torso(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x.flatten(1))

    def torso_chain(self) -> list[nn.Module]:
        return list(self.mlp)


class SimpleConvNetAgent(Agent):
    """Nature-DQN convolutions (32x8s4, 64x4s2, 64x3s1) and a fully connected layer of 512."""

    channels_last_pays = (True, False)  # an update 1.05-1.2x; acting level at 8, 12% slower at 32

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True) -> None:
        super().__init__(observation_shape, num_actions, heads, action_reward_inputs)
        self.convs = nature_convs(observation_shape[0])
        conv_out = flat_size(self.convs, observation_shape)
        self.fc = nn.Sequential(nn.Linear(conv_out, 512), nn.ReLU())
        self._build_heads(512 + self.extra_inputs)
        _init_relu_torso_and_heads(self)

    def torso(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(x))

    def torso_chain(self) -> list[nn.Module]:
        return [*self.convs, *self.fc]


class ResNetAgent(Agent):
    """IMPALA deep ResNet (16, 32, 32) with an FC of 256, no recurrence."""

    channels_last_pays = (True, True)  # an update 1.6x, acting 2.4x

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True) -> None:
        super().__init__(observation_shape, num_actions, heads, action_reward_inputs)
        self.resnet = ResNetTorso(observation_shape)
        self._build_heads(256 + self.extra_inputs)

    def torso(self, x: torch.Tensor) -> torch.Tensor:
        return self.resnet(x)


class _LSTMCore:
    """For an agent whose torso is followed by `self.lstm`: its state, zeroed where `done`
    starts an episode."""

    lstm: nn.LSTM

    def initial_state(self, batch_size: int) -> CoreState:
        return lstm_initial_state(self.lstm, batch_size)

    def core(
        self, features: torch.Tensor, done: torch.Tensor, core_state: CoreState
    ) -> tuple[torch.Tensor, CoreState]:
        return lstm_core(self.lstm, features, done, core_state)


class ResNetLSTMAgent(_LSTMCore, ResNetAgent):
    """The deep ResNet followed by an LSTM of 256 whose state is reset where `done` is set."""

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True,
                 lstm_size: int = 256) -> None:
        super().__init__(observation_shape, num_actions, heads, action_reward_inputs)
        self.lstm = nn.LSTM(256 + self.extra_inputs, lstm_size, num_layers=1)
        self._build_heads(lstm_size)


class SimpleConvNetLSTMAgent(_LSTMCore, SimpleConvNetAgent):
    """Nature DQN's torso followed by an LSTM of 512: the recurrent network of Kapturowski
    et al. (2019), at a fraction of the deep ResNet-LSTM's cost."""

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True,
                 lstm_size: int = 512) -> None:
        super().__init__(observation_shape, num_actions, heads, action_reward_inputs)
        self.lstm = nn.LSTM(512 + self.extra_inputs, lstm_size, num_layers=1)
        self._build_heads(lstm_size)
        _init_heads(self)


class MLPLSTMAgent(_LSTMCore, MLPAgent):
    """The MLP torso followed by an LSTM of 64: a recurrent agent for small observations
    (vectors, or small images flattened), e.g. on impala/Recall-v0."""

    def __init__(self, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True,
                 hidden_size: int = 64) -> None:
        super().__init__(observation_shape, num_actions, heads, action_reward_inputs,
                         hidden_size)
        self.lstm = nn.LSTM(hidden_size + self.extra_inputs, hidden_size, num_layers=1)
        self._build_heads(hidden_size)


def lstm_initial_state(lstm: nn.LSTM, batch_size: int) -> CoreState:
    """Zero (h, c), each [layers, B, H]."""
    shape = (lstm.num_layers, batch_size, lstm.hidden_size)
    return (torch.zeros(shape), torch.zeros(shape))


def lstm_core(lstm: nn.LSTM, features: torch.Tensor, done: torch.Tensor,
              core_state: CoreState) -> tuple[torch.Tensor, CoreState]:
    """features [T, B, F]; done [T, B]; state (h, c) each [layers, B, H] -> [T, B, H], with
    the state zeroed where `done` starts a new episode.

    One LSTM call per stretch of steps in which no env starts an episode, the state zeroed
    at each stretch's first step for the envs that start there: the same result as a call
    per step, at a fraction of the Python overhead (a recurrent Recall test: 51 s -> 28 s)."""
    starts = done.bool()
    bounds = [0, *starts[1:].any(dim=1).nonzero().flatten().add(1).tolist(), len(features)]
    keep = (~starts).to(features.dtype).unsqueeze(-1)  # [T, B, 1]
    h, c = core_state
    outputs = []
    for first, end in itertools.pairwise(bounds):
        out, (h, c) = lstm(features[first:end], (h * keep[first], c * keep[first]))
        outputs.append(out)
    return torch.cat(outputs, dim=0), (h, c)


def torso_input(x: torch.Tensor) -> torch.Tensor:
    """Observations [N, *obs] as the torso takes them: floats, uint8 frames scaled to
    [0, 1]. uint8 frames are scaled here so actors and the wire can stay in uint8. In
    place: one float copy instead of two (the profile put 14% of an update here)."""
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


# Orthogonal weights with this gain keep the signal's variance through ReLU layers.
RELU_GAIN = math.sqrt(2)


def _init_relu_torso_and_heads(agent: Agent) -> None:
    """Orthogonal weights with gain sqrt(2) and zero biases for the ReLU layers, and each
    head's own gain (IMPALA's policy head 0.01: a near-uniform first policy).

    Why: under PyTorch's default init each ReLU layer shrinks the signal's variance about
    six-fold, so on Pong's near-constant screens the 512 features varied by 3e-4 from frame
    to frame, against 1.0 for the one-hot last action beside them: the heads could barely see
    the game, and Pong sat at -20.3 for 9M frames.
    Gain sqrt(2) keeps the variance through ReLUs (25x more variation at the features).
    """
    for module in agent.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(module.weight, gain=RELU_GAIN)
            nn.init.zeros_(module.bias)
    _init_heads(agent)


def _init_heads(agent: Agent) -> None:
    """Each head orthogonal with its own gain, biases zero."""
    for spec in agent.head_specs:
        nn.init.orthogonal_(agent.heads[spec.name].weight, gain=spec.init_gain)
        nn.init.zeros_(agent.heads[spec.name].bias)


AGENTS: dict[str, type[Agent]] = {cls.__name__: cls for cls in (
    SimpleConvNetAgent, ResNetAgent, ResNetLSTMAgent, SimpleConvNetLSTMAgent, MLPAgent,
    MLPLSTMAgent)}


def agent_class(name: str) -> type[Agent]:
    """Look an agent up by name, case-insensitively (`simpleconvnetagent` works too)."""
    by_lower = {key.lower(): cls for key, cls in AGENTS.items()}
    try:
        return by_lower[name.lower()]
    except KeyError:
        raise ValueError(f"unknown agent_name {name!r}; valid names: {', '.join(AGENTS)}"
                         ) from None


def create_agent(name: str, observation_shape: tuple[int, ...], num_actions: int,
                 heads: tuple[Head, ...], action_reward_inputs: bool = True) -> Agent:
    return agent_class(name)(tuple(observation_shape), num_actions, heads,
                             action_reward_inputs)


def build_agent(name: str, env: EnvInfo, algorithm: Algorithm | type[Algorithm]) -> Agent:
    """The agent `name` for an environment as envs.env_info describes it, with the
    algorithm's heads and inputs: the one way the learner, every actor and evaluation build
    it, so their weights always fit each other."""
    return create_agent(name, env.observation_shape, env.num_actions, algorithm.heads,
                        algorithm.action_reward_inputs)

