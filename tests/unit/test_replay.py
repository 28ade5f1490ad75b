"""Replay: the sum tree against brute force, sampling frequencies, importance weights,
priorities, eviction; LASER's batch mixing; bad replay flags refused before anything
starts. LASER's trust region and weighted loss are `test_losses.py`."""

from __future__ import annotations

import math

import numpy as np
import pytest

from impala.algorithms.impala import Impala
from impala.flags import parse_config
from impala.presets import NO_PRESET, config_from_flags, preset_defaults
from impala.schedules import ReplaySchedule
from impala.unroll.batches import Batch
from impala.unroll.layout import UnrollLayout
from impala.unroll.reader import EpisodeStats, Unroll
from impala.unroll.replay import UnrollReplay, replayed_count
from impala.unroll.replay_memory import ReplayMemory, SumTree
from tests.helpers import run
from tests.replay_items import FIELDS, items

# The 0.999 quantile of the chi-square distribution with 9 degrees of freedom.
CHI2_9_DOF_999 = 27.877


# ------------------------------------------------------------------------------ sum tree
@pytest.mark.parametrize("capacity", [1, 5, 8, 37])
def test_sum_tree_agrees_with_brute_force(capacity):
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity)
    values = np.zeros(capacity)
    written = np.zeros(capacity, bool)  # the minimum is over slots ever set
    for _ in range(20):
        slots = rng.integers(0, capacity, size=rng.integers(1, 2 * capacity + 1))
        new = rng.uniform(0.0, 3.0, size=len(slots))
        tree.set(slots, new)
        for slot, value in zip(slots, new, strict=True):  # a repeated slot keeps its last
            values[slot] = value
        written[slots] = True
        assert tree.total == pytest.approx(values.sum(), rel=1e-12)
        assert tree.min == values[written].min()
        u = rng.uniform(0.0, values.sum(), size=50)
        expected = np.searchsorted(np.cumsum(values), u, side="right")
        np.testing.assert_array_equal(tree.find(u), expected)


def test_sum_tree_never_returns_an_empty_leaf():
    tree = SumTree(8)
    tree.set(np.array([1, 2, 5]), np.array([1.0, 0.5, 2.0]))
    found = tree.find(np.array([0.0, 0.999999, 1.0, 1.5, 3.5 - 1e-12, 3.5]))  # 3.5 = total
    assert set(found.tolist()) <= {1, 2, 5}
    assert found[-1] == 5  # u == total rounds onto the last non-empty leaf
    with pytest.raises(ValueError, match="finite and >= 0"):
        tree.set(np.array([0]), np.array([-1.0]))
    with pytest.raises(IndexError):
        tree.set(np.array([8]), np.array([1.0]))


