"""ZeroMQ wire format and sockets. The network is untrusted: nothing is unpickled.

A message is a multipart ZeroMQ message: one JSON header, then one raw buffer per array.

  header = {"format": 1, "kind": "unroll", "sender": "actor-3",
            "fields": [[name, dtype, [shape...]], ...], "meta": {...}}

`decode` checks every frame against a `Schema` of the arrays it must carry (names, dtypes,
shapes) and raises `WireError` with a short reason for anything else; callers drop such a
message, count the reason and log the sender, and carry on.

Sockets: each learner binds one ROUTER socket. Its actors connect DEALER sockets and send
`unroll` (or `unroll_continued`, see unroll/framestack.py) and `weights_request` messages; the
learner answers a request with `weights` when it has a newer version than the actor's,
else with `no_update`; either answer may carry `restart_streams` (unroll/framestack.py). ZeroMQ
high-water marks bound every queue, so a slow learner pushes back on its actors. With
`--auth=curve` (the default) both ends are CurveZMQ-encrypted and a learner admits only
the run's actors (auth.py).
"""

from __future__ import annotations

import json
import math
import socket as pysocket
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from impala import auth
from impala.auth import RunKeys

FORMAT_VERSION = 1
KINDS = ("unroll", "unroll_continued", "weights_request", "weights", "no_update")
ALLOWED_DTYPES = ("uint8", "int32", "int64", "float32", "bool")
# A real header is under 4 KiB (an unroll's lists its ~10 arrays, weights' their tensors).
MAX_HEADER_BYTES = 64 << 10
# Headers are flat apart from `fields`; deeper nesting is refused before anything reads it.
MAX_HEADER_DEPTH = 6
# Reasons quote sender-chosen text: each is cut to this length in the drop log.
MAX_REASON_CHARS = 200


class WireError(ValueError):
    """A message that does not follow the wire format; `str(err)` is the reason."""


@dataclass(frozen=True)
class FieldSpec:
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


Schema = Mapping[str, FieldSpec]


@dataclass
class Message:
    kind: str
    sender: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def encode(kind: str, sender: str, arrays: Mapping[str, np.ndarray] | None = None,
           **meta: Any) -> list[Any]:
    """Frames for one message: the JSON header, then each array's buffer (no copy)."""
    arrays = arrays or {}
    fields = []
    buffers = []
    for name, array in arrays.items():
        # np.require keeps a 0-dim array 0-dim (ascontiguousarray would make it [1])
        array = np.require(array, requirements="C")
        fields.append([name, array.dtype.name, list(array.shape)])
        buffers.append(memoryview(array).cast("B"))
    header = {"format": FORMAT_VERSION, "kind": kind, "sender": sender,
              "fields": fields, "meta": meta}
    return [json.dumps(header).encode(), *buffers]


def decode(frames: Sequence[Any], schemas: Mapping[str, Schema | None],
           max_bytes: int) -> Message:
    """Parse and validate one message.

    Args:
      frames: the message's frames (bytes or zmq.Frame), header first.
      schemas: for each kind the receiver accepts, the arrays it must carry exactly
        (None: no arrays).
      max_bytes: the largest total size accepted.
    Returns a Message whose arrays are read-only views of the frames (no copy).
    """
    if not frames:
        raise WireError("empty message")
    buffers = [frame.buffer if isinstance(frame, zmq.Frame) else frame for frame in frames]
    total = sum(len(b) for b in buffers)
    if total > max_bytes:
        raise WireError(f"oversized message: {total} bytes > limit {max_bytes}")
    header = _parse_header(bytes(buffers[0]))
    kind = header["kind"]
    if kind not in schemas:
        raise WireError(f"unexpected message kind {kind!r}")
    schema = schemas[kind] or {}
    fields = header["fields"]
    if len(buffers) - 1 != len(fields):
        raise WireError(f"header lists {len(fields)} arrays but {len(buffers) - 1} frames follow")
    names = [entry[0] for entry in fields]
    if sorted(names) != sorted(schema):
        missing = sorted(set(schema) - set(names))
        unknown = sorted(set(names) - set(schema))
        raise WireError(f"fields do not match: missing {missing}, unknown {unknown}")
    arrays = {}
    for (name, dtype, shape), buffer in zip(fields, buffers[1:], strict=True):
        expected = schema[name]
        if dtype != expected.dtype:
            raise WireError(f"field {name!r}: dtype {dtype}, expected {expected.dtype}")
        if tuple(shape) != expected.shape:
            raise WireError(f"field {name!r}: shape {tuple(shape)}, expected {expected.shape}")
        if len(buffer) != expected.nbytes:
            raise WireError(f"field {name!r}: {len(buffer)} bytes, expected {expected.nbytes}")
        arrays[name] = np.frombuffer(buffer, dtype=dtype).reshape(expected.shape)
    return Message(kind=kind, sender=header["sender"], meta=header["meta"], arrays=arrays)


