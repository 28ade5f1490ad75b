"""The actor's side of the unroll: one buffer per field for N environments, filled step by
step, then sent as one message per environment (layout.py says what an unroll holds)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from impala.algorithm import ACTION, DONE, LAST_ACTION, OBSERVATION, REWARD
from impala.transport import encode
from impala.unroll.framestack import stack_indices
from impala.unroll.layout import (
    CORE_PREFIX,
    EPISODE_LENGTHS,
    EPISODE_RETURNS,
    EPISODE_START,
    FRAMES,
    POLICY_VERSION,
    PRIORITY,
    SEQ,
    STREAM,
    TAGS,
    UNROLL,
    UNROLL_CONTINUED,
    RecordedSteps,
    UnrollLayout,
)

if TYPE_CHECKING:
    from impala.environment_loop import EnvStep

class UnrollWriter:
    """Actor side: one buffer per field for N environments, filled step by step, then sent
    as one message per environment. With frame stacking each environment is a stream: after
    one self-contained unroll, the next ones carry only their T new frames, until
    `restart_streams` (the learner lost the stream)."""

    def __init__(self, layout: UnrollLayout, num_envs: int) -> None:
        self.layout = layout
        self.buffers = {name: np.zeros((num_envs, *spec.shape), dtype=spec.dtype)
                        for name, spec in layout.schema().items()}
        self.sets_sent = 0  # `seq` of the next unroll of each env's stream
        self.streams_open = False  # the learner holds the last stack of every env's stream

    def record(self, t: int, step: EnvStep, actions: np.ndarray, recorded: np.ndarray) -> None:
        """Step t of every env: its environment output, the actions chosen on it [N] and
        what the algorithm records beside them [N, A]."""
        b = self.buffers
        stack = self.layout.frame_stack
        if stack:  # each frame once: step 0's history, then every step's newest frame
            if t == 0:
                b[FRAMES][:, : stack - 1] = step.observation[:, : stack - 1]
            b[FRAMES][:, stack - 1 + t] = step.observation[:, stack - 1]
            b[EPISODE_START][:, t] = step.episode_start
        else:
            b[OBSERVATION][:, t] = step.observation
        b[REWARD][:, t] = step.reward
        b[DONE][:, t] = step.done
        b[LAST_ACTION][:, t] = step.last_action
        b[ACTION][:, t] = actions
        b[self.layout.recorded][:, t] = recorded

    def recorded_steps(self) -> RecordedSteps:
        """The unroll recorded so far, time-major (views: valid until the next record)."""
        b = self.buffers
        return RecordedSteps(*(b[name].swapaxes(0, 1)
                               for name in (REWARD, DONE, ACTION, self.layout.recorded)))

    def shift(self) -> None:
        """Start the next unroll with the last `overlap` steps of this one (steps 0..k-1):
        the caller then records steps k..T. With frame stacking, frames [0, S) become the
        stack of the new step 0 as the learner rebuilds it, then the newest frames of the
        other shared steps follow."""
        b, layout = self.buffers, self.layout
        steps, k, stack = layout.unroll_length + 1, layout.overlap, layout.frame_stack
        if stack:  # before EPISODE_START moves: step T + 1 - k's stack, resets applied
            frames = b[FRAMES]
            for i in range(len(frames)):
                frames[i, :stack] = frames[i, stack_indices(b[EPISODE_START][i], stack)[-k]]
            frames[:, stack:stack - 1 + k] = frames[:, steps - k + stack:steps - 1 + stack]
        for name, array in b.items():
            if name != FRAMES and not name.startswith(CORE_PREFIX):
                array[:, :k] = array[:, steps - k:].copy()

    def record_core(self, core: Sequence[torch.Tensor]) -> None:
        """The core state before step 0, as the agent holds it: each [L, N, H]."""
        for name, tensor in zip(self.layout.core_names, core, strict=True):
            self.buffers[name][:] = tensor.transpose(0, 1).cpu().numpy()

    def restart_streams(self) -> None:
        self.streams_open = False

    def messages(self, sender: str, policy_version: int,
                 finished: Sequence[Sequence[tuple[float, int]]],
                 priorities: np.ndarray | None = None,
                 tags: Mapping[str, np.ndarray] | None = None) -> Iterator[list[Any]]:
        """One encoded message per environment (call `sent()` once all went out);
        `finished[i]`: the (return, length) of the episodes env i ended since its last;
        `priorities[i]`: env i's replay priority, where the algorithm computes one;
        `tags[name][i]`: env i's value of each of the algorithm's episode tags."""
        continued = self.streams_open
        kind = UNROLL_CONTINUED if continued else UNROLL
        for i, episodes in enumerate(finished):
            arrays = {name: array[i] for name, array in self.buffers.items()}
            if continued:  # the shared steps' frames are on the learner already
                arrays[FRAMES] = arrays[FRAMES][self.layout.frame_stack - 1
                                                + self.layout.overlap:]
            meta = {POLICY_VERSION: policy_version,
                    EPISODE_RETURNS: [r for r, _ in episodes],
                    EPISODE_LENGTHS: [n for _, n in episodes],
                    STREAM: i, SEQ: self.sets_sent}
            if priorities is not None:
                meta[PRIORITY] = float(priorities[i])
            if tags:
                meta[TAGS] = {name: float(values[i]) for name, values in tags.items()}
            yield encode(kind, sender, arrays, **meta)

    def sent(self) -> None:
        self.sets_sent += 1
        self.streams_open = bool(self.layout.frame_stack)
