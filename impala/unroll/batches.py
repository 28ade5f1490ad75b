"""How a learner batches unrolls: time-major arrays `[T+1, B, ...]` filled in place.

The unroll's format is layout.py's; here it is only copied into batch columns. A batch may
have room for replayed unrolls after its B fresh ones (the learner fills those columns from
replay, see replay.py) and may keep each fresh unroll's stored form for replay to keep.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
import torch

from impala.unroll.framestack import stacks_from_frames
from impala.unroll.layout import (
    CORE_PREFIX,
    EPISODE_START,
    FRAME_FIELDS,
    FRAMES,
    OBSERVATION,
    UnrollLayout,
    core_field,
    write_batch_column,
)
from impala.unroll.reader import EpisodeStats, Unroll


class Batch:
    """Preallocated time-major arrays; torch views share their memory.

    Columns [0, size) take the fresh unrolls from actors; `extra_columns` more may take
    replayed ones. With `keep_stored`, each fresh unroll's stored form is kept too
    (`stored[name]` is `[size, ...]`), for replay to copy. With `pinned` (a GPU learner's
    batches) the arrays are in page-locked memory, so that their copy to the GPU runs
    beside the host's work instead of before it. With `stacks_on_device` a frame-stacked
    batch holds frames `[T+S, B, H, W]` and `episode_start` `[T+1, B]` instead of
    observations (the update gathers the stacks: framestack.stacks_from_frames).
    """

    def __init__(self, layout: UnrollLayout, batch_size: int, extra_columns: int = 0,
                 keep_stored: bool = False, pinned: bool = False,
                 stacks_on_device: bool = False) -> None:
        self.size = batch_size
        columns = batch_size + extra_columns
        self.tensors: dict[str, torch.Tensor] = {}
        for name, spec in layout.batch_fields(stacks_on_device).items():
            # Steps [T+1, ...] -> [T+1, B, ...]; core [L, H] -> [L, B, H] as nn.LSTM takes it.
            shape = (spec.shape[0], columns, *spec.shape[1:])
            tensor = torch.from_numpy(np.zeros(shape, dtype=spec.dtype))
            self.tensors[name] = tensor.pin_memory() if pinned else tensor
        self.arrays = {name: t.numpy() for name, t in self.tensors.items()}
        self.stored = ({name: np.zeros((batch_size, *spec.shape), dtype=spec.dtype)
                        for name, spec in layout.schema().items()} if keep_stored else None)
        self.filled = 0
        self.policy_versions: list[int] = []
        self.priorities: list[float | None] = []  # the actors', for replay
        self.episodes = EpisodeStats.empty()

    def add(self, unroll: Unroll) -> None:
        """Copy one checked unroll into the next free column (the only copy it gets)."""
        column = self.filled
        write_batch_column(unroll.arrays, self.arrays, column)
        if self.stored is not None:
            for name, array in unroll.arrays.items():
                self.stored[name][column] = array
        self.filled += 1
        self.policy_versions.append(unroll.policy_version)
        self.priorities.append(unroll.priority)
        self.episodes.extend(unroll.episodes)

    @property
    def full(self) -> bool:
        return self.filled == self.size

    def reset(self) -> None:
        self.filled = 0
        self.policy_versions = []
        self.priorities = []
        self.episodes = EpisodeStats.empty()

    def columns(self, count: int) -> dict[str, torch.Tensor]:
        """Views of the first `count` columns: steps [T+1, count, ...], core [L, count, H]."""
        return {name: t.narrow(1, 0, count) for name, t in self.tensors.items()}


def core_state(tensors: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The core tensors of batch `tensors`, in order: each [L, B, H]."""
    count = sum(1 for name in tensors if name.startswith(CORE_PREFIX))
    return tuple(tensors[core_field(k)] for k in range(count))


class BatchQueue:
    """A fixed pool of Batches cycling between a filler thread and the training loop.

    The filler takes a free batch, fills it and hands it over; the learner trains on it
    and gives it back. With `capacity` ready batches queued, the filler waits, stops
    reading the socket, and ZeroMQ's high-water marks push back on the actors.
    """

    def __init__(self, layout: UnrollLayout, batch_size: int, capacity: int,
                 extra_columns: int = 0, keep_stored: bool = False,
                 pinned: bool = False, stacks_on_device: bool = False) -> None:
        self.free: queue.Queue[Batch] = queue.Queue()
        self.ready: queue.Queue[Batch] = queue.Queue()
        for _ in range(capacity + 2):  # + one training, + one filling
            self.free.put(Batch(layout, batch_size, extra_columns, keep_stored, pinned,
                                stacks_on_device))
        self._filling: Batch | None = None
        self._lock = threading.Lock()

    def add(self, unroll: Unroll, stop: threading.Event) -> bool:
        """Add an unroll; False if `stop` was set while waiting for a free batch."""
        while self._filling is None:
            try:
                self._filling = self.free.get(timeout=0.2)
            except queue.Empty:
                if stop.is_set():
                    return False
        self._filling.add(unroll)
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
        """Give a trained batch back to be filled again. Its copy to a GPU (if any) is done
        by then: an update ends by reading its statistics, which waits for its work."""
        batch.reset()
        self.free.put(batch)


def to_device(tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, Any]:
    """The batch's tensors on `device`: themselves on the CPU; on a GPU, copies queued on
    the current stream (they overlap the host's work from pinned memory)."""
    if device.type == "cpu":
        return dict(tensors)  # no copy: the arrays are the tensors' storage
    return {k: v.to(device, non_blocking=True) for k, v in tensors.items()}


def with_stacks(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch that carries frames (`[T+S, B, H, W]`, `episode_start` `[T+1, B]`) with its
    observations `[T+1, B, S, H, W]` gathered from them where the tensors are; any other
    batch as it is."""
    if FRAMES not in tensors:
        return tensors
    stacked = {name: t for name, t in tensors.items() if name not in FRAME_FIELDS}
    stacked[OBSERVATION] = stacks_from_frames(tensors[FRAMES], tensors[EPISODE_START])
    return stacked
