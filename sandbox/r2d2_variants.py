"""R2D2 variants tried on Pong while finding why the r2d2_atari preset does not learn it
(results/runs.csv, group r2d2). Run one with, from the checkout's root:

  .venv/bin/python experiment.py --algorithm=sandbox.r2d2_variants:R2D2Frames --preset=auto ...

Each is R2D2 with one part of Ape-X's in place of R2D2's; the presets are the values
r2d2_atari had when they ran (the paper's gamma, n and priority exponents) under their own
names."""

from __future__ import annotations

from dataclasses import replace

from impala.algorithms.r2d2 import ATARI as TODAYS_ATARI
from impala.algorithms.r2d2 import R2D2

# r2d2_atari before it took Ape-X's targets and one fresh sequence per update, so that
# the recorded runs reproduce.
ATARI = replace(TODAYS_ATARI, values={
    **TODAYS_ATARI.values, "batch_size": 2, "discounting": 0.997, "n_step": 5,
    "priority_exponent": 0.9, "importance_sampling_exponent": 0.6,
    "total_environment_frames": 10_000_000})


class R2D2Frames(R2D2):
    """The LSTM sees the torso's features only, no last action or reward (as Ape-X's network
    sees frames only)."""

    name = "r2d2_frames"
    presets = (replace(ATARI, name="r2d2_frames_atari", record=()),)
    action_reward_inputs = False


class R2D2ApexTargets(R2D2Frames):
    """Also Ape-X's targets and priorities: no value rescaling (the run clips rewards
    instead), an unroll's priority its mean |delta|: Ape-X with an LSTM and burn-in."""

    name = "r2d2_apex_targets"
    presets = (replace(ATARI, name="r2d2_apex_targets_atari", record=()),)
    rescaled = False
    priority_eta = 0.0


class R2D2Unscaled(R2D2):
    """R2D2 with targets in raw returns: no value rescaling h (rewards stay unclipped unless
    the run clips them)."""

    name = "r2d2_unscaled"
    presets = (replace(ATARI, name="r2d2_unscaled_atari", record=()),)
    rescaled = False


class R2D2MeanPriority(R2D2):
    """R2D2 whose sequence priority is its transitions' mean |delta| (Ape-X's), not
    0.9 max + 0.1 mean."""

    name = "r2d2_mean_priority"
    presets = (replace(ATARI, name="r2d2_mean_priority_atari", record=()),)
    priority_eta = 0.0


class R2D2FramesUnscaled(R2D2Frames):
    """R2D2 without value rescaling whose LSTM sees the torso's features only (no last
    action or reward): its gamma, n, priorities and sequences otherwise."""

    name = "r2d2_frames_unscaled"
    presets = (replace(ATARI, name="r2d2_frames_unscaled_atari", record=()),)
    rescaled = False
