"""Fresh and replayed unrolls in one batch: each update trains on its B fresh unrolls plus
about `replay_ratio` x B from the learner's own replay (LASER's scheme, Schmitt, Hessel,
Simonyan 2019; every algorithm here trains this way).

`UnrollReplay` keeps the stored form of the learner's fresh unrolls (layout.py: frames once
per step) in a `ReplayMemory` and writes sampled ones into the columns after the fresh
ones of a batch (rollout.Batch), with their importance weights and a flag saying which
columns were replayed; the algorithm's loss reads both, and its error per column comes back
as the replayed unrolls' new priorities. Nothing here knows an algorithm.

Every rank draws the same number of replayed unrolls at every update (a function of the
update count and the run's frames, which all ranks share, and of the fill, which grows the
same on all ranks), so batch shapes match and the allreduces pair up.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

import numpy as np
import torch

from impala.algorithm import IMPORTANCE_WEIGHT, REPLAYED
from impala.schedules import ReplaySchedule
from impala.unroll.batches import Batch
from impala.unroll.layout import UnrollLayout, write_batch_column
from impala.unroll.replay_memory import ReplayMemory, ReplaySample

log = logging.getLogger("learner")


@dataclass
class ReplayedPart:
    """What one update took from replay, and what its loss reads of it."""

    sample: ReplaySample | None
    fresh: int  # columns [0, fresh) are fresh
    count: int  # columns [fresh, fresh + count) are replayed
    loss_inputs: dict[str, torch.Tensor]  # IMPORTANCE_WEIGHT and REPLAYED, each [columns]

    @property
    def columns(self) -> int:
        return self.fresh + self.count


def replayed_count(update: int, ratio: float, batch_size: int) -> int:
    """How many replayed unrolls update `update` takes: floor((u+1) r B) - floor(u r B), so
    a fractional r x B alternates between its two nearest integers and averages to it."""
    return math.floor((update + 1) * ratio * batch_size) - math.floor(update * ratio * batch_size)


class UnrollReplay:
    def __init__(self, layout: UnrollLayout, batch_size: int, ratios: ReplaySchedule,
                 size: int, priority_exponent: float, importance_sampling_exponent: float,
                 seed: int) -> None:
        self.batch_size = batch_size
        self.ratios = ratios
        self.max_replayed = math.ceil(ratios.largest * batch_size)
        check_memory(size, layout)
        self.memory = ReplayMemory(layout.schema(), size, priority_exponent,
                                   importance_sampling_exponent, seed)
        columns = batch_size + self.max_replayed
        self.weights = torch.ones(columns)
        self.replayed = torch.zeros(columns, dtype=torch.bool)
        self.replayed[batch_size:] = True

    def mix_into(self, batch: Batch, update: int, frames: int) -> ReplayedPart:
        """Write this update's replayed unrolls into `batch` after its fresh ones, then keep
        the fresh ones (after sampling: none is replayed in the update that brought it);
        `frames`: the run's fresh frames before this update."""
        ratio = self.ratios.at(frames)
        count = min(replayed_count(update, ratio, self.batch_size), len(self.memory))
        sample = None
        if count:
            sample = self.memory.sample(count)
            for j, slot in enumerate(sample.indices):
                write_batch_column(self.memory.item(slot), batch.arrays, batch.size + j)
            self.weights[batch.size:batch.size + count] = torch.from_numpy(sample.weights)
        columns = batch.size + count
        self.keep(batch)
        return ReplayedPart(sample, batch.size, count,
                            {IMPORTANCE_WEIGHT: self.weights[:columns],
                             REPLAYED: self.replayed[:columns]})

    def keep(self, batch: Batch) -> None:
        """Store the batch's fresh unrolls, with the priorities their actors computed if
        all have one (`mix_into` does; a benchmark or test filling a replay may)."""
        assert batch.stored is not None, "the batch queue must keep the stored form"
        priorities = batch.priorities if None not in batch.priorities else None
        self.memory.add(batch.stored, priorities)

    def reprioritize(self, part: ReplayedPart, column_errors: np.ndarray) -> None:
        """`column_errors` [B + count]: each column's error in the update just made; the
        replayed ones become their unrolls' priorities."""
        if part.sample is not None:
            self.memory.update_priorities(part.sample.indices,
                                          column_errors[part.fresh:part.columns])

    def stats(self, part: ReplayedPart) -> dict[str, float | None]:
        return {
            "replay_fill": len(self.memory) / self.memory.capacity,
            "replayed_share": part.count / part.columns,
            "replay_age": float(part.sample.ages.mean()) if part.sample is not None else None,
        }


def check_memory(size: int, layout: UnrollLayout) -> None:
    """Log what a replay of `size` unrolls will take; refuse a size the machine cannot hold."""
    needed = size * layout.stored_bytes()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    log.info("replay: %d unrolls x %.1f KiB (frames once per step) = %.2f GiB, filled as "
             "unrolls arrive; this machine has %.1f GiB", size, layout.stored_bytes() / 2**10,
             needed / 2**30, total / 2**30)
    if needed > 0.8 * total:
        raise ValueError(f"--replay_size={size} needs {needed / 2**30:.1f} GiB per learner, "
                         f"more than 80% of this machine's {total / 2**30:.1f} GiB; "
                         f"use at most {int(0.8 * total / layout.stored_bytes())} unrolls")
