"""The falling entropy floor (`--entropy_floor_start`, `--entropy_floor_frames`): the
floor each update applies is the schedule's at the run's frames before that update,
checked against a linear interpolation written here, through a real update of IMPALA's
loss on Pong-shaped unrolls (so the learner's wiring is covered, and a resume, which
starts a new Learning at a later frame, gets the floor of that frame)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from impala.algorithm import DONE, LAST_ACTION, OBSERVATION, REWARD
from impala.algorithms.impala import POLICY
from impala.distributed import SingleLearner
from impala.optim import RMSpropTF
from impala.presets import config_from_flags
from impala.schedules import FloorSchedule
from impala.update import Update, UpdateConfig, core_state, to_device, with_stacks
from tests.batches import pong_learner, random_batch

FALL = 1_000_000  # frames over which the floor falls


def linear_floor(frames: int, start: float, end: float) -> float:
    return float(np.interp(frames, [0, FALL], [start, end]))


@pytest.mark.parametrize("frames", [0, 1, FALL // 3, FALL // 2, FALL - 1, FALL, 5 * FALL])
def test_the_floor_falls_linearly_then_stays(frames):
    schedule = FloorSchedule(end=0.8, start=0.95, frames=FALL)
    assert schedule.at(frames) == pytest.approx(linear_floor(frames, 0.95, 0.8), abs=1e-12)


def test_without_frames_the_floor_is_constant():
    assert FloorSchedule(end=0.8, start=0.95, frames=0).at(0) == 0.8
    assert FloorSchedule(end=0.8).at(10**9) == 0.8


def test_a_floor_of_zero_is_off_from_the_first_frame_even_under_the_presets_fall():
    cfg = config_from_flags({"level_name": "ALE/Breakout-v5", "entropy_floor": 0.0})
    s = cfg.algorithm_flags
    assert (s.entropy_floor_start, s.entropy_floor_frames) == (1.0, 2_000_000)
    schedule = FloorSchedule(s.entropy_floor, s.entropy_floor_start, s.entropy_floor_frames)
    assert [schedule.at(frames) for frames in (0, FALL, 10 * FALL)] == [0.0, 0.0, 0.0]


def _sharpened(model: torch.nn.Module) -> torch.nn.Module:
    """The agent with its policy head scaled up, so that its entropy sits well inside
    (0, log A) rather than at the initial near-uniform policy's."""
    with torch.no_grad():
        model.heads[POLICY].weight.mul_(300.0)
    return model


def _entropy_share(model: torch.nn.Module, batch) -> float:
    """Mean entropy over the batch's steps [0, T) as a share of log A, from softmax."""
    tensors = with_stacks(to_device(batch.columns(batch.size), torch.device("cpu")))
    with torch.no_grad():
        output, _ = model(tensors[OBSERVATION], tensors[LAST_ACTION], tensors[REWARD],
                          tensors[DONE], core_state(tensors))
    logits = output.heads[POLICY][:-1].double().numpy()
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    entropy = -(p * np.log(np.clip(p, 1e-300, None))).sum(axis=-1).mean()
    return float(entropy / math.log(logits.shape[-1]))


def test_each_update_applies_the_floor_scheduled_at_the_frames_before_it():
    cfg, algo, model, layout = pong_learner("impala")
    model = _sharpened(model)
    share = _entropy_share(model, random_batch(layout, None, seed=5))
    assert 0.2 < share < 0.9
    start, end = share + 0.08, share - 0.08
    cfg, algo, _, _ = pong_learner("impala", (f"--entropy_floor={end}",
                                              f"--entropy_floor_start={start}",
                                              f"--entropy_floor_frames={FALL}"))
    applied = []
    for frames in (0, FALL // 4, 3 * FALL // 4, FALL, 3 * FALL):
        # A copy per update (the same policy each time); a new Learning per update is
        # what a resume at `frames` makes.
        fresh = copy.deepcopy(model)
        update = Update(fresh, RMSpropTF(fresh.parameters(), lr=1e-4), SingleLearner(),
                        algo.learning(fresh), None, torch.device("cpu"), UpdateConfig.of(cfg))
        # frames after: far enough on that a floor read there would differ.
        stats = update(random_batch(layout, None, seed=5), 0, frames, frames + FALL // 2)
        floor = linear_floor(frames, start, end)
        assert stats.scalars["entropy"] / math.log(layout.num_actions) == pytest.approx(
            share, abs=1e-4)
        assert stats.scalars["entropy_bonus_on"] == float(share < floor), (frames, floor)
        applied.append(stats.scalars["entropy_bonus_on"])
    assert applied == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("flags, message", [
    ({"entropy_floor": 0.8, "entropy_floor_start": 0.7, "entropy_floor_frames": FALL},
     "--entropy_floor_start must be above --entropy_floor"),
    ({"entropy_floor": 0.8, "entropy_floor_start": 1.01, "entropy_floor_frames": FALL},
     "--entropy_floor_start must be above --entropy_floor"),
    ({"entropy_floor": 0.8, "entropy_floor_frames": -1},
     "--entropy_floor_frames must be >= 0"),
])
def test_a_floor_schedule_that_does_not_fall_is_refused_with_the_flag_named(flags, message):
    with pytest.raises(ValueError, match=message):
        config_from_flags({"level_name": "CartPole-v1", **flags})


def test_a_floor_may_start_at_the_uniform_entropy_where_the_bonus_always_applies():
    cfg = config_from_flags({"level_name": "CartPole-v1", "entropy_floor": 0.8,
                             "entropy_floor_start": 1.0, "entropy_floor_frames": FALL})
    assert cfg.algorithm_flags.entropy_floor_start == 1.0
