"""The unroll: what an actor sends per environment, and how a learner batches unrolls.

An unroll holds T+1 steps; step 0 repeats the last step of the previous unroll. Per step
it has the environment's output (observation, reward on arrival, done = "this step starts
a new episode", last_action) and the agent's output on it (action, policy_logits), plus
the agent's core state before step 0. Batches are time-major: `[T+1, B, ...]`.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from impala.framestack import rebuild_stacks
from impala.transport import FieldSpec, Message, WireError, meta_int

if TYPE_CHECKING:  # annotations only: the wire layout needs neither gymnasium nor the nets
    from impala.envs import EnvInfo
    from impala.nets import Agent

# Fields that exist only on the wire: the learner rebuilds `observation` from them.
WIRE_ONLY_FIELDS = ("frames", "episode_start")


@dataclass(frozen=True)
class UnrollLayout:
    unroll_length: int  # T
    observation_shape: tuple[int, ...]
    observation_dtype: str
    num_actions: int
    core_shapes: tuple[tuple[int, ...], ...]  # per core tensor, without the batch dim
    frame_stack: int = 0  # > 0: observations are stacks of this many frames, sent once each

    @classmethod
    def for_agent(cls, unroll_length: int, env: EnvInfo, agent: Agent) -> UnrollLayout:
        """The one derivation of the wire layout, used by actors and learners alike."""
        return cls(unroll_length=unroll_length, observation_shape=env.observation_shape,
                   observation_dtype=env.observation_dtype.name, num_actions=env.num_actions,
                   core_shapes=core_shapes_of(agent.initial_state(1)),
                   frame_stack=env.frame_stack)

    def schema(self, continued: bool = False) -> dict[str, FieldSpec]:
        """The arrays of one unroll message, each with a leading T+1 (core: none).

        With frame stacking, `observation` travels as `frames` [T+S, H, W] plus
        `episode_start` [T+1] (see framestack.py) and is rebuilt on the learner; an unroll
        that `continued` its stream carries only the T new frames `[T, H, W]`.
        """
        steps = self.unroll_length + 1
        if self.frame_stack:
            stack, *frame_shape = self.observation_shape
            frames = self.unroll_length if continued else steps + stack - 1
            fields = {
                "frames": FieldSpec(self.observation_dtype, (frames, *frame_shape)),
                "episode_start": FieldSpec("bool", (steps,)),
            }
        else:
            fields = {"observation": FieldSpec(self.observation_dtype,
                                               (steps, *self.observation_shape))}
        fields |= {
            "reward": FieldSpec("float32", (steps,)),
            "done": FieldSpec("bool", (steps,)),
            "last_action": FieldSpec("int64", (steps,)),
            "action": FieldSpec("int64", (steps,)),
            "policy_logits": FieldSpec("float32", (steps, self.num_actions)),
        }
        for k, shape in enumerate(self.core_shapes):
            fields[f"core_{k}"] = FieldSpec("float32", shape)
        return fields

    def batch_fields(self) -> dict[str, FieldSpec]:
        """What a learner batch holds per unroll: the schema with observations rebuilt."""
        fields = {name: spec for name, spec in self.schema().items()
                  if name not in WIRE_ONLY_FIELDS}
        steps = self.unroll_length + 1
        fields["observation"] = FieldSpec(self.observation_dtype,
                                          (steps, *self.observation_shape))
        return fields


def core_shapes_of(initial_state: tuple[torch.Tensor, ...]) -> tuple[tuple[int, ...], ...]:
    """Shapes of one environment's core state, from `agent.initial_state(1)` ([L, 1, H])."""
    return tuple(tuple(t.shape[:1]) + tuple(t.shape[2:]) for t in initial_state)


@dataclass
class EpisodeStats:
    returns: list[float]
    lengths: list[int]


# Sane ranges for what an unroll's meta may carry: a policy version and a stream's sequence
# number stay exact as float64; an episode's length and |return| stay far from overflow.
MAX_COUNTER = (1 << 53) - 1
MAX_EPISODE_LENGTH = (1 << 31) - 1
MAX_ABS_RETURN = 1e12
MAX_STREAMS_PER_ACTOR = 1 << 16


def parse_unroll_meta(message: Message, max_episodes: int) -> tuple[int, EpisodeStats]:
    """(policy_version, finished-episode statistics) from an unroll's meta, validated."""
    meta = message.meta
    version = meta_int(meta, "policy_version", 0, MAX_COUNTER)
    returns = meta.get("episode_returns", [])
    lengths = meta.get("episode_lengths", [])
    if not (isinstance(returns, list) and isinstance(lengths, list)
            and len(returns) == len(lengths) <= max_episodes
            and all(_is_sane_return(r) for r in returns)
            and all(isinstance(n, int) and not isinstance(n, bool)
                    and 0 <= n <= MAX_EPISODE_LENGTH for n in lengths)):
        raise WireError("meta.episode_returns/episode_lengths must be equal-length lists of "
                        f"at most {max_episodes} returns (|r| <= {MAX_ABS_RETURN:g}) and "
                        f"lengths (0..{MAX_EPISODE_LENGTH})")
    return version, EpisodeStats([float(r) for r in returns], [int(n) for n in lengths])


