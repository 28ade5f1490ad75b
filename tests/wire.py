"""Shared test helpers for the wire: a small flat-observation unroll and its messages, and a
learner's receiving side started and stopped on a free port."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from impala.algorithms.impala import Impala
from impala.receiver import UnrollReceiver
from impala.transport import LearnerSocket, encode
from impala.unroll.batches import BatchQueue, UnrollLayout
from tests.helpers import dealer_to, free_port, wait_for

# A flat-observation unroll (CartPole-like: 4 floats, 2 actions, no core state).
FLAT_T = 20
FLAT_LAYOUT = UnrollLayout(unroll_length=FLAT_T, observation_shape=(4,),
                           observation_dtype="float32", num_actions=2, core_shapes=(),
                           recorded=Impala.recorded)
GOOD_REWARD = 0.5  # marks a good unroll (sent after each hostile one in the hostile tests)


def good_arrays() -> dict[str, np.ndarray]:
    """A valid FLAT_LAYOUT unroll's arrays."""
    arrays = {name: np.zeros(spec.shape, spec.dtype)
              for name, spec in FLAT_LAYOUT.schema().items()}
    arrays["reward"][:] = GOOD_REWARD
    arrays["action"][:] = 1
    return arrays


def unroll(arrays: dict[str, np.ndarray] | None = None, **meta) -> list[bytes]:
    """An encoded FLAT_LAYOUT unroll from actor-0 (good arrays unless given)."""
    meta = {"policy_version": 0, **meta}
    return encode("unroll", "actor-0", good_arrays() if arrays is None else arrays, **meta)


def bind_or_none(port: int) -> LearnerSocket | None:
    try:
        return LearnerSocket("127.0.0.1", port, 1 << 24, 64)
    except OSError:
        return None


def start_receiver(port: int, layout: UnrollLayout, batches: BatchQueue,
                   weights: dict[str, np.ndarray], version: int = 0) -> UnrollReceiver:
    """A learner's receiving side, publishing `weights` as `version`."""
    # ZeroMQ releases a closed socket's port in the background: retry the bind a while.
    sock = wait_for(lambda: bind_or_none(port), 10, f"port {port} to be free")
    receiver = UnrollReceiver(sock, layout, batches, 1 << 24, name="learner-0")
    receiver.publish(version, weights)
    receiver.start()
    return receiver


def stop_receiver(receiver: UnrollReceiver) -> None:
    receiver.stop()


@contextmanager
def serving(layout: UnrollLayout, capacity: int, version: int = 0):
    """A receiver taking batches of one unroll, and a keyless DEALER connected to it."""
    port = free_port()
    batches = BatchQueue(layout, batch_size=1, capacity=capacity)
    receiver = start_receiver(port, layout, batches, {"w": np.zeros(2, np.float32)},
                              version=version)
    dealer = dealer_to(port, linger_ms=0)
    try:
        yield receiver, batches, dealer
    finally:
        dealer.close()
        stop_receiver(receiver)
