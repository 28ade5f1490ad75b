"""Prioritized replay through a real update (IMPALA's loss on Pong-shaped unrolls): the loss
sees each replayed column's importance weight, exactly (N P(i))^-beta / max_j (N P(j))^-beta,
and fresh columns at 1; the loss's error of each replayed column becomes that unroll's new
priority. The sum tree and the weights formula are tested alone in test_replay.py; this is
the wiring between them and the loss, which a uniform priority or a zero weight breaks."""

from __future__ import annotations

import numpy as np
import torch

from impala.algorithm import IMPORTANCE_WEIGHT, REPLAYED, Learning, LossResult
from impala.distributed import SingleLearner
from impala.optim import RMSpropTF
from impala.schedules import ReplaySchedule
from impala.unroll.replay import UnrollReplay
from impala.update import Update, UpdateConfig
from tests.batches import B, pong_learner, random_batch

FILLED = 4 * B  # unrolls in replay before the update


class Recording(Learning):
    """The algorithm's own Learning, writing down what each loss saw and returned."""

    def __init__(self, inner: Learning) -> None:
        self.inner = inner
        self.seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def loss(self, model, batch, core_state) -> LossResult:
        result = self.inner.loss(model, batch, core_state)
        self.seen.append((batch[IMPORTANCE_WEIGHT].numpy().copy(),
                          batch[REPLAYED].numpy().copy(),
                          result.column_errors.detach().numpy().copy()))
        return result

    def after_update(self, model, frames_before: int, frames_after: int,
                     allreduce_sum) -> None:
        self.inner.after_update(model, frames_before, frames_after, allreduce_sum)


def test_replayed_columns_carry_their_importance_weights_and_get_their_errors_as_priorities():
    cfg, algo, model, layout = pong_learner("impala")
    alpha, beta = 0.5, 1.0
    # One replayed per fresh unroll: 3 of 12, from 3 slices of the priority mass, so three
    # different unrolls (none holds a third of the mass).
    replay = UnrollReplay(layout, B, ReplaySchedule.constant(1.0), 16, alpha, beta, seed=0)
    for seed in range(FILLED // B):
        replay.keep(random_batch(layout, replay, seed))
    slots = np.arange(FILLED)
    replay.memory.update_priorities(slots, np.linspace(0.1, 3.0, FILLED))
    before = replay.memory.tree.values(slots).copy()  # p_i^alpha
    recording = Recording(algo.learning(model))
    update = Update(model, RMSpropTF(model.parameters(), lr=1e-4), SingleLearner(), recording,
                    replay, torch.device("cpu"), UpdateConfig.of(cfg))
    update(random_batch(layout, replay, seed=99), 0, 0, 100)

    [(weights, replayed, errors)] = recording.seen
    count = len(weights) - B
    assert count > 0 and list(replayed) == [False] * B + [True] * count
    np.testing.assert_array_equal(weights[:B], 1.0)
    # Which slot each replayed column was: its priority is now that column's error.
    after = replay.memory.tree.values(slots)
    changed = np.flatnonzero(~np.isclose(after, before, rtol=0, atol=0))
    assert len(changed) == count
    column_of = {slot: int(np.argmin(np.abs(errors[B:] ** alpha - after[slot])))
                 for slot in changed}
    for slot, column in column_of.items():
        np.testing.assert_allclose(after[slot], errors[B + column] ** alpha, rtol=1e-5)
        # P(i) = p_i^alpha / sum; w_i = (N P(i))^-beta / max_j (N P(j))^-beta
        expected = (before.min() / before[slot]) ** beta
        np.testing.assert_allclose(weights[B + column], expected, rtol=1e-5)
    assert not np.allclose(weights[B:], weights[B])  # not one weight for all
