"""End to end on one host: real learner and actor processes over ZeroMQ learn a task
within its frame budget with the defaults (CartPole, and image tasks through the Atari data
path). A local run's faults are `test_local_faults.py`, its checkpoints
`test_checkpoints.py`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from tests.helpers import (
    CARTPOLE_FLAGS,
    CARTPOLE_RUN,
    PRESETS,
    assert_stopped_at_the_target,
    free_port,
    read_csv,
    run,
)

pytestmark = pytest.mark.slow

CARTPOLE_BUDGET = 300_000  # frames (CartPole: one frame per agent step)
# The defaults ended their 300K frames with a mean of 479-500 over the last 100 episodes
# (6 seeds, on a loaded 2-core VM); with half the learning rate at 444 and 464, so this
# bar is about collapse, not speed (DelayedCue's budget is about speed). Random play
# scores ~22.
CARTPOLE_LEARNED = 400
# The atari preset's share over its first --initial_replay_frames (all of a test's frames).
INITIAL_REPLAYED_SHARE = (PRESETS["atari"]["initial_replay_ratio"]
                          / (1 + PRESETS["atari"]["initial_replay_ratio"]))


class CartPoleRun(NamedTuple):
    run_dir: Path
    final_mean: float  # the mean raw return of the last 100 episodes, at the budget
    stderr: str


def cartpole_with_the_defaults(logdir: Path, extra: tuple[str, ...] = ()) -> CartPoleRun:
    """One `--job_name=local` CartPole run with no flag but the level, the agent and
    `extra`."""
    result = run(["--job_name=local", *CARTPOLE_FLAGS, *extra, f"--logdir={logdir}",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = logdir / CARTPOLE_RUN
    episodes = read_csv(run_dir / "episodes-0.csv")
    final_mean = episodes["episode_return"].iloc[-100:].mean()
    return CartPoleRun(run_dir, final_mean, result.stderr)


def test_cartpole_is_learned_within_the_frame_budget_with_the_defaults(tmp_path):
    """One learner and two actor processes, no flag but the level and the agent (the
    classic preset decides the rest, its frame budget included); the mean raw return of
    the last 100 episodes, at the end of the 300K frames, is at least CARTPOLE_LEARNED: a
    policy that learned and then fell apart fails."""
    result = cartpole_with_the_defaults(tmp_path)
    assert result.final_mean >= CARTPOLE_LEARNED, (
        f"mean return of the last 100 episodes {result.final_mean:.1f} at the end of "
        f"{CARTPOLE_BUDGET} frames")
    # The run directory holds what docs/run-directory.md promises.
    run_dir = result.run_dir
    logs = read_csv(run_dir / "logs.csv")
    for column in ("time", "frames", "sps", "updates", "episodes", "mean_episode_return",
                   "mean_episode_length", "total_loss", "pg_loss", "baseline_loss", "entropy",
                   "grad_norm", "learning_rate", "policy_lag", "queue_depth",
                   "dropped_messages"):
        assert column in logs.columns
    assert "td_error" not in logs.columns  # another algorithm's scalars are not its columns
    # Empty without episodes, without replay or without ReDo; every other column has a
    # number every row.
    numeric = logs.drop(columns=["mean_episode_return", "mean_episode_length", "replay_fill",
                                 "replayed_share", "replay_age", "dormant_units",
                                 "recycled_units"]).dropna()
    assert len(numeric) == len(logs)
    assert all(dtype.kind in "if" for dtype in numeric.dtypes), numeric.dtypes
    assert logs["mean_episode_return"].dropna().dtype.kind == "f"
    assert logs["frames"].iloc[-1] >= PRESETS["classic"]["total_environment_frames"]
    assert logs["updates"].is_unique  # the last row once, even when a log tick falls on it
    assert logs["learning_rate"].iloc[-1] < PRESETS["classic"]["learning_rate"] * 0.05
    assert logs["policy_lag"].median() < 5  # flow control keeps actors close to the learner
    assert list(run_dir.glob("events.out.tfevents.*"))
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["exit_status"] == "finished" and meta["flags"]["preset"] == "classic"
    assert meta["preset_values"] == PRESETS["classic"]
    assert "git_commit" in meta
    assert os.environ["PATH"] not in json.dumps(meta)  # the environment is never stored
    assert (run_dir / "checkpoint.pt").exists()
    assert "frames" in result.stderr and "ETA" in result.stderr  # the status line


def test_cartpole_is_learned_with_popart_value_normalization(tmp_path):
    """The classic preset with --value_normalization=popart reaches a mean of
    CARTPOLE_LEARNED over 100 episodes within the defaults' budget, with the statistics
    grown from mu 0, sigma 1 towards CartPole's values (1 a step, discounted over hundreds
    of steps).

    It stops at the target rather than judging the budget's last episodes: PopArt under
    the classic preset learns later than the plain head and dips mid-run, so its mean at
    the end of the budget is no stable bar, while it reaches 400 well within the budget
    (results/test-budgets.csv). "Learned and held" is the defaults' test above."""
    run_dir = cartpole_with_the_defaults(tmp_path, ("--value_normalization=popart",
                                                    f"--target_return={CARTPOLE_LEARNED}")
                                         ).run_dir
    assert_stopped_at_the_target(run_dir, CARTPOLE_LEARNED, CARTPOLE_BUDGET)
    weights = torch.load(run_dir / "checkpoint.pt", weights_only=False)["model"]
    mean, mean_square = (float(weights[f"heads.baseline.{name}"])
                         for name in ("mean", "mean_square"))
    assert mean > 3 and mean_square - mean**2 > 9
    logs = read_csv(run_dir / "logs.csv")  # the statistics are logged as they move
    assert logs["value_sigma"].iloc[0] < logs["value_sigma"].iloc[-1] > 3
    assert logs["value_mean"].iloc[-1] > 3