# ------------------------------------------------------------------------- replay memory
def test_sampling_frequencies_follow_the_priorities_chi_square():
    memory = ReplayMemory(FIELDS, capacity=10, priority_exponent=0.6, seed=3)
    slots = memory.add(items(np.arange(10)))
    priorities = np.array([0.1, 0.5, 1.0, 2.0, 3.0, 0.2, 4.0, 0.05, 1.5, 0.7])
    memory.update_priorities(slots, priorities)
    expected_p = priorities**0.6 / (priorities**0.6).sum()
    draws = 20_000
    counts = np.zeros(10)
    for _ in range(draws // 4):
        np.add.at(counts, memory.sample(4).indices, 1)
    expected = draws * expected_p
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < CHI2_9_DOF_999, (counts, expected)
    # A uniform memory (alpha 0) ignores priorities.
    uniform = ReplayMemory(FIELDS, capacity=10, priority_exponent=0.0, seed=4)
    uniform.update_priorities(uniform.add(items(np.arange(10))), priorities)
    counts = np.zeros(10)
    for _ in range(draws // 4):
        np.add.at(counts, uniform.sample(4).indices, 1)
    assert ((counts - draws / 10) ** 2 / (draws / 10)).sum() < CHI2_9_DOF_999


def test_importance_weights_are_exact_and_normalised_by_the_memory_wide_maximum():
    alpha, beta = 0.5, 0.4
    memory = ReplayMemory(FIELDS, capacity=4, priority_exponent=alpha,
                          importance_sampling_exponent=beta, seed=0)
    slots = memory.add(items(np.arange(4)))
    priorities = np.array([1.0, 4.0, 9.0, 16.0])
    memory.update_priorities(slots, priorities)
    sample = memory.sample(4)
    p = priorities**alpha / (priorities**alpha).sum()
    w = (4 * p) ** -beta
    expected = w[sample.indices] / w.max()  # the largest weight: the smallest priority
    np.testing.assert_allclose(sample.weights, expected, rtol=1e-6)
    assert sample.weights.max() <= 1.0


def test_new_items_enter_with_the_largest_priority_and_priorities_update():
    memory = ReplayMemory(FIELDS, capacity=8, priority_exponent=1.0, seed=0)
    first = memory.add(items([0, 1]))
    assert memory.tree.values(first).tolist() == [1.0, 1.0]  # nothing seen yet: 1
    memory.update_priorities(first, np.array([5.0, 0.0]))
    assert memory.tree.values(first).tolist() == [5.0, 1e-6]  # 0 is floored, never lost
    second = memory.add(items([2]))
    assert memory.tree.values(second).tolist() == [5.0]  # the largest so far
    with pytest.raises(ValueError, match="finite"):
        memory.update_priorities(first, np.array([np.nan, 1.0]))


def test_items_may_enter_with_the_priorities_their_actors_computed():
    memory = ReplayMemory(FIELDS, capacity=8, priority_exponent=0.5, seed=0)
    slots = memory.add(items([0, 1, 2]), priorities=np.array([4.0, 9.0, 0.0]))
    np.testing.assert_allclose(memory.tree.values(slots), [2.0, 3.0, 1e-3])
    assert memory.max_priority == 9.0  # items added later without one enter at it
    np.testing.assert_allclose(memory.tree.values(memory.add(items([3]))), [3.0])


def test_the_oldest_items_leave_first_and_ages_count_adds():
    memory = ReplayMemory(FIELDS, capacity=5, seed=0)
    for start in (0, 3, 6):  # 3 items per add: 9 in, the oldest 4 out
        memory.add(items(np.arange(start, start + 3)))
    assert len(memory) == 5
    held = sorted(memory.get(np.arange(5))["y"].astype(int).tolist())
    assert held == [4, 5, 6, 7, 8]
    sample = memory.sample(5)
    values = memory.get(sample.indices)["y"].astype(int)
    np.testing.assert_array_equal(sample.ages, np.where(values >= 6, 1, 2))
    np.testing.assert_array_equal(memory.get(sample.indices)["x"][:, 1], -values)
    with pytest.raises(ValueError, match="cannot sample 6"):
        memory.sample(6)


def test_replay_refuses_bad_exponents_and_sizes():
    with pytest.raises(ValueError, match="priority_exponent must be in"):
        ReplayMemory(FIELDS, 4, priority_exponent=1.5)
    with pytest.raises(ValueError, match="importance_sampling_exponent must be in"):
        ReplayMemory(FIELDS, 4, importance_sampling_exponent=-0.1)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        ReplayMemory(FIELDS, 0)


# ---------------------------------------------------------------------- LASER mixing
def test_fractional_replay_ratios_alternate_and_average_out():
    for ratio, batch in ((0.5, 3), (1.0, 8), (0.3, 8), (2.75, 4)):
        counts = [replayed_count(u, ratio, batch) for u in range(1000)]
        assert set(counts) <= {math.floor(ratio * batch), math.ceil(ratio * batch)}
        assert sum(counts) == math.floor(1000 * ratio * batch)


def test_an_initial_replay_ratio_holds_until_its_frames_then_the_ratio_takes_over():
    schedule = parse_config(["--level_name=CartPole-v1", "--batch_size=4", "--replay_ratio=3",
                             "--initial_replay_ratio=5", "--initial_replay_frames=1000"]
                            ).replay_schedule
    assert [schedule.at(f) for f in (0, 999, 1000, 10**9)] == [5.0, 5.0, 3.0, 3.0]
    assert schedule.largest == 5.0
    # Unset (no frames), the initial ratio is ignored, also for the batch's size.
    unset = parse_config(["--level_name=CartPole-v1", "--replay_ratio=1",
                          "--initial_replay_ratio=5"])
    assert unset.replay_schedule.at(0) == 1.0 and unset.max_replayed_per_update == 16
    # Replay only after a warm-up: off (0) for the first frames, on after.
    warm = ReplaySchedule(0.0, 500, 2.0)
    assert (warm.at(499), warm.at(500), warm.largest) == (0.0, 2.0, 2.0)
    # The batch has room for the larger ratio, and the update takes the ratio of its frames.
    replay = UnrollReplay(ATARI_LAYOUT, batch_size=2, ratios=ReplaySchedule(2.0, 100, 0.5),
                          size=10, priority_exponent=0.0, importance_sampling_exponent=0.4,
                          seed=0)
    assert replay.max_replayed == 4
    batches = []
    for values in ((1, 2), (3, 4)):
        batches.append(Batch(ATARI_LAYOUT, 2, extra_columns=replay.max_replayed,
                             keep_stored=True))
        for v in values:
            batches[-1].add(Unroll(stored_unroll(ATARI_LAYOUT, v), "a", 0, EpisodeStats.empty()))
        replay.keep(batches[-1])
    assert replay.mix_into(batches[0], update=0, frames=99).count == 4
    assert replay.mix_into(batches[1], update=1, frames=100).count == 1  # floor(2) - floor(1)


ATARI_LAYOUT = UnrollLayout(unroll_length=5, observation_shape=(4, 3, 3),
                            observation_dtype="uint8", num_actions=3, core_shapes=(),
                            recorded=Impala.recorded, frame_stack=4)


def stored_unroll(layout: UnrollLayout, value: int) -> dict[str, np.ndarray]:
    arrays = {name: np.zeros(spec.shape, spec.dtype) for name, spec in layout.schema().items()}
    arrays["frames"][:] = value
    arrays["frames"][-1] = value + 100  # the last step's newest frame
    arrays["reward"][:] = value
    arrays["action"][:] = value % layout.num_actions
    return arrays


def test_replayed_unrolls_are_stored_once_per_frame_and_rebuilt_after_the_fresh_ones():
    replay = UnrollReplay(ATARI_LAYOUT, batch_size=2, ratios=ReplaySchedule.constant(1.5), size=10,
                          priority_exponent=0.0, importance_sampling_exponent=0.4, seed=0)
    assert replay.memory.storage["frames"].shape == (10, 5 + 4, 3, 3)  # T+S frames, not stacks
    assert "observation" not in replay.memory.storage

    def fresh_batch(values):
        batch = Batch(ATARI_LAYOUT, 2, extra_columns=replay.max_replayed, keep_stored=True)
        for v in values:
            batch.add(Unroll(stored_unroll(ATARI_LAYOUT, v), "a", 0, EpisodeStats.empty()))
        return batch

    first = fresh_batch([1, 2])
    part = replay.mix_into(first, update=0, frames=0)
    assert part.count == 0 and part.columns == 2  # nothing to replay yet; now kept
    second = fresh_batch([3, 4])
    # floor(2 x 1.5 x 2) - floor(1.5 x 2) = 3 -> 2 held
    part = replay.mix_into(second, update=1, frames=0)
    assert part.count == 2 and part.columns == 4
    replayed_rewards = sorted(second.arrays["reward"][0, 2:4].tolist())
    assert replayed_rewards == [1.0, 2.0]
    for column in (2, 3):
        value = int(second.arrays["reward"][0, column])
        stacks = second.arrays["observation"][:, column]  # [T+1, S, H, W], rebuilt
        assert (stacks[0] == value).all() and (stacks[-1, -1] == value + 100).all()
    inputs = part.loss_inputs
    assert inputs["replayed"].tolist() == [False, False, True, True]
    assert inputs["importance_weight"].tolist() == [1.0, 1.0, 1.0, 1.0]  # uniform: all 1
    replay.reprioritize(part, np.array([9.0, 9.0, 0.5, 2.0]))  # fresh errors ignored
    assert sorted(replay.memory.tree.values(part.sample.indices).tolist()) == [1.0, 1.0]  # a^0


@pytest.mark.parametrize("flags, message", [
    (["--replay_ratio=-1"], "--replay_ratio must be >= 0"),
    (["--replay_ratio=nan"], "--replay_ratio must be >= 0"),
    (["--replay_ratio=1", "--batch_size=8", "--replay_size=7"],
     "--replay_size must hold at least one batch: >= max(--batch_size, "
     "ceil(--replay_ratio x --batch_size)) = 8, got 7"),
    (["--replay_ratio=3", "--batch_size=8", "--replay_size=20"], "= 24, got 20"),
    (["--priority_exponent=1.5"], "--priority_exponent must be in [0, 1]"),
    (["--importance_sampling_exponent=-0.5"], "--importance_sampling_exponent must be in"),
    (["--trust_region_threshold=-1"], "--trust_region_threshold must be >= 0"),
    (["--initial_replay_ratio=-2"], "--initial_replay_ratio must be >= 0"),
    (["--initial_replay_frames=-5"], "--initial_replay_frames must be >= 0"),
    (["--replay_ratio=1", "--initial_replay_ratio=4", "--initial_replay_frames=10",
      "--batch_size=8", "--replay_size=20"],
     "ceil(--initial_replay_ratio x --batch_size)) = 32, got 20"),
])
def test_bad_replay_flags_are_refused_with_the_field_named(flags, message):
    with pytest.raises(SystemExit):
        parse_config(["--level_name=CartPole-v1", *flags])
    with pytest.raises(ValueError) as error:
        config_from_flags({"level_name": "CartPole-v1",
                           **{f.split("=")[0][2:]: _value(f) for f in flags}})
    assert message in str(error.value)


def _value(flag: str):
    name, value = flag[2:].split("=")
    return type(preset_defaults(NO_PRESET, "impala")[name])(value)


def test_a_bad_replay_flag_stops_a_run_before_anything_starts(tmp_path):
    result = run(["--job_name=local", "--level_name=CartPole-v1", "--replay_ratio=1",
                  "--replay_size=3", f"--logdir={tmp_path}"], timeout=60)
    assert result.returncode != 0
    assert "--replay_size must hold at least one batch" in result.stderr
    assert not any(tmp_path.iterdir())  # no run directory, no process started


def test_recurrent_agents_get_each_replayed_unrolls_stored_core_state():
    layout = UnrollLayout(unroll_length=3, observation_shape=(2,), observation_dtype="float32",
                          num_actions=2, core_shapes=((1, 4), (1, 4)),
                          recorded=Impala.recorded)
    replay = UnrollReplay(layout, batch_size=2, ratios=ReplaySchedule.constant(1.0), size=4,
                          priority_exponent=0.0, importance_sampling_exponent=0.0, seed=0)
    batch = Batch(layout, 2, extra_columns=replay.max_replayed, keep_stored=True)
    for value in (1.0, 2.0):
        arrays = {name: np.full(spec.shape, value, spec.dtype)
                  for name, spec in layout.schema().items()}
        arrays["action"][:] = arrays["last_action"][:] = 0
        batch.add(Unroll(arrays, "a", 0, EpisodeStats.empty()))
    replay.keep(batch)
    part = replay.mix_into(batch, update=1, frames=0)
    assert part.count == 2
    for name in ("core_0", "core_1"):
        core = batch.tensors[name]  # [L, B + k, H]
        assert core.shape == (1, 4, 4)
        for column in (2, 3):  # each replayed column: its own unroll's state, whole
            assert (core[:, column] == batch.arrays["reward"][0, column]).all()
