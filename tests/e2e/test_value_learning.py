"""Ape-X and R2D2 learn, end to end, with their presets: real actors, the wire, replay with
actor priorities, target networks, and greedy evaluation of the checkpoint."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import (
    PRESETS,
    assert_stopped_at_the_target,
    first_solved_attempt,
    free_port,
    progress,
    read_csv,
    run,
)

RECALL_BUDGET = 60_000  # R2D2 with its preset learned Recall by ~35K frames (sandbox/value.md)
# Ape-X on Recall as favourably as possible: R2D2's settings, minus the recurrence.
# Half R2D2's: on RecallShort the actors' mean is 4.6-4.8 from 17K frames (sandbox/value.md).
APEX_RECALL_BUDGET = 30_000
APEX_ON_RECALL = ["--preset=r2d2_image", "--algorithm=apex", "--agent_name=MLPAgent",
                  "--burn_in=0", "--unroll_length=20"]


def train(tmp_path, flags: list[str], timeout: float):
    result = run(["--job_name=local", "--log_interval_s=2", f"--logdir={tmp_path}",
                  f"--learner_host=127.0.0.1:{free_port()}", *flags], timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]


def greedy_mean_return(tmp_path, flags: list[str], episodes: int) -> float:
    result = run(["--mode=test", f"--test_num_episodes={episodes}", f"--logdir={tmp_path}",
                  *flags], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return float(re.search(r"mean return (\S+)", result.stdout).group(1))


def target_then_greedy(flags: list[str], training_flags: list[str], target: float,
                       run_name: str) -> Callable[[Path], tuple[tuple[Path, float], str | None]]:
    """An attempt for `first_solved_attempt`: train with `flags` plus `training_flags` until
    the actors' mean reaches `target` (--target_return), then play 100 greedy episodes of
    the checkpoint; it counts only if the greedy mean reaches `target` too. Its result is
    (the run dir, the greedy mean)."""
    def attempt(attempt_dir: Path) -> tuple[tuple[Path, float], str | None]:
        train(attempt_dir, [*flags, *training_flags, f"--target_return={target}"],
              timeout=900)
        run_dir = attempt_dir / run_name
        if "reached --target_return" not in (run_dir / "learner-0.log").read_text():
            return (run_dir, math.nan), progress(run_dir)
        greedy = greedy_mean_return(attempt_dir, flags, 100)
        return (run_dir, greedy), None if greedy >= target else (
            f"{target:g} reached in training, greedy {greedy:.2f} over 100 episodes")

    return attempt


@pytest.mark.slow
# Five attempts that each miss take their whole 500K frames (~170 s): more than `make
# test`'s 900 s per test, which would end the test before its last attempt could pass.
@pytest.mark.timeout(1500)
def test_apex_learns_cartpole_with_its_defaults(tmp_path):
    """The apex_classic preset learns CartPole within its 500K frames (in one of five
    attempts): the actors' mean return over 100 episodes (epsilon-greedy, down to
    epsilon 0.4 in one environment) reaches 475, where --target_return stops the run, and
    the greedy policy then scores 475 too over 100 episodes. An attempt counts only if both
    hold: a mean met on a passing peak can leave a greedy policy that fails some starts.
    sandbox/value.md has the runs to the full budget (a greedy 500 on seeds 1-3), the
    spread of frames at 475 (212K-449K in 12 of 14 runs) and of the greedy scores."""
    flags = ["--algorithm=apex", "--level_name=CartPole-v1"]
    budget = PRESETS["apex_classic"]["total_environment_frames"]
    attempt = target_then_greedy(flags, [], 475, "CartPole-v1_MLPAgent")
    # An attempt must both reach 475 and then play 475 greedily: 9 of 14 did on
    # 2026-11-25 (sandbox/value.md, "Ape-X on CartPole: how often an attempt passes"), so
    # three attempts would all miss ~1 time in 20; five miss ~1 in 170.
    run_dir, greedy = first_solved_attempt(
        tmp_path, attempt, f"Ape-X did not reach 475 on CartPole within {budget} frames, "
        "greedy too", attempts=5)
    assert_stopped_at_the_target(run_dir, 475, budget)
    logs = read_csv(run_dir / "logs.csv")
    last = logs.iloc[-1]
    assert last["replay_fill"] > 0
    assert last["replayed_share"] == 0.8  # 4 replayed per fresh unroll
    assert logs["td_error"].notna().all() and logs["q_value"].iloc[-1] > 10
    assert greedy >= 475


# Ape-X's image preset met 4.2 over 100 episodes at 25K-30K frames in 10 runs of 10, each
# greedy checkpoint then playing 5.00 (sandbox/value.md, "The CI test"); the code before
# target copies were counted in frames reached 0.08 by 100K (one target copy in 695
# updates, the rate annealed towards 0).
APEX_CUE_BUDGET = 100_000


@pytest.mark.slow
def test_apex_learns_a_reward_paid_25_steps_later_through_the_atari_data_path(tmp_path):
    """impala/DelayedCueLong-v0 with Ape-X's preset for image environments, the Atari
    preset's rules (a target copy every so many frames, a constant rate, B = 4 with 3
    replayed per fresh unroll): stacked frames sent once, the answer paid 25 steps later, as
    a Pong point long after the paddle moved. With n = 3 the answer's value reaches back
    only through ~9 target copies of bootstrapped values, so a target copied too seldom, or
    a rate annealed to nothing, learns nothing here: Pong stayed at -21 for that reason.
    Random play scores 0, perfect play 5."""
    flags = ["--algorithm=apex", "--level_name=impala/DelayedCueLong-v0"]
    train(tmp_path, [*flags, f"--total_environment_frames={APEX_CUE_BUDGET}",
                     "--target_return=4.2"], timeout=600)
    run_dir = tmp_path / "impala-DelayedCueLong-v0_SimpleConvNetAgent"
    assert_stopped_at_the_target(run_dir, 4.2, APEX_CUE_BUDGET)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["flags"]["preset"] == "apex_image"
    assert greedy_mean_return(tmp_path, flags, 100) >= 4.5


@pytest.mark.slow
def test_r2d2_remembers_a_cue_its_frame_stack_no_longer_shows(tmp_path):
    """impala/Recall-v0 shows its cue 7 steps before the answer, beyond a 4-frame stack:
    R2D2's LSTM, with its stored state and burn-in, learns it. An attempt counts when the
    actors' mean over 100 episodes reaches 4.5 within the budget and the learner's greedy
    policy then scores 4.5 over 100 episodes too."""
    r2d2 = ["--algorithm=r2d2", "--level_name=impala/Recall-v0"]
    attempt = target_then_greedy(r2d2, [f"--total_environment_frames={RECALL_BUDGET}"], 4.5,
                                 "impala-Recall-v0_MLPLSTMAgent")
    # The actors' mean trails the learner, so a stop at its first 4.5 can catch the
    # learner's greedy policy between answers: CI's run once played 3.38 there, while 21
    # runs of the same command here played 5.00 (sandbox/value.md, "R2D2 on Recall: how
    # often an attempt passes"). Three attempts keep that rare miss from failing CI; a
    # break of the recurrence (the cue lost) still misses all three.
    run_dir, greedy = first_solved_attempt(tmp_path, attempt, f"R2D2 did not learn Recall "
                                           f"within {RECALL_BUDGET} frames, greedy too")
    assert greedy >= 4.5
    assert_stopped_at_the_target(run_dir, 4.5, RECALL_BUDGET)
    assert "replay: 1000 unrolls" in (run_dir / "learner-0.log").read_text()
    logs = read_csv(run_dir / "logs.csv")
    assert logs["replayed_share"].iloc[-1] == 0.75  # 3 replayed per fresh sequence


@pytest.mark.slow
@pytest.mark.parametrize("level,cue_in_stack", [("impala/Recall-v0", False),
                                                ("impala/RecallShort-v0", True)])
def test_apex_solves_recall_only_when_its_frame_stack_shows_the_cue(tmp_path, level,
                                                                     cue_in_stack):
    """Feed-forward Ape-X, on half R2D2's frame budget, with its settings: with the cue 3 steps back
    (RecallShort) it answers right; with it 7 steps back (Recall) it can only guess, an
    expected return of 0 of 5, since its network sees frames only (no last action to carry
    the cue in)."""
    flags = [*APEX_ON_RECALL, f"--level_name={level}"]
    # A whole budget, not --target_return: stopped at the actors' first 4.5 (5.7K frames,
    # 177 updates, the actors ~29 updates behind) the learner's greedy policy scored 0.62.
    train(tmp_path, [*flags, f"--total_environment_frames={APEX_RECALL_BUDGET}"], timeout=900)
    greedy = greedy_mean_return(tmp_path, flags, 100)
    if cue_in_stack:
        assert greedy >= 4.5
    else:
        assert greedy < 1.5  # a fixed guess: 0 +- 0.22 over 100 episodes of 5 trials