# DelayedCue's budget fails a learner that learns half as fast: the defaults reached 9 of 10
# at 9.1K-10.9K frames (9 seeds, on a loaded 2-core VM), and with half the learning rate
# at 15.4K-16.0K (3 seeds; 7.3 and 8.3 at 13K in 2 more). DelayedCueLong's budget is 2.4x
# what the defaults need (41-45K frames, 38K with replay): its tests are of the data path
# (replay, stacks, the bootstrap), not of learning speed. The runs stop at the target
# (--target_return), so a margin costs time only when it is needed.
CUE_BUDGET = 14_000
LONG_CUE_BUDGET = 100_000


def cue_run(tmp_path: Path, level: str, budget: int, target: float,
            flags: tuple[str, ...] = ()) -> Path:
    """A --job_name=local run of `level` with the defaults (and `flags`) that must stop on
    reaching `target` (mean of the last 100 episodes) within `budget` frames; its run dir."""
    result = run(["--job_name=local", f"--level_name={level}", *flags,
                  f"--total_environment_frames={budget}", f"--target_return={target}",
                  "--log_interval_s=2", f"--logdir={tmp_path}",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / f"{level.replace('/', '-')}_SimpleConvNetAgent"
    assert_stopped_at_the_target(run_dir, target, budget)
    return run_dir


def test_an_image_task_that_needs_stacked_frames_is_learned_with_the_defaults(tmp_path):
    """impala/DelayedCue-v0 goes through the Atari data path (frame stacks sent once and
    rebuilt on the learner, rewards one step after the action): it is solved only if
    that path is right. Random play scores 0, perfect play 10."""
    run_dir = cue_run(tmp_path, "impala/DelayedCue-v0", CUE_BUDGET, 9.0)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["flags"]["preset"] == "atari" and meta["preset_values"]["batch_size"] == 8
    assert (run_dir / "curve.png").stat().st_size > 10_000


def test_a_reward_paid_after_the_unroll_ends_is_learned_through_the_bootstrap(tmp_path):
    """impala/DelayedCueLong-v0 pays each answer 25 steps later, past the unroll's 20 (as
    Pong pays a point long after the paddle moved); only the waiting screens tell what is
    coming. Solved only if values and bootstrap values carry the return across unroll
    boundaries. Random play scores 0, perfect play 5; on-policy (replay off, every
    unroll learned from once) it is solved in ~45K frames."""
    run_dir = cue_run(tmp_path, "impala/DelayedCueLong-v0", LONG_CUE_BUDGET, 4.5,
                      ("--replay_ratio=0",))
    assert read_csv(run_dir / "logs.csv")["replay_fill"].isna().all()


def test_prioritized_replay_learns_through_the_atari_data_path(tmp_path):
    """LASER with prioritized replay, as the atari preset sets it, on
    impala/DelayedCueLong-v0: replayed unrolls are kept as single frames and rebuilt into
    stacks after the fresh ones, weighted and masked in the loss. A wrong rebuild, weight or
    priority shows as a task not learned."""
    run_dir = cue_run(tmp_path, "impala/DelayedCueLong-v0", LONG_CUE_BUDGET, 4.5)
    logs = read_csv(run_dir / "logs.csv")
    last = logs.iloc[-1]
    assert last["frames"] < PRESETS["atari"]["initial_replay_frames"]
    assert last["replayed_share"] == INITIAL_REPLAYED_SHARE and 0 < last["replay_fill"] <= 1
    assert last["replay_age"] >= 1 and 0 <= last["trust_region_masked"] <= 1
    replay_size = PRESETS["atari"]["replay_size"]
    assert f"replay: {replay_size} unrolls x" in (run_dir / "learner-0.log").read_text()


def test_frame_stacks_gathered_where_the_update_runs_learn_through_the_atari_data_path(
        tmp_path):
    """--stack_frames=device on the CPU (a GPU learner's default): batches carry each frame
    once and the update gathers the stacks, for fresh and replayed unrolls alike."""
    run_dir = cue_run(tmp_path, "impala/DelayedCueLong-v0", LONG_CUE_BUDGET, 4.5,
                      ("--stack_frames=device",))
    assert "frame stacks gathered on the device" in (run_dir / "learner-0.log").read_text()
