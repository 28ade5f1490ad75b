"""Frame streams: an unroll that continues its stream carries only its T new frames.

Checked against real Breakout frames (ground truth), over a real ZeroMQ socket with the
learner's receiver, and with a real actor whose learner restarts under it.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import zmq

from impala.actor import REJECTED_ANSWERS_LIMIT, Actor, LearnerMismatch, WeightsClient
from impala.algorithms.impala import Impala
from impala.config import Config
from impala.envs import EnvConfig, create_env
from impala.nets import create_agent
from impala.receiver import UnrollReceiver
from impala.transport import ActorSocket, FieldSpec, decode, encode
from impala.unroll.batches import BatchQueue, UnrollLayout
from impala.unroll.framestack import FrameStreams, StreamGap, rebuild_stacks, split_stacks
from impala.weights import weights_arrays
from tests.helpers import free_port, wait_for
from tests.wire import serving, start_receiver, stop_receiver

T, S = 20, 4


def breakout_unrolls(count: int, seed: int = 0):
    """`count` consecutive unrolls of real Breakout play: ([T+1, S, 84, 84], starts [T+1])."""
    env = create_env(EnvConfig("BreakoutNoFrameskip-v4"), seed=seed)
    obs, _ = env.reset()
    start = True
    for _ in range(count):
        observations, starts = [obs], [start]
        for _ in range(T):
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            start = terminated or truncated
            if start:
                obs, _ = env.reset()
            observations.append(obs)
            starts.append(start)
        yield np.stack(observations), np.array(starts)


def test_continued_unrolls_rebuild_the_environments_stacks_exactly():
    streams = FrameStreams(T, S, (84, 84), "uint8")
    resets = 0
    for seq, (stacked, starts) in enumerate(breakout_unrolls(40)):
        wire = split_stacks(stacked)
        if seq == 0:
            pool = wire  # self-contained
        else:
            new_frames = wire[S:].copy()
            assert new_frames.shape == (T, 84, 84)  # one frame per agent step
            pool = streams.continued("env-0", seq, new_frames)
        rebuilt = np.zeros_like(stacked)
        rebuild_stacks(pool, starts, rebuilt)
        np.testing.assert_array_equal(rebuilt, stacked)
        streams.remember("env-0", seq, pool, starts)
        resets += int(starts[1:].sum())
    assert resets >= 1, "no unroll crossed an episode end"


def test_gaps_unknown_and_evicted_streams_are_refused():
    streams = FrameStreams(T, S, (2, 2), "uint8", max_streams=2)
    frames = np.zeros((T + S, 2, 2), np.uint8)
    starts = np.zeros(T + 1, bool)
    with pytest.raises(StreamGap, match="does not know"):
        streams.continued("a", 1, frames[S:])
    streams.remember("a", 0, frames, starts)
    with pytest.raises(StreamGap, match="unroll 2 does not follow unroll 0"):
        streams.continued("a", 2, frames[S:])
    streams.continued("a", 1, frames[S:])
    streams.remember("b", 0, frames, starts)
    streams.remember("c", 0, frames, starts)  # over max_streams: "a" is the oldest
    assert len(streams) == 2
    with pytest.raises(StreamGap):
        streams.continued("a", 1, frames[S:])
    streams.remember(("peer", 0), 0, frames, starts)
    streams.forget("peer")
    with pytest.raises(StreamGap):
        streams.continued(("peer", 0), 1, frames[S:])


LAYOUT = UnrollLayout(unroll_length=T, observation_shape=(S, 84, 84),
                      observation_dtype="uint8", num_actions=4, core_shapes=(),
                      recorded=Impala.recorded, frame_stack=S)


def unroll_message(kind: str, wire_frames: np.ndarray, starts: np.ndarray, seq: int):
    arrays = {name: np.zeros(spec.shape, spec.dtype)
              for name, spec in LAYOUT.schema(continued=kind == "unroll_continued").items()}
    arrays["frames"], arrays["episode_start"] = wire_frames, starts
    return encode(kind, "actor-7", arrays, policy_version=0, stream=0, seq=seq)


@pytest.fixture
def receiver():
    with serving(LAYOUT, capacity=8, version=3) as served:
        yield served


def ask_for_weights(dealer, have: int):
    dealer.send_multipart(encode("weights_request", "actor-7", version=have))
    assert dealer.poll(5000), "no answer to a weights request"
    return decode(dealer.recv_multipart(),
                  {"weights": {"w": FieldSpec("float32", (2,))}, "no_update": None}, 1 << 24)


def test_learner_asks_for_a_restart_then_takes_the_stream_back(receiver):
    receiver, batches, dealer = receiver
    (first, starts0), (second, starts1), (third, starts2) = breakout_unrolls(3, seed=1)
    # A continued unroll from a peer the learner has never heard of: dropped, restart asked.
    dealer.send_multipart(unroll_message("unroll_continued", split_stacks(second)[S:],
                                         starts1, seq=1))
    answer = ask_for_weights(dealer, have=3)
    assert answer.kind == "no_update" and answer.meta["restart_streams"] is True
    assert receiver.counts().stream_restarts == 1 and receiver.counts().unrolls == 0
    assert "restart_streams" not in ask_for_weights(dealer, have=3).meta  # asked once only
    # The stream starts again: self-contained, then continued with T frames only.
    dealer.send_multipart(unroll_message("unroll", split_stacks(first), starts0, seq=0))
    dealer.send_multipart(unroll_message("unroll_continued", split_stacks(second)[S:],
                                         starts1, seq=1))
    for expected in (first, second):
        batch = batches.get(timeout=5)
        assert batch is not None, "an unroll was not taken"
        np.testing.assert_array_equal(batch.arrays["observation"][:, 0], expected)
        batches.release(batch)
    # A lost unroll (seq 2 never arrives): the next one is refused and a restart asked,
    # this time in a `weights` answer, which carries the weights as well.
    dealer.send_multipart(unroll_message("unroll_continued", split_stacks(third)[S:],
                                         starts2, seq=3))
    answer = ask_for_weights(dealer, have=0)
    assert answer.kind == "weights"
    assert answer.meta == {"version": 3, "run_frames": 0, "restart_streams": True}
    assert receiver.counts().stream_restarts == 2 and receiver.counts().unrolls == 2
    assert receiver.counts().dropped == 0  # a gap is not a malformed message


def test_actor_restarts_its_streams_when_its_learner_restarts():
    """A real Pong actor; its learner (socket + receiver) is replaced under it."""
    port = free_port()
    cfg = Config(level_name="PongNoFrameskip-v4", num_envs=2, unroll_length=T,
                 learner_host=f"127.0.0.1:{port}")
    stop = threading.Event()
    actor = Actor(cfg, stop)
    layout = actor.layout

    def start_learner() -> tuple[UnrollReceiver, BatchQueue]:
        batches = BatchQueue(layout, batch_size=2, capacity=4)
        return start_receiver(port, layout, batches, weights_arrays(actor.model)), batches

    def drain(batches: BatchQueue, receiver: UnrollReceiver, unrolls: int) -> None:
        def enough():
            batch = batches.get(timeout=0.1)
            if batch is not None:
                batches.release(batch)
            return receiver.counts().unrolls >= unrolls
        wait_for(enough, 60, f"{unrolls} unrolls", interval=0)

    thread = threading.Thread(target=actor.run, daemon=True)
    receiver, batches = start_learner()
    thread.start()
    try:
        drain(batches, receiver, 40)
        assert receiver.counts().stream_restarts == 0  # one self-contained set, then continued ones
        # Each new 84x84 frame crosses the network once: all bytes of every message
        # (headers, rewards, actions, logits, the first self-contained set) included.
        bytes_per_step = receiver.counts().unroll_bytes / (receiver.counts().unrolls * T)
        assert bytes_per_step < 1.1 * 84 * 84, bytes_per_step / (84 * 84)
        stop_receiver(receiver)
        receiver, batches = start_learner()  # knows none of the actor's streams
        drain(batches, receiver, 10)
        # Its first continued unrolls were refused; it restarted its streams and goes on.
        assert receiver.counts().stream_restarts >= 1
        assert receiver.counts().dropped == 0
    finally:
        stop.set()
        thread.join(timeout=15)
        stop_receiver(receiver)
        actor.close()


def test_a_weights_request_waits_for_room_in_a_full_send_queue():
    """An actor asks for weights right after sending a set of unrolls, when its send queue
    is often full. The request was once dropped there: the actor then sent unrolls without
    waiting and kept acting with version 82 while its learner reached 155."""
    port = free_port()
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVHWM, 1)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(f"tcp://127.0.0.1:{port}")
    sock = ActorSocket("127.0.0.1", port, 1 << 24, send_hwm=2)
    agent = create_agent("MLPAgent", (4,), 2, Impala.heads)
    client = WeightsClient(sock, agent, 1 << 24, "actor-0")
    megabyte = encode("unroll", "actor-0", {"x": np.zeros(1 << 20, np.uint8)})
    while sock.send(megabyte, 500):  # the learner reads nothing: fill every buffer
        pass
    assert not client.request(timeout_ms=0)  # no room now
    kinds: list[str] = []

    def learner_reads_again() -> None:
        time.sleep(1.0)
        while router.poll(2000):
            kinds.append(json.loads(router.recv_multipart()[1])["kind"])

    reader = threading.Thread(target=learner_reads_again)
    reader.start()
    try:
        assert client.request_after_unrolls(threading.Event())
        reader.join(timeout=60)
        assert kinds[-1] == "weights_request" and kinds.count("weights_request") == 1
    finally:
        sock.close()
        router.close()


def test_an_actor_whose_model_does_not_fit_the_learners_weights_stops_and_says_why():
    """A learner whose model differs (another agent, or PopArt's statistics the actor's
    head lacks) answers with weights the actor's checks refuse. One refused answer is
    ignored, as a damaged message would be; REJECTED_ANSWERS_LIMIT in a row stop the actor
    with the field that does not fit, instead of asking for ever while the learner waits."""
    port = free_port()
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(f"tcp://127.0.0.1:{port}")
    sock = ActorSocket("127.0.0.1", port, 1 << 24, send_hwm=2)
    actor_model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    learner_model = create_agent("MLPAgent", (4,), 3, Impala.heads)  # one more action
    client = WeightsClient(sock, actor_model, 1 << 24, "actor-0")
    stop = threading.Event()
    try:
        for answer in range(REJECTED_ANSWERS_LIMIT):
            assert client.request(timeout_ms=2000)
            identity, _ = router.recv_multipart()
            router.send_multipart([identity, *encode("weights", "learner",
                                                     weights_arrays(learner_model), version=1)])
            if answer < REJECTED_ANSWERS_LIMIT - 1:
                assert client.await_answer(stop, "learner") and client.version == -1
        refused = r"heads\.policy_logits\.weight.*same model flags"
        with pytest.raises(LearnerMismatch, match=refused):
            client.await_answer(stop, "learner")
    finally:
        sock.close()
        router.close()
