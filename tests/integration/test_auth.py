"""CurveZMQ: only holders of the run's key file reach a learner (impala/auth.py).

The key file itself (created once, 0600, refused when too open or damaged), then a live
learner with a real actor: the actor trains, a peer without the key, or with a key pair of
its own, gets no answer and feeds nothing. Across hosts (network namespaces, real sshd) the
frontend's copy of the keys is checked in tests/test_frontend.py.
"""

from __future__ import annotations

import json
import multiprocessing
import stat

import psutil
import pytest
import zmq

from impala import auth
from impala.transport import ActorSocket, LearnerSocket
from tests.helpers import (
    CARTPOLE_RUN,
    dealer_to,
    free_port,
    last_value,
    start_endless_cartpole,
    stop,
    wait_for,
    wait_for_first_updates,
    weights_answered,
)
from tests.wire import unroll

RUN = CARTPOLE_RUN


def test_keys_are_created_once_private_and_kept(tmp_path):
    keys = auth.ensure_keys(tmp_path)
    path = auth.keys_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert auth.ensure_keys(tmp_path) == keys  # a second start keeps the run's keys
    assert len({keys.learner_public, keys.learner_secret, keys.actor_public,
                keys.actor_secret}) == 4


def _create(run_dir: str, out) -> None:
    out.put(auth.ensure_keys(run_dir).actor_secret)


def test_two_learners_starting_at_once_agree_on_one_key_file(tmp_path):
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [context.Process(target=_create, args=(str(tmp_path), out)) for _ in range(4)]
    for process in processes:
        process.start()
    secrets = {out.get(timeout=60) for _ in processes}
    for process in processes:
        process.join(timeout=60)
    assert secrets == {auth.load_keys(auth.keys_path(tmp_path)).actor_secret}


def test_a_key_file_readable_by_others_is_refused(tmp_path):
    auth.ensure_keys(tmp_path)
    path = auth.keys_path(tmp_path)
    path.chmod(0o644)
    with pytest.raises(auth.AuthError, match=r"readable by other users.*chmod 600"):
        auth.load_keys(path)


@pytest.mark.parametrize("content", ["", "{}", '{"learner_public": 5}', "not json",
                                     json.dumps({name: "x" * 40 for name in auth.FIELDS})])
def test_a_damaged_key_file_is_refused(tmp_path, content):
    path = auth.keys_path(tmp_path)
    path.parent.mkdir(mode=0o700)
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(auth.AuthError, match="is not a key file of this toolkit"):
        auth.load_keys(path)


def test_a_missing_key_file_says_how_to_get_one(tmp_path):
    with pytest.raises(auth.AuthError, match="--auth=none"):
        auth.load_keys(auth.keys_path(tmp_path))


@pytest.mark.slow
def test_only_the_runs_actors_get_in(tmp_path):
    port = free_port()
    proc = start_endless_cartpole(tmp_path, port)
    run_dir = tmp_path / RUN
    logs = run_dir / "logs.csv"
    try:
        wait_for_first_updates(run_dir)
        # A peer without the key, and one with a key pair of its own that knows the
        # learners' public key (which is not a secret): no answer, nothing fed.
        keyless = dealer_to(port, linger_ms=0)
        stranger = zmq.Context.instance().socket(zmq.DEALER)
        stranger.setsockopt(zmq.LINGER, 0)
        stranger.curve_publickey, stranger.curve_secretkey = zmq.curve_keypair()
        stranger.curve_serverkey = auth.load_keys(auth.keys_path(run_dir)).learner_public
        stranger.connect(f"tcp://127.0.0.1:{port}")
        for peer in (keyless, stranger):
            for _ in range(50):  # bad messages, which would be counted if they got in
                if peer.poll(10, zmq.POLLOUT):
                    try:
                        peer.send_multipart([b"garbage"], flags=zmq.NOBLOCK)
                    except zmq.Again:  # the failed handshake dropped the pipe after the poll
                        pass
            assert not weights_answered(peer, timeout_ms=3000)
            peer.close()
        # The run's key gets an answer: the weights.
        insider = dealer_to(port, run_dir, linger_ms=0)
        assert weights_answered(insider, timeout_ms=10_000)
        insider.close()
        updates_then = last_value(logs, "updates")
        wait_for(lambda: last_value(logs, "updates") > updates_then + 10, 60, "training")
        assert last_value(logs, "dropped_messages") == 0  # nothing from outside got in
        assert proc.poll() is None
    finally:
        assert stop(proc) == 0


@pytest.mark.slow
def test_auth_none_admits_any_peer(tmp_path):
    port = free_port()
    proc = start_endless_cartpole(tmp_path, port, "--auth=none")
    logs = tmp_path / RUN / "logs.csv"
    try:
        wait_for_first_updates(tmp_path / RUN)
        assert not auth.keys_path(tmp_path / RUN).exists()
        peer = dealer_to(port, linger_ms=1000)
        assert weights_answered(peer, timeout_ms=10_000)
        peer.send_multipart(unroll(policy_version=-1))
        peer.close()
        wait_for(lambda: last_value(logs, "dropped_messages") == 1, 30, "the drop")
    finally:
        assert stop(proc) == 0


def test_a_learner_socket_takes_every_actor_over_its_io_threads(tmp_path):
    """--learner_io_threads: the socket's own context runs that many ZeroMQ I/O threads,
    encrypted messages from several actors (each connection on one of them) all arrive,
    and closing the socket ends the context."""
    keys = auth.ensure_keys(tmp_path)
    port = free_port()
    learner = LearnerSocket("127.0.0.1", port, 1 << 20, 64, keys=keys, io_threads=3)
    actors = [ActorSocket("127.0.0.1", port, 1 << 20, 4, keys=keys) for _ in range(4)]
    try:
        assert learner.context.get(zmq.IO_THREADS) == 3
        for i, actor in enumerate(actors):
            assert actor.send([f"from {i}".encode()], timeout_ms=5000)
        received = [learner.receive(timeout_ms=5000) for _ in actors]
        assert {bytes(frames[0].buffer) for _, frames in received} == {
            f"from {i}".encode() for i in range(4)}
    finally:
        for actor in actors:
            actor.close()
        learner.close()
    assert learner.context.closed


@pytest.mark.parametrize("host,taken,error", [
    ("127.0.0.1", True, "learner cannot bind tcp://127.0.0.1:.*in use"),
    ("no-such-host.invalid", False, "cannot resolve host 'no-such-host.invalid'"),
])
def test_a_learner_socket_that_cannot_bind_says_why_and_leaves_no_threads(tmp_path, host,
                                                                          taken, error):
    port = free_port()
    holder = LearnerSocket("127.0.0.1", port, 1 << 20, 64) if taken else None
    threads = psutil.Process().num_threads()
    try:
        with pytest.raises((OSError, ValueError), match=error):
            LearnerSocket(host, port, 1 << 20, 64, keys=auth.ensure_keys(tmp_path),
                          io_threads=2)
        # The failed socket's I/O threads and authenticator ended with it.
        wait_for(lambda: psutil.Process().num_threads() <= threads, 10, "its threads to end")
    finally:
        if holder is not None:
            holder.close()
