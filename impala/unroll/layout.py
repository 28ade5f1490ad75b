"""What an unroll holds: its fields and their three forms, all derived from `UnrollLayout`.

An unroll holds T+1 steps of one environment; step 0 repeats the last step of the previous
unroll. Per step it has the environment's output (observation, reward on arrival, done =
"this step starts a new episode", last_action) and the agent's output on it (the action,
and the [A] floats the algorithm records beside it, under the algorithm's name:
`layout.recorded`), plus the agent's core state before step 0.

Three forms, all derived from `UnrollLayout`:
- **stored** (`layout.schema()`): a self-contained unroll. With frame stacking (Atari) the
  observations travel as `frames [T+S, H, W]` (each frame once) and `episode_start [T+1]`
  (framestack.py). This is what an actor sends first, and what replay keeps.
- **continued** (`layout.schema(continued=True)`): the same, with only the T new frames; the
  learner prepends the S frames it kept from the stream's previous unroll.
- **batch column** (`layout.batch_fields()`): what the learner trains on, observations
  rebuilt as `[T+1, S, H, W]` stacks by `write_batch_column`.

Actors use `writer.UnrollWriter`; learners use `reader.UnrollReader` (values checked,
stream continued) and `write_batch_column`; replay stores the stored form. Nothing else
knows the layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from impala.algorithm import ACTION, DONE, LAST_ACTION, OBSERVATION, REWARD
from impala.transport import FieldSpec
from impala.unroll.framestack import rebuild_stacks

if TYPE_CHECKING:  # annotations only: the layout needs neither gymnasium nor the nets
    from impala.envs import EnvInfo
    from impala.nets import Agent

# Message kinds.
UNROLL = "unroll"
UNROLL_CONTINUED = "unroll_continued"

# Array fields: the batch's (impala/algorithm.py names them), and these.
FRAMES = "frames"  # frame stacking: each frame once
EPISODE_START = "episode_start"  # frame stacking: the environment was reset at this step
CORE_PREFIX = "core_"

# Fields that exist only in the stored and wire forms: the batch rebuilds `observation`.
FRAME_FIELDS = (FRAMES, EPISODE_START)

# Meta (header) keys.
POLICY_VERSION = "policy_version"
EPISODE_RETURNS = "episode_returns"
EPISODE_LENGTHS = "episode_lengths"
STREAM = "stream"
SEQ = "seq"
PRIORITY = "priority"  # the replay priority the actor computed, where the algorithm does
TAGS = "tags"  # {name: value}: the algorithm's episode tags for the sending environment

def core_field(k: int) -> str:
    return f"{CORE_PREFIX}{k}"


@dataclass(frozen=True)
class UnrollLayout:
    unroll_length: int  # T
    observation_shape: tuple[int, ...]
    observation_dtype: str
    num_actions: int
    core_shapes: tuple[tuple[int, ...], ...]  # per core tensor, without the batch dim
    recorded: str  # the algorithm's name for the [A] floats recorded beside each action
    frame_stack: int = 0  # > 0: observations are stacks of this many frames, sent once each
    overlap: int = 1  # steps an unroll shares with the previous one of its environment
    episode_tags: tuple[str, ...] = ()  # the algorithm's per-episode values an unroll carries

    @classmethod
    def for_agent(cls, unroll_length: int, env: EnvInfo, agent: Agent, recorded: str,
                  overlap: int = 1, episode_tags: tuple[str, ...] = ()) -> UnrollLayout:
        """The one derivation of the layout, used by actors and learners alike (what is
        recorded, the overlap and the episode tags are the algorithm's:
        impala/algorithm.py)."""
        if not 1 <= overlap <= unroll_length:
            raise ValueError(f"unrolls of {unroll_length} steps cannot overlap by {overlap}")
        return cls(unroll_length=unroll_length, observation_shape=env.observation_shape,
                   observation_dtype=env.observation_dtype.name, num_actions=env.num_actions,
                   core_shapes=core_shapes_of(agent.initial_state(1)), recorded=recorded,
                   frame_stack=env.frame_stack, overlap=overlap, episode_tags=episode_tags)

    @property
    def core_names(self) -> list[str]:
        return [core_field(k) for k in range(len(self.core_shapes))]

    def schema(self, continued: bool = False) -> dict[str, FieldSpec]:
        """The arrays of one unroll (the stored form), each with a leading T+1 (core: none).

        With frame stacking, `observation` is `frames [T+S, H, W]` plus `episode_start
        [T+1]`; an unroll that `continued` its stream carries only the T + 1 - overlap new
        frames.
        """
        steps = self.unroll_length + 1
        if self.frame_stack:
            stack, *frame_shape = self.observation_shape
            frames = steps - self.overlap if continued else steps + stack - 1
            fields = {
                FRAMES: FieldSpec(self.observation_dtype, (frames, *frame_shape)),
                EPISODE_START: FieldSpec("bool", (steps,)),
            }
        else:
            fields = {OBSERVATION: FieldSpec(self.observation_dtype,
                                             (steps, *self.observation_shape))}
        fields |= {
            REWARD: FieldSpec("float32", (steps,)),
            DONE: FieldSpec("bool", (steps,)),
            LAST_ACTION: FieldSpec("int64", (steps,)),
            ACTION: FieldSpec("int64", (steps,)),
            self.recorded: FieldSpec("float32", (steps, self.num_actions)),
        }
        for name, shape in zip(self.core_names, self.core_shapes, strict=True):
            fields[name] = FieldSpec("float32", shape)
        return fields

    def batch_fields(self, stacks_on_device: bool = False) -> dict[str, FieldSpec]:
        """What a learner batch holds per unroll: the stored form with observations rebuilt,
        or with `stacks_on_device` the stored form itself (frames once each, the stacks
        gathered where the update runs: framestack.stacks_from_frames)."""
        if stacks_on_device and self.frame_stack:
            return self.schema()
        fields = {name: spec for name, spec in self.schema().items()
                  if name not in FRAME_FIELDS}
        fields[OBSERVATION] = FieldSpec(self.observation_dtype,
                                        (self.unroll_length + 1, *self.observation_shape))
        return fields

    def stored_bytes(self) -> int:
        """Bytes of one unroll in its stored form (what replay keeps per unroll)."""
        return sum(spec.nbytes for spec in self.schema().values())


def core_shapes_of(initial_state: tuple[torch.Tensor, ...]) -> tuple[tuple[int, ...], ...]:
    """Shapes of one environment's core state, from `agent.initial_state(1)` ([L, 1, H])."""
    return tuple(tuple(t.shape[:1]) + tuple(t.shape[2:]) for t in initial_state)


def write_batch_column(stored: dict[str, np.ndarray], batch: dict[str, np.ndarray],
                       column: int) -> None:
    """Write one stored-form unroll into column `column` of batch arrays: steps
    `[T+1, B, ...]` (frames `[T+S, B, H, W]`), core `[L, B, H]`; frame-stacked observations
    are rebuilt where the batch holds observations, copied as frames where it holds those."""
    rebuild = FRAMES in stored and OBSERVATION in batch
    if rebuild:
        rebuild_stacks(stored[FRAMES], stored[EPISODE_START], batch[OBSERVATION][:, column])
    for name, array in stored.items():
        if not (rebuild and name in FRAME_FIELDS):
            batch[name][:, column] = array


# ---------------------------------------------------------------------------- actor side
@dataclass
class RecordedSteps:
    """An actor's unroll as recorded, time-major views for its exploration's priorities."""

    reward: np.ndarray  # [T+1, N] float32
    done: np.ndarray  # [T+1, N] bool
    action: np.ndarray  # [T+1, N] int64
    recorded: np.ndarray  # [T+1, N, A] float32: what the algorithm recorded
