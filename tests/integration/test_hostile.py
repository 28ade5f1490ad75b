"""Hostile input to a learner: messages that parse but carry values no actor sends.

Each class of hostile value is sent to a real receiver on a real ZeroMQ socket, followed by
a good unroll: the hostile one must be counted as a drop and never reach a batch, and the
receiver must go on. A fuzz run sends >= 10,000 malformed and hostile messages to a real
learner with a real actor and checks each one is counted while training goes on.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from impala.algorithms.impala import Impala
from impala.algorithms.impala.behaviour import ImpalaLearning
from impala.algorithms.impala.loss import ImpalaLossConfig
from impala.config import Config
from impala.distributed import SingleLearner
from impala.learner import Learner
from impala.nets import create_agent
from impala.optim import RMSpropTF
from impala.receiver import ReceiverStopped
from impala.step import learn_step
from impala.transport import LearnerSocket, encode
from impala.unroll.reader import UnrollReader
from tests.helpers import (
    CARTPOLE_RUN,
    dealer_to,
    free_port,
    last_value,
    start_endless_cartpole,
    stop,
    wait_for,
    wait_for_first_updates,
)
from tests.wire import FLAT_LAYOUT as LAYOUT
from tests.wire import FLAT_T as T
from tests.wire import GOOD_REWARD, good_arrays, serving, unroll


def with_value(name: str, index: tuple, value) -> list[bytes]:
    arrays = good_arrays()
    arrays[name][index] = value
    return unroll(arrays)


def raw_header(text: str, arrays: bool = True) -> list[bytes]:
    """An unroll whose header is `text`, with good arrays after it."""
    frames = unroll()
    return [text.encode(), *frames[1:]] if arrays else [text.encode()]


def header_with(meta_json: str) -> str:
    """A good unroll header whose meta is the literal JSON `meta_json`."""
    header = json.loads(unroll()[0])
    return json.dumps(header).replace(json.dumps(header["meta"]), meta_json)


def bool_byte_two() -> list[bytes]:
    frames = unroll()
    names = [f[0] for f in json.loads(frames[0])["fields"]]
    raw = bytearray(frames[1 + names.index("done")])
    raw[3] = 2
    frames[1 + names.index("done")] = bytes(raw)
    return frames


HOSTILE = {
    # JSON that makes a parser recurse or overflow.
    "json nested 200,000 deep": (raw_header("[" * 200_000 + "]" * 200_000), "too large"),
    "json nested 20,000 deep": (raw_header("[" * 20_000 + "]" * 20_000), "nested deeper"),
    "meta nested 8 deep": (raw_header(header_with('{"policy_version": 0, "x": '
                                                  + "[" * 8 + "]" * 8 + "}")), "nested deeper"),
    "integer of 5,000 digits": (raw_header(header_with('{"policy_version": ' + "9" * 5000 + "}")),
                                "not JSON"),
    # Values that parse but no actor sends.
    "episode return 2^64": (unroll(episode_returns=[2**64], episode_lengths=[5]),
                            "episode_returns"),
    "episode return NaN": (raw_header(header_with(
        '{"policy_version": 0, "episode_returns": [NaN], "episode_lengths": [5]}')),
        "episode_returns"),
    "episode return 1e400 (inf)": (raw_header(header_with(
        '{"policy_version": 0, "episode_returns": [1e400], "episode_lengths": [5]}')),
        "episode_returns"),
    "episode length of 400 digits": (unroll(episode_returns=[1.0], episode_lengths=[10**400]),
                                     "episode_lengths"),
    "policy version of 400 digits": (unroll(policy_version=10**400), "policy_version"),
    "policy version -1": (unroll(policy_version=-1), "policy_version"),
    "policy version 1.5": (unroll(policy_version=1.5), "policy_version"),
    "action 7 (CartPole has 2)": (with_value("action", (3,), 7), "'action'"),
    "action -1": (with_value("action", (0,), -1), "'action'"),
    "last action 1000": (with_value("last_action", (T,), 1000), "'last_action'"),
    "NaN reward": (with_value("reward", (2,), np.nan), "'reward'"),
    "infinite reward": (with_value("reward", (2,), np.inf), "'reward'"),
    "NaN observation": (with_value("observation", (5, 1), np.nan), "'observation'"),
    "infinite policy logits": (with_value("policy_logits", (1, 0), -np.inf), "'policy_logits'"),
    "NaN policy logits": (with_value("policy_logits", (9, 1), np.nan), "'policy_logits'"),
    "boolean byte 2": (bool_byte_two(), "'done'"),
    # Ape-X/R2D2 actors send their replay priority in the meta.
    "priority NaN": (raw_header(header_with('{"policy_version": 0, "priority": NaN}')),
                     "priority"),
    "priority -1": (unroll(priority=-1.0), "priority"),
    "priority 1e300": (unroll(priority=1e300), "priority"),
    "priority of 400 digits": (unroll(priority=10**400), "priority"),
    "priority true": (unroll(priority=True), "priority"),
    "priority a string": (unroll(priority="high"), "priority"),
    # An algorithm's episode tags: only the names it declares (IMPALA declares none).
    "a tag the algorithm does not declare": (unroll(tags={"epsilon": 0.5}), "tags"),
    "tags a list": (unroll(tags=[0.5]), "tags"),
    "tag NaN": (raw_header(header_with('{"policy_version": 0, "tags": {"x": NaN}}')), "tags"),
    "weights request version of 400 digits": (
        encode("weights_request", "actor-0", version=10**400), "meta.version"),
    "weights request version true": (
        encode("weights_request", "actor-0", version=True), "meta.version"),
}


@pytest.fixture
def receiver():
    with serving(LAYOUT, capacity=64) as served:
        yield served


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_value_is_dropped_counted_and_never_batched(receiver, case):
    receiver, batches, dealer = receiver
    frames, reason = HOSTILE[case]
    dealer.send_multipart(frames)
    dealer.send_multipart(unroll())
    batch = wait_for(lambda: batches.get(timeout=0.1), 10, "the good unroll after it")
    receiver.raise_if_stopped()
    counts = receiver.counts()
    assert counts.dropped == 1, counts.drop_reasons
    (logged,) = counts.drop_reasons
    assert reason in logged and len(logged) <= 210
    # The batch holds the good unroll, and the hostile one went nowhere.
    assert (batch.arrays["reward"] == GOOD_REWARD).all() and batches.depth() == 0
    assert (batch.arrays["action"] == 1).all()


def test_an_unexpected_error_on_one_message_is_a_drop_not_a_dead_thread(receiver,
                                                                         monkeypatch):
    receiver, batches, dealer = receiver

    def explode(*_args):
        raise TypeError("a bug the wire checks did not foresee")

    monkeypatch.setattr(UnrollReader, "read", explode)
    dealer.send_multipart(unroll())
    wait_for(lambda: receiver.counts().dropped == 1, 10, "the drop")
    receiver.raise_if_stopped()
    assert "unexpected TypeError: a bug" in next(iter(receiver.counts().drop_reasons))


def cartpole_config(tmp_path, **changes) -> Config:
    return Config(level_name="CartPole-v1", agent_name="MLPAgent", preset="classic",
                  logdir=str(tmp_path), learner_host=f"127.0.0.1:{free_port()}",
                  **changes)


def test_a_learner_whose_receiver_dies_exits_with_an_error_and_keeps_its_checkpoint(
        tmp_path, monkeypatch):
    """The socket fails under the receiver thread: the learner stops training with the
    reason, and an error exit writes no checkpoint over the last good one."""
    def broken_socket(self, timeout_ms):
        raise OSError("socket broke")

    monkeypatch.setattr(LearnerSocket, "receive", broken_socket)
    learner = Learner(cartpole_config(tmp_path), SingleLearner())
    with pytest.raises(ReceiverStopped, match="OSError: socket broke"):
        learner.run()
    assert not (learner.run_dir / "checkpoint.pt").exists()


def test_a_non_finite_loss_skips_the_update_and_leaves_the_parameters_alone():
    torch.manual_seed(0)
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    optimizer = RMSpropTF(model.parameters(), lr=0.01)
    batch = {name: torch.from_numpy(a[:, None].copy()) for name, a in good_arrays().items()}
    settings = ImpalaLossConfig(discounting=0.99, baseline_cost=0.5, entropy_cost=0.01,
                            reward_clipping="none")
    before = [p.detach().clone() for p in model.parameters()]
    batch["reward"][3] = 3e38  # finite on the wire; its square in the baseline loss is not
    stats = learn_step(model, optimizer, SingleLearner(), batch, (), ImpalaLearning(settings), 40.0)
    assert stats.skipped and not np.isfinite(stats.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    batch["reward"][3] = 1.0
    stats = learn_step(model, optimizer, SingleLearner(), batch, (), ImpalaLearning(settings), 40.0)
    assert not stats.skipped and np.isfinite(stats.grad_norm)
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


# ------------------------------------------------------------------------------ fuzzing
def fuzz_messages(count: int, seed: int = 0) -> list[list[bytes]]:
    """`count` messages, each malformed or hostile in a random way: none may be accepted."""
    rng = np.random.default_rng(seed)
    header = json.loads(unroll()[0])
    names = [f[0] for f in header["fields"]]
    float_fields = [n for n in names if n in ("observation", "reward", "policy_logits")]

    def garbage():
        return [rng.bytes(int(rng.integers(1, 300)))]

    def truncated():
        frames = unroll()
        del frames[int(rng.integers(1, len(frames)))]
        return frames

    def extra_frame():
        return [*unroll(), rng.bytes(int(rng.integers(0, 64)))]

    def wrong_dtype_or_shape():
        changed = json.loads(unroll()[0])
        entry = changed["fields"][int(rng.integers(len(names)))]
        if rng.random() < 0.5:
            entry[1] = str(rng.choice(["float64", "int8", "uint16", "complex64", "object"]))
        else:
            entry[2] = [int(d) + int(rng.integers(1, 5)) for d in entry[2]] or [2]
        return [json.dumps(changed).encode(), *unroll()[1:]]

    def action_out_of_range():
        name = str(rng.choice(["action", "last_action"]))
        value = int(rng.choice([-1, 2, 3, 1000, -(2**62), 2**62]))
        return with_value(name, (int(rng.integers(T + 1)),), value)

    def non_finite():
        name = str(rng.choice(float_fields))
        arrays = good_arrays()
        flat = arrays[name].reshape(-1)
        flat[int(rng.integers(flat.size))] = rng.choice([np.nan, np.inf, -np.inf])
        return unroll(arrays)

    def hostile_meta():
        choice = int(rng.integers(6))
        if choice == 0:
            return unroll(policy_version=int(rng.choice([-5, 2**60, 10**30])))
        if choice == 1:
            return unroll(episode_returns=[1.0] * 3, episode_lengths=[1] * 2)
        if choice == 2:
            return unroll(episode_returns=[1.0] * 30, episode_lengths=[1] * 30)
        if choice == 3:
            return unroll(episode_returns=[float(rng.choice([1e13, -1e300]))],
                          episode_lengths=[1])
        if choice == 4:
            return unroll(episode_returns=[1.0], episode_lengths=[-int(rng.integers(1, 9))])
        return raw_header(header_with('{"policy_version": 0, "x": ' + "[" * 40 + "]" * 40 + "}"))

    def wrong_kind():
        kind = str(rng.choice(["weights", "no_update", "unroll_continued", "hello", ""]))
        changed = json.loads(unroll()[0])
        changed["kind"] = kind
        return [json.dumps(changed).encode(), *unroll()[1:]]

    def bad_weights_request():
        versions = ["1", None, 1.5, -2, 10**20, [1]]
        version = versions[int(rng.integers(len(versions)))]
        return encode("weights_request", "x", version=version)

    makers = [garbage, truncated, extra_frame, wrong_dtype_or_shape, action_out_of_range,
              non_finite, hostile_meta, wrong_kind, bad_weights_request]
    return [makers[int(rng.integers(len(makers)))]() for _ in range(count)]


@pytest.mark.slow
def test_fuzzing_a_live_learner_with_10000_bad_messages(tmp_path):
    port = free_port()
    proc = start_endless_cartpole(tmp_path, port)
    run_dir = tmp_path / CARTPOLE_RUN
    logs = run_dir / "logs.csv"
    messages = fuzz_messages(10_000)
    try:
        wait_for_first_updates(run_dir)
        # A peer holding the run's key: what gets past authentication must still be checked.
        sock = dealer_to(port, run_dir, linger_ms=10_000)
        for message in messages:
            sock.send_multipart(message)
        sock.close()
        updates_then = last_value(logs, "updates")
        wait_for(lambda: last_value(logs, "dropped_messages") >= len(messages), 60,
                 "every message to be counted")
        wait_for(lambda: last_value(logs, "updates") > updates_then + 20, 60,
                 "training to go on")
        # Each one counted once, and none from the real actor.
        assert last_value(logs, "dropped_messages") == len(messages)
        assert last_value(logs, "skipped_updates") == 0
        assert proc.poll() is None
        # The drop log stays short: distinct reasons once, then every 100th.
        assert (run_dir / "learner-0.log").stat().st_size < 500_000
    finally:
        assert stop(proc) == 0