def _parse_header(raw: bytes) -> dict[str, Any]:
    if len(raw) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(raw)} bytes is too large")
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise WireError("header is not JSON") from None
    except RecursionError:  # json recurses once per level of nesting
        raise WireError(f"header nested deeper than {MAX_HEADER_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, or an integer with thousands of digits
        raise WireError(f"header is not JSON ({str(exc)[:80]})") from None
    if _depth(header) > MAX_HEADER_DEPTH:
        raise WireError(f"header nested deeper than {MAX_HEADER_DEPTH} levels")
    if not isinstance(header, dict):
        raise WireError("header is not a JSON object")
    if header.get("format") != FORMAT_VERSION:
        raise WireError(f"wire format {header.get('format')!r}, expected {FORMAT_VERSION}")
    if header.get("kind") not in KINDS:
        raise WireError(f"unknown message kind {header.get('kind')!r}")
    if not isinstance(header.get("sender"), str) or len(header["sender"]) > 200:
        raise WireError("sender must be a short string")
    if not isinstance(header.get("meta"), dict):
        raise WireError("meta must be a JSON object")
    fields = header.get("fields")
    if not isinstance(fields, list) or not all(_is_field_entry(f) for f in fields):
        raise WireError("fields must be a list of [name, dtype, shape]")
    for name, dtype, _ in fields:
        if dtype not in ALLOWED_DTYPES:
            raise WireError(f"field {name[:50]!r}: dtype {str(dtype)[:20]!r} is not one of "
                            f"{', '.join(ALLOWED_DTYPES)}")
    return header


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), walked without recursion and given up
    as soon as it passes MAX_HEADER_DEPTH."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            if deepest > MAX_HEADER_DEPTH:
                break
            pending.extend((child, depth + 1) for child in item)
    return deepest


def meta_int(meta: dict[str, Any], name: str, low: int, high: int, default: Any = None) -> int:
    """`meta[name]` as an integer in [low, high]; WireError naming the field otherwise."""
    value = meta.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise WireError(f"meta.{name} must be an integer in [{low}, {high}]")
    return value


def _is_field_entry(entry: Any) -> bool:
    return (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
            and isinstance(entry[1], str) and isinstance(entry[2], list)
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 31
                    for d in entry[2]))


class DropLog:
    """Counts dropped messages by reason; logs each distinct reason, then every 100th drop
    of it, so a flood of bad messages cannot flood the log. Reasons carry sender-chosen
    text, so at most MAX_REASONS are told apart; later ones are counted together."""

    MAX_REASONS = 100
    OTHER = "other reasons (too many distinct ones to list)"

    def __init__(self, log=print, every: int = 100) -> None:
        self.counts: Counter[str] = Counter()
        self._log = log
        self._every = every

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def drop(self, sender: str, reason: str) -> None:
        reason = reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS] + "..."
        key = reason if reason in self.counts or len(self.counts) < self.MAX_REASONS \
            else self.OTHER
        self.counts[key] += 1
        count = self.counts[key]
        if count == 1 or count % self._every == 0:
            self._log(f"dropped message from {sender}: {reason} "
                      f"({count} dropped for this reason, {self.total} in all)")