def _is_sane_return(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    # Compared before any float conversion: float() of a 400-digit integer overflows.
    return -MAX_ABS_RETURN <= value <= MAX_ABS_RETURN


def parse_stream_meta(message: Message) -> tuple[int, int]:
    """(stream, seq) of a frame-stacked unroll: which env of its actor, which unroll of it."""
    return (meta_int(message.meta, "stream", 0, MAX_STREAMS_PER_ACTOR - 1),
            meta_int(message.meta, "seq", 0, MAX_COUNTER))


def check_unroll_values(arrays: dict[str, np.ndarray], num_actions: int) -> None:
    """Refuse values no environment or agent produces (WireError naming the field).

    The decoder has checked names, dtypes and shapes; these are the values the learner
    would index with (actions), do arithmetic on (floats) or branch on (flags). A NaN
    reward or an action out of range would crash or poison an update.
    """
    for name in ("action", "last_action"):
        values = arrays[name]
        if values.min() < 0 or values.max() >= num_actions:
            raise WireError(f"field {name!r}: values must lie in [0, {num_actions}), got "
                            f"[{values.min()}, {values.max()}]")
    for name, values in arrays.items():
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise WireError(f"field {name!r}: NaN or infinite values")
        if values.dtype == np.bool_ and values.view(np.uint8).max(initial=0) > 1:
            raise WireError(f"field {name!r}: booleans must be bytes 0 or 1")


class Batch:
    """Preallocated time-major arrays for `batch_size` unrolls; torch views share memory."""

    def __init__(self, layout: UnrollLayout, batch_size: int) -> None:
        self.size = batch_size
        self.arrays: dict[str, np.ndarray] = {}
        for name, spec in layout.batch_fields().items():
            # Steps [T+1, ...] -> [T+1, B, ...]; core [L, H] -> [L, B, H] as nn.LSTM takes it.
            shape = (spec.shape[0], batch_size, *spec.shape[1:])
            self.arrays[name] = np.zeros(shape, dtype=spec.dtype)
        self.tensors = {name: torch.from_numpy(a) for name, a in self.arrays.items()}
        self.filled = 0
        self.policy_versions: list[int] = []
        self.episodes = EpisodeStats([], [])

    def add(self, message: Message, version: int, episodes: EpisodeStats) -> None:
        """Copy one validated unroll into the next free column (the only copy it gets)."""
        column = self.filled
        arrays = message.arrays
        if "frames" in arrays:
            rebuild_stacks(arrays["frames"], arrays["episode_start"],
                           self.arrays["observation"][:, column])
        for name, array in arrays.items():
            if name not in WIRE_ONLY_FIELDS:
                self.arrays[name][:, column] = array
        self.filled += 1
        self.policy_versions.append(version)
        self.episodes.returns.extend(episodes.returns)
        self.episodes.lengths.extend(episodes.lengths)

    @property
    def full(self) -> bool:
        return self.filled == self.size

    def reset(self) -> None:
        self.filled = 0
        self.policy_versions = []
        self.episodes = EpisodeStats([], [])

    def core_state(self) -> tuple[torch.Tensor, ...]:
        count = sum(1 for name in self.tensors if name.startswith("core_"))
        return tuple(self.tensors[f"core_{k}"] for k in range(count))


class BatchQueue:
    """A fixed pool of Batches cycling between a filler thread and the training loop.

    The filler takes a free batch, fills it and hands it over; the learner trains on it
    and gives it back. With `capacity` ready batches queued, the filler waits, stops
    reading the socket, and ZeroMQ's high-water marks push back on the actors.
    """

    def __init__(self, layout: UnrollLayout, batch_size: int, capacity: int) -> None:
        self.free: queue.Queue[Batch] = queue.Queue()
        self.ready: queue.Queue[Batch] = queue.Queue()
        for _ in range(capacity + 2):  # + one training, + one filling
            self.free.put(Batch(layout, batch_size))
        self._filling: Batch | None = None
        self._lock = threading.Lock()

    def add(self, message: Message, version: int, episodes: EpisodeStats,
            stop: threading.Event) -> bool:
        """Add an unroll; False if `stop` was set while waiting for a free batch."""
        while self._filling is None:
            try:
                self._filling = self.free.get(timeout=0.2)
            except queue.Empty:
                if stop.is_set():
                    return False
        self._filling.add(message, version, episodes)
        if self._filling.full:
            self.ready.put(self._filling)
            self._filling = None
        return True

    def depth(self) -> int:
        return self.ready.qsize()

    def get(self, timeout: float) -> Batch | None:
        try:
            return self.ready.get(timeout=timeout)
        except queue.Empty:
            return None

    def release(self, batch: Batch) -> None:
        batch.reset()
        self.free.put(batch)


def batch_to_device(batch: Batch, device: torch.device) -> dict[str, Any]:
    if device.type == "cpu":
        return dict(batch.tensors)  # no copy: the arrays are the tensors' storage
    return {k: v.to(device, non_blocking=True) for k, v in batch.tensors.items()}
