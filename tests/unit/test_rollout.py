"""Batch assembly: time-major, preallocated, handed to torch without a copy."""

import threading

import numpy as np

from impala.algorithms.impala import Impala
from impala.environment_loop import EnvStep
from impala.transport import Message, WireError, decode
from impala.unroll.batches import BatchQueue
from impala.unroll.layout import UnrollLayout
from impala.unroll.reader import EpisodeStats, Unroll, UnrollReader, parse_unroll_meta
from impala.unroll.writer import UnrollWriter

LAYOUT = UnrollLayout(unroll_length=3, observation_shape=(2,), observation_dtype="float32",
                      num_actions=2, core_shapes=((1, 5),), recorded=Impala.recorded)


def message(value):
    arrays = {name: np.full(spec.shape, value, dtype=spec.dtype)
              for name, spec in LAYOUT.schema().items()}
    return Message("unroll", "a", {"policy_version": 1}, arrays)


def unroll(value):
    """An unroll as the reader hands it over (values unchecked: these tests fill every
    field with one value)."""
    return Unroll(message(value).arrays, "a", 1, EpisodeStats.empty())


def test_batches_are_time_major_and_zero_copy():
    queue = BatchQueue(LAYOUT, batch_size=2, capacity=1)
    stop = threading.Event()
    for value in (1, 2):
        assert queue.add(unroll(value), stop)
    batch = queue.get(timeout=1)
    assert batch.tensors["observation"].shape == (4, 2, 2)  # [T+1, B, obs]
    assert batch.tensors["core_0"].shape == (1, 2, 5)  # [L, B, H]
    assert batch.tensors["observation"][:, 1].eq(2).all()
    # The tensor is a view of the preallocated array: no copy on the way to torch.
    assert batch.tensors["observation"].data_ptr() == batch.arrays["observation"].ctypes.data


def test_full_queue_pushes_back_until_released():
    queue = BatchQueue(LAYOUT, batch_size=1, capacity=1)
    stop = threading.Event()
    for _ in range(3):  # capacity 1 + one training + one filling
        assert queue.add(unroll(0), stop)
    stop.set()  # nothing free now: add waits, then gives up because of stop
    assert not queue.add(unroll(0), stop)


def test_bad_episode_meta_is_rejected():
    bad = message(0)
    bad.meta = {"policy_version": 1, "episode_returns": [1.0, "x"],
                "episode_lengths": [3, 4]}
    try:
        parse_unroll_meta(bad, 4)
    except WireError as exc:
        assert "episode_returns" in str(exc)
    else:
        raise AssertionError("bad meta accepted")


def test_atari_unrolls_travel_as_single_frames_and_are_rebuilt_in_the_batch():
    layout = UnrollLayout(unroll_length=20, observation_shape=(4, 84, 84),
                          observation_dtype="uint8", num_actions=6, core_shapes=(),
                          recorded=Impala.recorded, frame_stack=4)
    schema = layout.schema()
    assert "observation" not in schema and schema["frames"].shape == (24, 84, 84)
    per_step = sum(spec.nbytes for spec in schema.values()) / layout.unroll_length
    assert per_step < 1.25 * 84 * 84  # (T + 3 + 1) / T frames plus a few scalars
    continued = layout.schema(continued=True)  # step 0's stack is on the learner already
    assert continued["frames"].shape == (20, 84, 84)
    assert sum(spec.nbytes for spec in continued.values()) / layout.unroll_length < 1.01 * 84 * 84
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (24, 84, 84), dtype=np.uint8)
    starts = np.zeros(21, bool)
    starts[7] = True
    arrays = {name: np.zeros(spec.shape, spec.dtype) for name, spec in schema.items()}
    arrays["frames"], arrays["episode_start"] = frames, starts
    queue = BatchQueue(layout, batch_size=1, capacity=1)
    read = UnrollReader(layout).read("peer", Message("unroll", "a", {"policy_version": 0,
                                                                     "stream": 0, "seq": 0},
                                                       arrays))
    queue.add(read, threading.Event())
    observation = queue.get(timeout=1).arrays["observation"][:, 0]
    assert observation.shape == (21, 4, 84, 84)
    np.testing.assert_array_equal(observation[3], frames[3:7])  # a plain sliding window
    np.testing.assert_array_equal(observation[7], np.stack([frames[10]] * 4))  # reset frame
    np.testing.assert_array_equal(observation[8], np.stack([frames[10]] * 3 + [frames[11]]))


def test_one_layout_derivation_for_actor_and_learner():
    """Actors derive the layout from an env they made, learners from describe_env: the
    same factory gives the same schema (a mismatch would drop every unroll)."""
    from impala.envs import EnvConfig, create_env, describe_env, env_info
    from impala.nets import create_agent

    settings = EnvConfig("PongNoFrameskip-v4", 4, 84, 84)
    learner_side = describe_env(settings)
    env = create_env(settings, seed=3)
    actor_side = env_info(env, settings)
    env.close()
    agent = create_agent("ResNetLSTMAgent", learner_side.observation_shape,
                         learner_side.num_actions, Impala.heads)
    layouts = [UnrollLayout.for_agent(20, info, agent, Impala.recorded)
               for info in (learner_side, actor_side)]
    assert layouts[0] == layouts[1]
    schema = layouts[0].schema()
    assert schema["frames"].shape == (24, 84, 84) and schema["frames"].dtype == "uint8"
    assert schema["policy_logits"].shape == (21, 6)
    assert sum(name.startswith("core_") for name in schema) == 2  # the LSTM's h and c


def test_an_algorithms_episode_tags_ride_with_its_episodes_from_writer_to_reader():
    """Shared code carries an algorithm's per-environment tags (Ape-X's epsilon) by name:
    the writer puts each environment's values in its unroll, the reader hands them on with
    every episode that unroll finished."""
    layout = UnrollLayout(unroll_length=3, observation_shape=(2,), observation_dtype="float32",
                          num_actions=2, core_shapes=(), recorded=Impala.recorded,
                          episode_tags=("rate",))
    writer = UnrollWriter(layout, num_envs=2)
    step = EnvStep(np.zeros((2, 2), np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                   np.zeros(2, np.int64), np.zeros(2, bool))
    for t in range(4):
        writer.record(t, step, np.zeros(2, np.int64), np.zeros((2, 2), np.float32))
    finished = [[(1.0, 10), (2.0, 20)], []]
    messages = list(writer.messages("a", 0, finished, tags={"rate": np.array([0.25, 0.5])}))
    reader = UnrollReader(layout)
    first, second = (reader.read("peer", decode(frames, reader.schemas, 1 << 20))
                     for frames in messages)
    assert first.episodes.returns == [1.0, 2.0]
    assert first.episodes.tags == [{"rate": 0.25}, {"rate": 0.25}]
    assert second.episodes.tags == []  # no episode ended there
