"""The learner's socket thread: unrolls from its actors into batches, weights out.

`UnrollReceiver` reads the socket, validates each message (wire format, then values) and
copies it straight into a preallocated batch, so the next batch is assembled while the
current one trains; it answers weight requests from what the training loop published, and
runs the frame-stream restart protocol (framestack.py). The unroll itself is unroll.py's
(`UnrollReader`). Any message that fails in any way is a counted drop; if the thread itself
ends, `error` says why.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from impala.framestack import StreamGap
from impala.process import name_os_thread
from impala.rollout import BatchQueue
from impala.transport import (
    DropLog,
    LearnerSocket,
    Message,
    WireError,
    decode,
    encode,
    meta_int,
)
from impala.unroll import UnrollLayout
from impala.unroll_reader import MAX_COUNTER, UnrollReader

log = logging.getLogger("learner")

# Peers asked to restart their frame streams that have not asked for weights yet: bounded,
# since peers that went away never do (such a peer just restarts once more).
MAX_PENDING_RESTARTS = 10_000


class UnrollReceiver(threading.Thread):
    """Socket thread: unrolls into the BatchQueue, weight requests answered from `publish`."""

    def __init__(self, sock: LearnerSocket, layout: UnrollLayout, batches: BatchQueue,
                 max_bytes: int, name: str) -> None:
        super().__init__(name="unroll-receiver", daemon=True)
        self.sock = sock
        self.layout = layout
        self.batches = batches
        self.max_bytes = max_bytes
        self.learner_name = name
        self.reader = UnrollReader(layout)
        self.schemas = {**self.reader.schemas, "weights_request": None}
        self.drops = DropLog(log.warning)
        self.stop_event = threading.Event()
        self.unrolls = 0
        self.unroll_bytes = 0  # on the wire, headers included (for bench/system.py)
        self.stream_restarts = 0  # unrolls dropped because their stream could not go on
        self.senders: set[str] = set()
        self._restart_requested: set[bytes] = set()  # peers told to start their streams again
        self._weights: tuple[int, dict[str, np.ndarray], list[Any]] | None = None
        self._lock = threading.Lock()
        self.error: str | None = None  # why `run` ended, if it ended by itself

    def publish(self, version: int, arrays: dict[str, np.ndarray], run_frames: int = 0
                ) -> None:
        """Serve these weights from now on; `run_frames`: the run's frames when they were
        made (actors whose exploration follows a schedule read it)."""
        frames = encode("weights", self.learner_name, arrays, version=version,
                        run_frames=run_frames)
        with self._lock:
            self._weights = (version, arrays, frames, run_frames)

    def run(self) -> None:
        """Serve until stopped. A message that fails in any way is a counted drop; if the
        loop itself fails (the socket, a bug), `error` says why and the learner exits."""
        name_os_thread()
        try:
            while not self.stop_event.is_set():
                received = self.sock.receive(timeout_ms=100)
                if received is not None:
                    self._handle(*received)
        except BaseException as exc:  # noqa: BLE001 - reported through `error` and the log
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("the unroll receiver stopped")

    def _handle(self, identity: bytes, frames: list[Any]) -> None:
        try:
            message = decode(frames, self.schemas, self.max_bytes)
            if message.kind == "weights_request":
                self._answer_weights_request(identity, message.meta)
            else:
                self.unroll_bytes += sum(len(frame) for frame in frames)
                self._take_unroll(identity, message)
        except WireError as exc:
            self.drops.drop(_peer_label(identity, frames), str(exc))
        except Exception as exc:  # noqa: BLE001 - whatever a message makes raise, it is dropped
            self.drops.drop(_peer_label(identity, frames),
                            f"unexpected {type(exc).__name__}: {exc}")

    def _take_unroll(self, identity: bytes, message: Message) -> None:
        try:
            # Keyed by the ZeroMQ identity, which a peer cannot choose (a name it can).
            unroll = self.reader.read(identity, message)
        except StreamGap as gap:
            self._restart_streams(identity, message.sender, str(gap))
            return
        if self.batches.add(unroll, self.stop_event):
            self.unrolls += 1
            self.senders.add(message.sender)
            self.reader.kept(unroll)

    def _restart_streams(self, identity: bytes, sender: str, why: str) -> None:
        """Drop an unroll whose stream cannot go on; the answer to the peer's next weights
        request asks it to send self-contained unrolls again."""
        self.stream_restarts += 1
        if identity not in self._restart_requested:
            if len(self._restart_requested) >= MAX_PENDING_RESTARTS:  # peers that left
                self._restart_requested.pop()
            self._restart_requested.add(identity)
            self.reader.forget(identity)
            log.info("%s: an unroll %s; asking it to restart its frame streams "
                     "(%d unrolls dropped for this so far)", sender[:50], why,
                     self.stream_restarts)

    def _answer_weights_request(self, identity: bytes, meta: dict[str, Any]) -> None:
        have = meta_int(meta, "version", -1, MAX_COUNTER)
        with self._lock:
            current = self._weights
        restart = {}
        if identity in self._restart_requested:
            self._restart_requested.discard(identity)
            restart = {"restart_streams": True}
        if current is None or current[0] == have:
            self.sock.send(identity, encode("no_update", self.learner_name,
                                            version=current[0] if current else -1, **restart))
        elif restart:  # the weights with one more header field; the buffers are not copied
            self.sock.send(identity, encode("weights", self.learner_name, current[1],
                                            version=current[0], run_frames=current[3],
                                            **restart))
        else:
            self.sock.send(identity, current[2])


class ReceiverStopped(RuntimeError):
    """The socket thread ended while the learner was running."""


def _peer_label(identity: bytes, frames: list[Any]) -> str:
    try:
        address = frames[0].get("Peer-Address")
    except Exception:  # noqa: BLE001 - a label only; any failure just omits the address
        address = "?"
    return f"peer {identity.hex()} at {address}"
