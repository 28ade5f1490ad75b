"""The learner's socket thread: unrolls from its actors into batches, weights out.

`UnrollReceiver` reads the socket on a thread of its own, validates each message (wire
format, then values) and copies it straight into a preallocated batch, so the next batch is
assembled while the current one trains; it answers weight requests from what the training
loop published, and runs the frame-stream restart protocol (unroll/framestack.py). The unroll
itself is impala/unroll/'s (`UnrollReader`). Any message that fails in any way is a counted drop.

What the learner uses: `serve` (the socket bound, its batches and the thread started), then
`publish`, `counts`, `raise_if_stopped` (the thread ended by itself: why), `address` and
`stop`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from impala.auth import RunKeys
from impala.config import Config, parse_host_port
from impala.cores import learner_io_threads
from impala.process import name_os_thread
from impala.transport import (
    MAX_HEADER_BYTES,
    DropLog,
    LearnerSocket,
    Message,
    WireError,
    decode,
    encode,
    meta_int,
)
from impala.unroll.batches import BatchQueue
from impala.unroll.framestack import StreamGap
from impala.unroll.layout import UnrollLayout
from impala.unroll.reader import MAX_COUNTER, UnrollReader

log = logging.getLogger("learner")

# Peers asked to restart their frame streams that have not asked for weights yet: bounded,
# since peers that went away never do (such a peer just restarts once more).
MAX_PENDING_RESTARTS = 10_000


@dataclass(frozen=True)
class ReceiverCounts:
    """What the receiver has taken in since it started."""

    unrolls: int  # unrolls kept in batches
    unroll_bytes: int  # their messages on the wire, headers included
    dropped: int  # malformed messages, each counted and logged by reason
    drop_reasons: Mapping[str, int]
    stream_restarts: int  # unrolls dropped because their frame stream could not go on
    senders: int  # distinct sender names among the kept unrolls


class Served(NamedTuple):
    """The weights the receiver answers requests with."""

    version: int
    arrays: dict[str, np.ndarray]
    message: list[Any]  # `arrays` encoded once, sent to every actor that asks
    run_frames: int  # the run's frames when they were made


class UnrollReceiver:
    """The socket thread: unrolls into the BatchQueue, weight requests answered from
    `publish`. It owns the socket from `start` to `stop`."""

    def __init__(self, sock: LearnerSocket, layout: UnrollLayout, batches: BatchQueue,
                 max_bytes: int, name: str) -> None:
        self._sock = sock
        self._batches = batches
        self._max_bytes = max_bytes
        self._learner_name = name
        self._reader = UnrollReader(layout)
        self._schemas = {**self._reader.schemas, "weights_request": None}
        self._drops = DropLog(log.warning)
        self._stop = threading.Event()
        self._unrolls = 0
        self._unroll_bytes = 0
        self._stream_restarts = 0
        self._senders: set[str] = set()
        self._restart_requested: set[bytes] = set()  # peers told to start their streams again
        self._served: Served | None = None
        self._lock = threading.Lock()
        self._error: str | None = None  # why the thread ended, if it ended by itself
        self._thread = threading.Thread(target=self._serve, name="unroll-receiver", daemon=True)

    @property
    def address(self) -> str:
        return self._sock.address

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread and close the socket."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()

    def raise_if_stopped(self) -> None:
        """ReceiverStopped, saying why, if the thread ended by itself (the socket, a bug)."""
        if self._thread.ident is not None and not self._thread.is_alive() \
                and not self._stop.is_set():
            raise ReceiverStopped(f"the unroll receiver thread ended: {self._error}")

    def counts(self) -> ReceiverCounts:
        # One copy of the reasons (made while holding the GIL), summed here: never an
        # iteration over the live counter, which the receiver thread may grow meanwhile.
        reasons = dict(self._drops.counts)
        return ReceiverCounts(self._unrolls, self._unroll_bytes, sum(reasons.values()),
                              reasons, self._stream_restarts, len(self._senders))

    def publish(self, version: int, arrays: dict[str, np.ndarray], run_frames: int = 0
                ) -> None:
        """Serve these weights from now on; `run_frames`: the run's frames when they were
        made (actors whose exploration follows a schedule read it)."""
        message = encode("weights", self._learner_name, arrays, version=version,
                         run_frames=run_frames)
        with self._lock:
            self._served = Served(version, arrays, message, run_frames)

    def _serve(self) -> None:
        """Serve until stopped. A message that fails in any way is a counted drop; if the
        loop itself fails, `raise_if_stopped` says why."""
        name_os_thread()
        try:
            while not self._stop.is_set():
                received = self._sock.receive(timeout_ms=100)
                if received is not None:
                    self._handle(*received)
        except BaseException as exc:  # noqa: BLE001 - reported through raise_if_stopped
            self._error = f"{type(exc).__name__}: {exc}"
            log.exception("the unroll receiver stopped")

    def _handle(self, identity: bytes, frames: list[Any]) -> None:
        try:
            message = decode(frames, self._schemas, self._max_bytes)
            if message.kind == "weights_request":
                self._answer_weights_request(identity, message.sender, message.meta)
            else:
                self._unroll_bytes += sum(len(frame) for frame in frames)
                self._take_unroll(identity, message)
        except WireError as exc:
            self._drops.drop(_peer_label(identity, frames), str(exc))
        except Exception as exc:  # noqa: BLE001 - whatever a message makes raise, it is dropped
            self._drops.drop(_peer_label(identity, frames),
                            f"unexpected {type(exc).__name__}: {exc}")

    def _take_unroll(self, identity: bytes, message: Message) -> None:
        try:
            # Keyed by the ZeroMQ identity, which a peer cannot choose (a name it can).
            unroll = self._reader.read(identity, message)
        except StreamGap as gap:
            self._restart_streams(identity, message.sender, str(gap))
            return
        if self._batches.add(unroll, self._stop):
            self._unrolls += 1
            self._senders.add(message.sender)
            self._reader.kept(unroll)

    def _restart_streams(self, identity: bytes, sender: str, why: str) -> None:
        """Drop an unroll whose stream cannot go on; the answer to the peer's next weights
        request asks it to send self-contained unrolls again."""
        self._stream_restarts += 1
        if identity not in self._restart_requested:
            if len(self._restart_requested) >= MAX_PENDING_RESTARTS:  # peers that left
                self._restart_requested.pop()
            self._restart_requested.add(identity)
            self._reader.forget(identity)
            log.info("%s: an unroll %s; asking it to restart its frame streams "
                     "(%d unrolls dropped for this so far)", sender[:50], why,
                     self._stream_restarts)

    def _answer_weights_request(self, identity: bytes, sender: str,
                                meta: dict[str, Any]) -> None:
        if "down" in meta:
            log.warning("%s is left down by its supervisor: %s; the run goes on with the "
                        "other actors", printable(sender, 50), printable(meta["down"], 300))
        have = meta_int(meta, "version", -1, MAX_COUNTER)
        with self._lock:
            served = self._served
        restart = {}
        if identity in self._restart_requested:
            self._restart_requested.discard(identity)
            restart = {"restart_streams": True}
        if served is None or served.version == have:
            self._sock.send(identity, encode("no_update", self._learner_name,
                                             version=served.version if served else -1,
                                             **restart))
        elif restart:  # the weights with one more header field; the buffers are not copied
            self._sock.send(identity, encode("weights", self._learner_name, served.arrays,
                                             version=served.version,
                                             run_frames=served.run_frames, **restart))
        else:
            self._sock.send(identity, served.message)


def serve(cfg: Config, layout: UnrollLayout, device: torch.device, replayed_columns: int,
          keys: RunKeys | None, name: str) -> tuple[UnrollReceiver, BatchQueue]:
    """Bind the learner's socket at `--learner_host`, make the batches it fills (with room
    for `replayed_columns` more, and each unroll's stored form kept where there is replay),
    and start the receiver thread; it serves no weights until the first are published."""
    host, port = parse_host_port(cfg.learner_host)
    sock = LearnerSocket(host, port, largest_frame(layout),
                         receive_hwm=cfg.queue_capacity * cfg.batch_size + cfg.batch_size,
                         keys=keys, io_threads=learner_io_threads(cfg.learner_io_threads))
    batches = BatchQueue(layout, cfg.batch_size, cfg.queue_capacity,
                         extra_columns=replayed_columns, keep_stored=replayed_columns > 0,
                         pinned=device.type == "cuda",
                         stacks_on_device=cfg.stacks_on_device(device))
    receiver = UnrollReceiver(sock, layout, batches, int(cfg.max_message_mb * 2**20), name=name)
    receiver.start()
    return receiver, batches


def largest_frame(layout: UnrollLayout) -> int:
    """The biggest frame an actor sends, with room for CURVE's per-frame envelope (tens of
    bytes): ZeroMQ cuts off a peer that sends more, before buffering it."""
    schemas = [layout.schema(), layout.schema(continued=True)]
    return 4096 + max(MAX_HEADER_BYTES, *(spec.nbytes for schema in schemas
                                          for spec in schema.values()))


class ReceiverStopped(RuntimeError):
    """The socket thread ended while the learner was running."""


def printable(value: Any, limit: int) -> str:
    """A peer's text fit for a log line: printable characters only, at most `limit`."""
    return "".join(c for c in str(value) if c.isprintable())[:limit]


def _peer_label(identity: bytes, frames: list[Any]) -> str:
    try:
        address = frames[0].get("Peer-Address")
    except Exception:  # noqa: BLE001 - a label only; any failure just omits the address
        address = "?"
    return f"peer {identity.hex()} at {address}"
