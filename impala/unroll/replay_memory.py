"""Experience replay: a fixed-size memory of items (unrolls, or any fixed-shape records),
sampled uniformly or by priority (Schaul et al. 2015, proportional variant).

It knows nothing of IMPALA or DQN: it stores named arrays of fixed shapes (`FieldSpec`s),
hands out samples with importance weights, and takes new priorities back. The learner
decides what an item is (layout.py's stored form) and what its priority means.

- Eviction: first in, first out (a ring over `capacity` slots).
- New items enter with the largest priority seen so far, so each is likely to be sampled
  soon after it arrives.
- P(i) = p_i^alpha / sum_k p_k^alpha (`priority_exponent` alpha; 0 = uniform).
- Importance weight w_i = (N P(i))^-beta / max_k w_k (`importance_sampling_exponent` beta),
  the maximum over the whole memory (from the smallest priority), so weights are <= 1 and
  do not depend on what else happens to be in the sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from impala.transport import FieldSpec

# A priority of exactly 0 would never be sampled again; errors of 0 are floored to this.
MIN_PRIORITY = 1e-6


class SumTree:
    """Sums and minima of `capacity` non-negative values in a binary tree of NumPy arrays,
    so that setting B values, finding the index for B prefix sums, the total and the
    minimum take O(B log N) work, each level in one vectorised step.

    Leaves are at [size, 2 * size); node i has children 2i and 2i + 1; the root is 1.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.size = 1 << max(0, (capacity - 1).bit_length())  # leaves, a power of 2
        self.sums = np.zeros(2 * self.size, np.float64)
        self.mins = np.full(2 * self.size, np.inf, np.float64)

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        return float(self.mins[1])

    def values(self, indices: np.ndarray) -> np.ndarray:
        return self.sums[self.size + np.asarray(indices)]

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaf `indices[j]` to `values[j]` (a repeated index keeps its last value)."""
        indices = np.asarray(indices, np.int64)
        values = np.asarray(values, np.float64)
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise IndexError(f"SumTree indices must lie in [0, {self.capacity})")
        if not (np.isfinite(values).all() and (values >= 0).all()):
            raise ValueError("SumTree values must be finite and >= 0")
        nodes = indices + self.size
        self.sums[nodes] = values
        self.mins[nodes] = values
        # All nodes stay at one depth; a parent listed twice is computed twice, the same.
        nodes = nodes >> 1
        while nodes[0] >= 1:
            left, right = 2 * nodes, 2 * nodes + 1
            self.sums[nodes] = self.sums[left] + self.sums[right]
            self.mins[nodes] = np.minimum(self.mins[left], self.mins[right])
            nodes >>= 1

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """For each value u in [0, total), the leaf i with sum(v[:i]) <= u < sum(v[:i+1])."""
        u = np.array(prefix_sums, np.float64)
        nodes = np.ones(u.shape, np.int64)
        while nodes[0] < self.size:  # every node is at the same depth
            left = self.sums[2 * nodes]
            go_right = u >= left
            u -= np.where(go_right, left, 0.0)
            nodes = 2 * nodes + go_right
        # Rounding can walk past the last non-zero leaf (u == total): step back to it.
        leaves = nodes - self.size
        return self._last_nonzero_at_or_before(leaves)

    def _last_nonzero_at_or_before(self, leaves: np.ndarray) -> np.ndarray:
        bad = self.sums[leaves + self.size] <= 0
        if bad.any():
            nonzero = np.flatnonzero(self.sums[self.size:self.size + self.capacity] > 0)
            positions = np.searchsorted(nonzero, leaves[bad], side="right") - 1
            leaves[bad] = nonzero[np.maximum(positions, 0)]
        return leaves


@dataclass
class ReplaySample:
    indices: np.ndarray  # [K] slots, for `update_priorities`, `get` and `item`
    weights: np.ndarray  # [K] float32 importance weights in (0, 1]
    ages: np.ndarray  # [K] how many `add` calls ago each item was added (1: the latest)


class ReplayMemory:
    """`capacity` items of named fixed-shape arrays; see the module docstring."""

    def __init__(self, fields: dict[str, FieldSpec], capacity: int,
                 priority_exponent: float = 0.0, importance_sampling_exponent: float = 0.0,
                 seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        for name, value in (("priority_exponent", priority_exponent),
                            ("importance_sampling_exponent", importance_sampling_exponent)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        self.capacity = capacity
        self.alpha = priority_exponent
        self.beta = importance_sampling_exponent
        # np.zeros: the kernel hands out pages as they are first written, so memory grows
        # with the fill, up to `nbytes`.
        self.storage = {name: np.zeros((capacity, *spec.shape), spec.dtype)
                        for name, spec in fields.items()}
        self.tree = SumTree(capacity)
        self.added_at = np.zeros(capacity, np.int64)  # the `add` call that wrote each slot
        self.adds = 0  # `add` calls so far
        self.next_slot = 0
        self.count = 0
        self.max_priority = 1.0
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self.storage.values())

    def __len__(self) -> int:
        return self.count

    def add(self, arrays: dict[str, np.ndarray],
            priorities: np.ndarray | None = None) -> np.ndarray:
        """Store n items (`arrays[name]` is [n, *shape]), evicting the oldest; each enters
        with its given priority ([n], e.g. computed by an actor), else with the largest
        priority so far. Returns their slots."""
        n = len(next(iter(arrays.values())))
        if n > self.capacity:
            raise ValueError(f"cannot add {n} items to a replay of {self.capacity}")
        slots = (self.next_slot + np.arange(n)) % self.capacity
        for name, array in arrays.items():
            self.storage[name][slots] = array
        if priorities is None:
            self.tree.set(slots, np.full(n, self.max_priority**self.alpha))
        else:
            self.update_priorities(slots, priorities)
        self.added_at[slots] = self.adds
        self.adds += 1
        self.next_slot = int((self.next_slot + n) % self.capacity)
        self.count = min(self.count + n, self.capacity)
        return slots

    def sample(self, k: int) -> ReplaySample:
        """k items drawn with probability P(i), one from each of k equal slices of the
        priority mass (stratified, as Schaul et al.), so a sample spreads over the memory."""
        if not 0 < k <= self.count:
            raise ValueError(f"cannot sample {k} items from a replay holding {self.count}")
        total = self.tree.total
        bounds = np.arange(k) * (total / k)
        slots = self.tree.find(bounds + self.rng.uniform(0.0, total / k, size=k))
        probabilities = self.tree.values(slots) / total
        # max_k w_k belongs to the smallest priority in the memory.
        smallest = self.tree.min / total
        weights = (probabilities / smallest) ** -self.beta
        return ReplaySample(
            indices=slots,
            weights=weights.astype(np.float32),
            ages=self.adds - self.added_at[slots],
        )

    def get(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the items in `slots`: name -> [K, *shape]."""
        return {name: array[slots] for name, array in self.storage.items()}

    def item(self, slot: int) -> dict[str, np.ndarray]:
        """Views of one item's arrays (valid until its slot is written again)."""
        return {name: array[slot] for name, array in self.storage.items()}

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities (e.g. the errors of the update that used them), each > 0."""
        priorities = np.maximum(np.asarray(priorities, np.float64), MIN_PRIORITY)
        if not np.isfinite(priorities).all():
            raise ValueError("replay priorities must be finite")
        self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))
        self.tree.set(slots, priorities**self.alpha)

    def clear(self) -> None:
        """Forget every item (their slots are overwritten as new ones arrive)."""
        self.tree = SumTree(self.capacity)
        self.added_at[:] = 0
        self.adds = self.next_slot = self.count = 0
        self.max_priority = 1.0

    def state(self) -> dict[str, np.ndarray]:
        """The items held as plain arrays, views where they can be (replay_file writes
        them): `item.<field>` [n, *shape], `leaf` [n] (priority^alpha), `added_at` [n],
        `oldest` (the index of the oldest item: the ring's start once it is full), and the
        scalars `adds`, `max_priority` and `alpha`."""
        n = self.count
        arrays = {f"item.{name}": array[:n] for name, array in self.storage.items()}
        return arrays | {"leaf": self.tree.values(np.arange(n)), "added_at": self.added_at[:n],
                         "oldest": np.int64(self.next_slot if n == self.capacity else 0),
                         "adds": np.int64(self.adds), "max_priority": np.float64(self.max_priority),
                         "alpha": np.float64(self.alpha)}

    def load_state(self, state: dict[str, np.ndarray]) -> int:
        """Refill an empty memory from `state()`'s arrays, oldest first, keeping the newest
        `capacity` items if there are more; returns how many it holds. ValueError naming
        what does not fit this memory's fields or priority exponent."""
        if self.count:
            raise ValueError("load_state needs an empty replay")
        expected = {f"item.{name}": array for name, array in self.storage.items()}
        problems = _state_problems(state, expected)
        if problems:
            raise ValueError("; ".join(problems))
        if float(state["alpha"]) != self.alpha:
            raise ValueError(f"saved with priority exponent {float(state['alpha'])}, this run "
                             f"{self.alpha}")
        n = {len(state[key]) for key in (*expected, "leaf", "added_at")}
        if len(n) != 1:
            raise ValueError(f"its arrays hold different numbers of items: {sorted(n)}")
        saved = n.pop()
        count = min(saved, self.capacity)
        parts = _newest_oldest_first(saved, int(state["oldest"]) % max(saved, 1), count)
        leaves = np.empty(count, np.float64)
        for key, array in [*expected.items(), ("added_at", self.added_at), ("leaf", leaves)]:
            start = 0
            for part in parts:  # slices, not an index array: no second copy of the frames
                array[start:start + part.stop - part.start] = state[key][part]
                start += part.stop - part.start
        self.tree.set(np.arange(count), leaves)  # checks they are finite and >= 0
        self.adds = int(state["adds"])
        self.max_priority = float(state["max_priority"])
        self.count, self.next_slot = count, count % self.capacity
        self.rng = np.random.default_rng([self.seed, self.adds])  # not the first draws again
        return count


def _newest_oldest_first(saved: int, oldest: int, count: int) -> list[slice]:
    """Slices of a saved ring of `saved` items whose oldest is at `oldest` that hold its
    newest `count` items, oldest first."""
    drop = saved - count
    parts = []
    for start, stop in ((oldest, saved), (0, oldest)):
        skip = min(drop, stop - start)
        drop -= skip
        if stop - start - skip > 0:
            parts.append(slice(start + skip, stop))
    return parts


def _state_problems(state: dict[str, np.ndarray], items: dict[str, np.ndarray]) -> list[str]:
    """What keeps `state` from filling a memory whose item arrays are `items`."""
    problems = [f"{key}: missing" for key in (*items, "leaf", "added_at", "oldest", "adds",
                                              "max_priority", "alpha") if key not in state]
    for key, array in items.items():
        saved = state.get(key)
        if saved is not None and (saved.dtype, saved.shape[1:]) != (array.dtype, array.shape[1:]):
            problems.append(f"{key}: {saved.dtype} {list(saved.shape[1:])} per item, this run "
                            f"{array.dtype} {list(array.shape[1:])}")
    return problems
