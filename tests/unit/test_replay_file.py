"""A replay written with a checkpoint and read back: the same items in the same order with
the same priorities, eviction going on where it left off; a smaller replay keeps the
newest; a stale, damaged or foreign file is set aside or refused with the file named."""

from __future__ import annotations

import numpy as np
import pytest

from impala.transport import FieldSpec
from impala.unroll import replay_file
from impala.unroll.replay_memory import ReplayMemory
from tests.replay_items import FIELDS, items


def filled(capacity: int, count: int, alpha: float = 0.6) -> ReplayMemory:
    """A memory that was given items 0..count-1, each with priority 1 + its value."""
    memory = ReplayMemory(FIELDS, capacity, priority_exponent=alpha,
                          importance_sampling_exponent=0.4, seed=3)
    for value in range(count):
        memory.add(items([value]), priorities=np.array([1.0 + value]))
    return memory


def chronological(memory: ReplayMemory) -> tuple[list[int], list[float]]:
    """Its items' values oldest first, and their priorities^alpha in that order."""
    order = np.argsort(memory.added_at[:len(memory)], kind="stable")
    return (memory.storage["y"][order].astype(int).tolist(),
            memory.tree.values(order).tolist())


@pytest.mark.parametrize("count", [0, 5, 8, 13])  # empty, part full, full, wrapped
def test_a_saved_replay_comes_back_with_its_items_order_and_priorities(tmp_path, count):
    memory = filled(8, count)
    if count:
        memory.update_priorities(np.array([0]), np.array([7.5]))
    path = tmp_path / "replay-0.npz"
    replay_file.save(path, memory, frames=1234, updates=56)
    back = ReplayMemory(FIELDS, 8, priority_exponent=0.6, importance_sampling_exponent=0.4,
                        seed=3)
    assert "restored" in replay_file.restore(path, back, frames=1234, updates=56)
    assert len(back) == len(memory) == min(count, 8)
    assert chronological(back) == chronological(memory)
    assert back.max_priority == memory.max_priority and back.adds == memory.adds
    assert back.tree.total == pytest.approx(memory.tree.total)
    # Eviction goes on where it left off: the oldest item leaves first.
    for value in (100, 101):
        memory.add(items([value]))
        back.add(items([value]))
    assert chronological(back) == chronological(memory)


def test_a_smaller_replay_keeps_the_newest_items(tmp_path):
    path = tmp_path / "replay-0.npz"
    replay_file.save(path, filled(8, 13), frames=1, updates=1)
    back = ReplayMemory(FIELDS, 3, priority_exponent=0.6, seed=0)
    replay_file.restore(path, back, frames=1, updates=1)
    assert chronological(back)[0] == [10, 11, 12]
    back.add(items([99]))
    assert chronological(back)[0] == [11, 12, 99]


def test_a_file_of_an_earlier_checkpoint_is_set_aside(tmp_path):
    path = tmp_path / "replay-0.npz"
    replay_file.save(path, filled(8, 5), frames=1000, updates=10)
    back = ReplayMemory(FIELDS, 8, priority_exponent=0.6)
    message = replay_file.restore(path, back, frames=2000, updates=20)
    assert "written at 1000 frames" in message and "starts empty" in message
    assert len(back) == 0
    assert "no replay-1.npz" in replay_file.restore(tmp_path / "replay-1.npz", back, 0, 0)


def test_a_damaged_or_foreign_file_is_refused_with_its_name(tmp_path):
    path = tmp_path / "replay-0.npz"
    replay_file.save(path, filled(8, 5), frames=1, updates=1)
    other = ReplayMemory({"x": FieldSpec("int64", (3,)), "y": FieldSpec("float32", ())}, 8,
                         priority_exponent=0.6)
    with pytest.raises(replay_file.ReplayFileError, match=r"replay-0.npz does not fit.*item\.x"):
        replay_file.restore(path, other, 1, 1)
    uniform = ReplayMemory(FIELDS, 8, priority_exponent=0.0)
    with pytest.raises(replay_file.ReplayFileError, match="priority exponent 0.6"):
        replay_file.restore(path, uniform, 1, 1)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(replay_file.ReplayFileError, match="replay-0.npz is damaged"):
        replay_file.restore(path, ReplayMemory(FIELDS, 8, priority_exponent=0.6), 1, 1)
    np.savez(tmp_path / "plain.npz", x=np.zeros(3))
    with pytest.raises(replay_file.ReplayFileError, match="not a replay of this toolkit"):
        replay_file.restore(tmp_path / "plain.npz", ReplayMemory(FIELDS, 8), 1, 1)


def test_a_pickled_object_in_the_file_is_never_loaded(tmp_path):
    path = tmp_path / "replay-0.npz"
    np.savez(path, format=np.array(replay_file.FORMAT), frames=np.int64(1),
             updates=np.int64(1), leaf=np.array([object()], dtype=object))
    with pytest.raises(replay_file.ReplayFileError, match="replay-0.npz"):
        replay_file.restore(path, ReplayMemory(FIELDS, 8), 1, 1)


def test_ranks_whose_fills_differ_all_start_empty():
    """agree_on_fill against the sums an allreduce over three ranks would return."""
    for counts, agreed in (([5, 5, 5], True), ([0, 5, 10], False), ([5, 5, 0], False)):
        def allreduce_sum(values, counts=counts):
            return np.array([sum(counts), sum(c * c for c in counts), len(counts)], float)

        memory = filled(8, counts[1])
        assert replay_file.agree_on_fill(memory, allreduce_sum) is agreed
        assert len(memory) == (counts[1] if agreed else 0)
