"""Publishing the learner's weights without stalling its updates.

After each update the training thread takes a snapshot of the weights and goes on to the
next update; `WeightPublisher`'s thread checks the snapshot (every weight finite) and hands
it to the receiver, which serves it to the actors. On a GPU the snapshot is a copy to host
memory queued behind the optimizer step, so the training thread does not wait for the
step to end; the publisher thread waits for the copy. On the CPU the snapshot is a plain
copy, and the check leaves the training thread.

Every version is published, in order: the training thread waits only when the publisher
is a whole snapshot behind (one snapshot waits, one is being published), so at most two
copies of the weights are held.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from impala.process import name_os_thread
from impala.weights import refuse_non_finite

log = logging.getLogger("learner")

Publish = Callable[[int, dict[str, np.ndarray], int], None]  # (version, arrays, run_frames)


class Snapshot(NamedTuple):
    version: int
    run_frames: int  # the run's frames when these weights were made
    tensors: dict[str, torch.Tensor]  # host tensors, each the shape of its state_dict entry
    copied: torch.cuda.Event | None  # on a GPU: recorded after the copies were queued


def take_snapshot(model: nn.Module, version: int, run_frames: int) -> Snapshot:
    """The model's weights as host tensors the optimizer will not touch. From a GPU the
    copies are queued (into pinned memory) and `copied` says when they are done."""
    state = model.state_dict()
    # From a GPU, non_blocking copies into pinned host memory, filled behind the queued
    # step; on the CPU, plain copies. Always copies, so the optimizer never writes into one.
    # (state_dict's tensors are detached already.)
    tensors = {name: t.to("cpu", non_blocking=True, copy=True) for name, t in state.items()}
    copied = None
    if any(t.is_cuda for t in state.values()):
        copied = torch.cuda.Event()
        copied.record()
    return Snapshot(version, run_frames, tensors, copied)


class WeightPublisher(threading.Thread):
    """The thread between the training loop and the receiver: `submit` a model after each
    update, `close` at the end. A non-finite weight is never published: the thread stops,
    and the next `submit` (or `raise_if_failed`) raises FloatingPointError."""

    def __init__(self, publish: Publish) -> None:
        super().__init__(name="publisher", daemon=True)
        self.publish = publish
        self.waiting: queue.Queue[Snapshot | None] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.published = 0  # versions handed to `publish`

    def submit(self, model: nn.Module, version: int, run_frames: int) -> None:
        """Snapshot `model` as weights `version` and queue them; waits only while an older
        snapshot is still waiting."""
        self.raise_if_failed()
        self._put(take_snapshot(model, version, run_frames))

    def raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self, timeout: float = 60.0) -> None:
        """Publish what is queued, then end the thread (an error stays in `error`)."""
        if self.is_alive():
            self._put(None)
            self.join(timeout)
            if self.is_alive():
                log.warning("the weight publisher did not finish within %.0f s", timeout)

    def _put(self, item: Snapshot | None) -> None:
        while True:
            try:
                self.waiting.put(item, timeout=0.5)
                return
            except queue.Full:
                if not self.is_alive():  # it failed: nothing will take the item
                    self.raise_if_failed()
                    return

    def run(self) -> None:
        name_os_thread()
        try:
            while (snapshot := self.waiting.get()) is not None:
                self._publish(snapshot)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            self.error = exc

    def _publish(self, snapshot: Snapshot) -> None:
        if snapshot.copied is not None:
            snapshot.copied.synchronize()
        arrays = refuse_non_finite({name: t.numpy() for name, t in snapshot.tensors.items()},
                                   when=f"by update {snapshot.version}")
        self.publish(snapshot.version, arrays, snapshot.run_frames)
        self.published += 1