def resolve_ip(host: str) -> str:
    """A name such as `localhost` to the IPv4 address ZeroMQ can bind."""
    try:
        return pysocket.gethostbyname(host)
    except OSError as exc:
        raise ValueError(f"cannot resolve host {host!r}: {exc}") from None


class LearnerSocket:
    """The learner's ROUTER socket: unrolls and weight requests in, weights out."""

    def __init__(self, host: str, port: int, max_frame_bytes: int, receive_hwm: int,
                 keys: RunKeys | None = None, io_threads: int = 1) -> None:
        """`max_frame_bytes`: ZeroMQ disconnects a peer that sends a bigger frame, before
        buffering it. `keys`: CURVE encryption, admitting only the run's actors (auth.py).
        `io_threads`: ZeroMQ threads that move (and encrypt) the socket's traffic, each
        actor's connection on one of them (bench/ingest.py measures their load)."""
        address = f"tcp://{resolve_ip(host)}:{port}"  # before any thread is started
        # Its own context: the I/O thread count is fixed when a context starts.
        self.context = zmq.Context(io_threads=io_threads)
        self.authenticator = auth.start_authenticator(self.context, keys) if keys else None
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.RCVHWM, receive_hwm)
        self.socket.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        if keys:
            auth.secure_server(self.socket, keys)
        try:
            self.socket.bind(address)
        except zmq.ZMQError as exc:
            self.close()
            raise OSError(f"learner cannot bind {address}: {exc}") from None
        self.address = address

    def receive(self, timeout_ms: int) -> tuple[bytes, list[zmq.Frame]] | None:
        """(peer identity, frames) of the next message, or None after `timeout_ms`."""
        if not self.socket.poll(timeout_ms, zmq.POLLIN):
            return None
        frames = self.socket.recv_multipart(copy=False)
        return frames[0].bytes, frames[1:]

    def send(self, identity: bytes, frames: list[Any]) -> None:
        try:
            self.socket.send_multipart([identity, *frames], flags=zmq.NOBLOCK)
        except zmq.Again:
            pass  # the actor is gone or not reading; it asks again later

    def close(self) -> None:
        self.socket.close(linger=0)
        if self.authenticator is not None:
            self.authenticator.stop()
            self.authenticator = None
        self.context.destroy(linger=0)  # never waits: every socket of it is closed


class ActorSocket:
    """An actor's DEALER socket to its learner; ZeroMQ reconnects by itself with backoff."""

    def __init__(self, host: str, port: int, max_bytes: int, send_hwm: int,
                 keys: RunKeys | None = None) -> None:
        self.context = zmq.Context.instance()
        self.socket = self.context.socket(zmq.DEALER)
        if keys:
            auth.secure_client(self.socket, keys)
        self.socket.setsockopt(zmq.SNDHWM, send_hwm)
        self.socket.setsockopt(zmq.RCVHWM, 4)
        self.socket.setsockopt(zmq.MAXMSGSIZE, max_bytes)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RECONNECT_IVL, 200)
        self.socket.setsockopt(zmq.RECONNECT_IVL_MAX, 5000)
        self.socket.setsockopt(zmq.IMMEDIATE, 1)  # queue nothing for a learner that is away
        self.socket.connect(f"tcp://{resolve_ip(host)}:{port}")

    def send(self, frames: list[Any], timeout_ms: int) -> bool:
        """Send one message; False if the learner did not take it within `timeout_ms`."""
        if not self.socket.poll(timeout_ms, zmq.POLLOUT):
            return False
        try:
            # copy=True: the actor rewrites its buffers while ZeroMQ may still be sending.
            self.socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=True)
            return True
        except zmq.Again:
            return False

    def receive(self, timeout_ms: int) -> list[zmq.Frame] | None:
        if not self.socket.poll(timeout_ms, zmq.POLLIN):
            return None
        return self.socket.recv_multipart(copy=False)

    def close(self) -> None:
        self.socket.close(linger=0)
