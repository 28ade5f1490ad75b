"""Prioritized replay bookkeeping: operations per second of this project's NumPy sum tree
(impala/replay.py) against cpprb's C++ segment tree, on what a learner does per update:
add B new items at the largest priority, sample K by priority with importance weights,
update those K priorities. Items are one int64 each here, so the figure is the tree's cost
(a replayed Pong unroll's frame copies are measured by bench/learner.py).

  .venv/bin/python bench/replay.py [--capacity 10000 1000000] [--batch 8] [--seconds 5]

cpprb is not a project dependency: `pip install cpprb` to include it (skipped if absent).
"""

from __future__ import annotations

import argparse
import time

import common
import numpy as np

from impala.transport import FieldSpec
from impala.unroll.replay_memory import ReplayMemory


def ours(capacity: int, batch: int, seconds: float) -> float:
    memory = ReplayMemory({"i": FieldSpec("int64", ())}, capacity, priority_exponent=0.6,
                          importance_sampling_exponent=0.4, seed=0)
    rng = np.random.default_rng(0)
    while len(memory) < capacity:
        memory.add({"i": np.arange(batch)})

    def one_update() -> None:
        memory.add({"i": np.arange(batch)})
        sample = memory.sample(batch)
        memory.update_priorities(sample.indices, rng.uniform(0.01, 2.0, batch))

    return _rate(one_update, seconds)


def cpprb_buffer(capacity: int, batch: int, seconds: float) -> float | None:
    try:
        from cpprb import PrioritizedReplayBuffer
    except ImportError:
        return None
    buffer = PrioritizedReplayBuffer(capacity, {"i": {"dtype": np.int64}}, alpha=0.6)
    rng = np.random.default_rng(0)
    items = np.arange(batch)
    for _ in range(capacity // batch + 1):
        buffer.add(i=items)

    def one_update() -> None:
        buffer.add(i=items)
        sample = buffer.sample(batch, beta=0.4)
        buffer.update_priorities(sample["indexes"], rng.uniform(0.01, 2.0, batch))

    return _rate(one_update, seconds)


def _rate(work, seconds: float) -> float:
    work()  # warm-up
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        work()
        count += 1
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, nargs="*", default=[10_000, 1_000_000])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    rows = []
    for capacity in args.capacity:
        for name, measure in (("numpy sum tree (impala.unroll.replay_memory)", ours),
                              ("cpprb PrioritizedReplayBuffer", cpprb_buffer)):
            rate = measure(capacity, args.batch, args.seconds)
            if rate is not None:
                rows.append({"implementation": name, "capacity": capacity,
                             "batch": args.batch, "updates_per_s": rate,
                             "us_per_update": 1e6 / rate})
    common.report("replay", rows, ["implementation", "capacity", "batch", "updates_per_s",
                                   "us_per_update"])


if __name__ == "__main__":
    main()
