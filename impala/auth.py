"""The run's CurveZMQ keys: only processes that hold them can talk to its learners.

One file, `<run_dir>/keys/run.keys` (mode 0600, its folder 0700), holds two key pairs: the
learners' (CURVE server) and the actors' (CURVE client). A learner encrypts its socket with
its pair and admits only the actors' public key (a ZAP handler in the learner process);
an actor needs the learners' public key to even start the handshake. A peer without the
file gets no answer and feeds nothing: ZeroMQ drops it during the handshake, before any
message reaches the learner's code.

The frontend writes the file once and copies it to every host over SSH; `--job_name=local`
and a learner started by hand create it on first use (atomically: two ranks starting on
one host agree on one file). `--auth=none` turns all of this off for a trusted network.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth.thread

KEYS_FILE = "keys/run.keys"
FIELDS = ("learner_public", "learner_secret", "actor_public", "actor_secret")


class AuthError(RuntimeError):
    """The run's key file is missing, unreadable, too open or damaged."""


@dataclass(frozen=True)
class RunKeys:
    """Z85-encoded CURVE keys (40 ASCII bytes each)."""

    learner_public: bytes
    learner_secret: bytes
    actor_public: bytes
    actor_secret: bytes

    def to_json(self) -> str:
        return json.dumps({name: getattr(self, name).decode() for name in FIELDS})


def keys_path(run_dir: Path) -> Path:
    return Path(run_dir) / KEYS_FILE


def new_keys() -> RunKeys:
    learner_public, learner_secret = zmq.curve_keypair()
    actor_public, actor_secret = zmq.curve_keypair()
    return RunKeys(learner_public, learner_secret, actor_public, actor_secret)


def ensure_keys(run_dir: Path) -> RunKeys:
    """The run's keys, created first if there are none (never replacing existing ones)."""
    path = keys_path(run_dir)
    if not path.exists():
        write_keys(path, new_keys())
    return load_keys(path)


def write_keys(path: Path, keys: RunKeys) -> None:
    """Write `path` with mode 0600 unless it exists (then leave it: first writer wins)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".run.keys.")  # created 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(keys.to_json() + "\n")
        os.link(tmp, path)  # fails if another process wrote the file first
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def load_keys(path: Path) -> RunKeys:
    """Read and check a key file; AuthError saying what is wrong and how to fix it."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except FileNotFoundError:
        raise AuthError(f"no key file at {path}: start the run with run_experiment_mm_raw.py "
                        "(it copies the keys to every host), copy the file from the "
                        "learner's host, or pass --auth=none on a trusted network") from None
    except OSError as exc:
        raise AuthError(f"cannot read the key file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AuthError(f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}); "
                        f"run chmod 600 {path}")
    try:
        data = json.loads(text)
        keys = RunKeys(*(data[name].encode("ascii") for name in FIELDS))
        if any(len(getattr(keys, name)) != 40 for name in FIELDS) \
                or zmq.curve_public(keys.learner_secret) != keys.learner_public \
                or zmq.curve_public(keys.actor_secret) != keys.actor_public:
            raise ValueError("not two matching key pairs")
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError, zmq.ZMQError):
        raise AuthError(f"{path} is not a key file of this toolkit (expected JSON with two "
                        f"matching Z85 key pairs: {', '.join(FIELDS)})") from None
    return keys


def wait_for_keys(run_dir: Path, stop, log, report_every_s: float = 30.0) -> RunKeys | None:
    """An actor's keys, waiting while the file is missing (its learner may create it);
    None if `stop` is set first. A damaged or too open file raises AuthError at once."""
    path = keys_path(run_dir)
    last_report = time.time()
    while not stop.is_set():
        if path.exists():
            return load_keys(path)
        if time.time() - last_report >= report_every_s:
            log.warning("waiting for the run's key file %s (copy it from the learner's host, "
                        "or pass --auth=none on a trusted network)", path)
            last_report = time.time()
        stop.wait(0.5)
    return None


def secure_server(socket: zmq.Socket, keys: RunKeys) -> None:
    """Make a learner's socket a CURVE server (before bind)."""
    socket.curve_secretkey = keys.learner_secret
    socket.curve_publickey = keys.learner_public
    socket.curve_server = True


def secure_client(socket: zmq.Socket, keys: RunKeys) -> None:
    """Make an actor's socket a CURVE client of the run's learners (before connect)."""
    socket.curve_secretkey = keys.actor_secret
    socket.curve_publickey = keys.actor_public
    socket.curve_serverkey = keys.learner_public


class _OnlyTheRunsActors:
    def __init__(self, actor_public: bytes) -> None:
        self.actor_public = actor_public

    def callback(self, domain: str, client_key: bytes) -> bool:
        return client_key == self.actor_public


def start_authenticator(context: zmq.Context, keys: RunKeys) -> zmq.auth.thread.ThreadAuthenticator:
    """The ZAP handler of a learner process: admits the run's actor key, no other.

    Without it a CURVE server admits any client that knows the learners' public key.
    """
    authenticator = zmq.auth.thread.ThreadAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve_callback("*", _OnlyTheRunsActors(keys.actor_public))
    return authenticator
