"""Ape-X and R2D2 learn, end to end, with their presets: real actors, the wire, replay with
actor priorities, target networks, and greedy evaluation of the checkpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import (
    PRESETS,
    assert_stopped_at_the_target,
    free_port,
    progress,
    read_csv,
    run,
)

RECALL_BUDGET = 60_000  # R2D2's actors reached a mean of 4.5 at 34K-44K frames in 23 runs
# Ape-X on Recall as favourably as possible: R2D2's settings, minus the recurrence.
# Half R2D2's: on RecallShort the actors' mean is 4.6-4.8 from 17K frames.
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


def reached_the_target(run_dir: Path) -> bool:
    return "reached --target_return" in (run_dir / "learner-0.log").read_text()


# The greedy policy after the apex_classic run: the 21 runs of this test's command whose
# greedy score was measured played 301 to 500 over 100 episodes, stopped at the actors' 475
# at 172K-447K frames or run to the 500K budget (3 of them). Random play scores ~20.
APEX_CARTPOLE_GREEDY = 250


@pytest.mark.slow
def test_apex_learns_cartpole_with_its_defaults(tmp_path):
    """The apex_classic preset learns CartPole within its 500K frames: the run stops once
    the actors' mean over 100 episodes (epsilon-greedy, down to epsilon 0.4 in one
    environment) reaches 475, or at the budget, and the greedy policy then plays well over
    100 episodes."""
    flags = ["--algorithm=apex", "--level_name=CartPole-v1"]
    train(tmp_path, [*flags, "--target_return=475"], timeout=900)
    run_dir = tmp_path / "CartPole-v1_MLPAgent"
    greedy = greedy_mean_return(tmp_path, flags, 100)
    assert greedy >= APEX_CARTPOLE_GREEDY, progress(run_dir)
    logs = read_csv(run_dir / "logs.csv")
    last = logs.iloc[-1]
    assert last["replay_fill"] > 0
    assert last["replayed_share"] == 0.8  # 4 replayed per fresh unroll
    assert logs["td_error"].notna().all() and logs["q_value"].iloc[-1] > 10
    if reached_the_target(run_dir):
        assert_stopped_at_the_target(run_dir, 475, PRESETS["apex_classic"]
                                     ["total_environment_frames"])


# Ape-X's image preset met 4.2 over 100 episodes at 25K-30K frames in 10 runs of 10, each
# greedy checkpoint then playing 5.00; the code before
# target copies were counted in frames reached 0.08 by 100K (one target copy in 695
# updates, the rate annealed towards 0).
APEX_CUE_BUDGET = 100_000


@pytest.mark.slow
@pytest.mark.parametrize("bf16_torso", ["off", "on"])
def test_apex_learns_a_reward_paid_25_steps_later_through_the_atari_data_path(tmp_path,
                                                                              bf16_torso):
    """impala/DelayedCueLong-v0 with Ape-X's preset for image environments, the Atari
    preset's rules (a target copy every so many frames, a constant rate, B = 4 with 3
    replayed per fresh unroll): stacked frames sent once, the answer paid 25 steps later, as
    a Pong point long after the paddle moved. With n = 3 the answer's value reaches back
    only through ~9 target copies of bootstrapped values, so a target copied too seldom, or
    a rate annealed to nothing, learns nothing here: Pong stayed at -21 for that reason.
    Random play scores 0, perfect play 5. With `--bf16_torso=on` the learner's
    convolutions run in bfloat16 and must learn it within the same budget."""
    flags = ["--algorithm=apex", "--level_name=impala/DelayedCueLong-v0"]
    train(tmp_path, [*flags, f"--total_environment_frames={APEX_CUE_BUDGET}",
                     "--target_return=4.2", f"--bf16_torso={bf16_torso}"], timeout=600)
    run_dir = tmp_path / "impala-DelayedCueLong-v0_SimpleConvNetAgent"
    assert_stopped_at_the_target(run_dir, 4.2, APEX_CUE_BUDGET)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["flags"]["preset"] == "apex_image"
    assert ("bfloat16 torso" in (run_dir / "learner-0.log").read_text()) == (bf16_torso == "on")
    assert greedy_mean_return(tmp_path, flags, 100) >= 4.5


# R2D2's greedy policy after the whole 60K budget on Recall played 5.00 over 100 episodes
# in 24 runs of 24 (34-39 s each). A guess scores 0, and a memoryless agent that carries
# the cue in its last action (an input R2D2's LSTM also has) scored 3.9: the bar is above it.
R2D2_RECALL_GREEDY = 4.75


@pytest.mark.slow
def test_r2d2_remembers_a_cue_its_frame_stack_no_longer_shows(tmp_path):
    """impala/Recall-v0 shows its cue 7 steps before the answer, beyond a 4-frame stack:
    R2D2's LSTM learns it within its budget, and the learner's greedy policy then plays it
    over 100 episodes. The whole budget, not a stop at the actors' first 4.5: their mean
    trails the learner, and such a stop once caught the greedy policy between answers (2.6
    and 3.38 in 2 runs of 23).

    What this shows is the memory: an LSTM whose state is zeroed at every step fails it.
    It cannot show the state stored at a sequence's start: the preset's sequences start 40
    steps apart, on the resets of Recall's 40-step episodes, and the 40-step burn-in would
    rebuild a cue 7 steps back anyway. test_datapath.py checks that stored state exactly."""
    r2d2 = ["--algorithm=r2d2", "--level_name=impala/Recall-v0"]
    train(tmp_path, [*r2d2, f"--total_environment_frames={RECALL_BUDGET}"], timeout=900)
    run_dir = tmp_path / "impala-Recall-v0_MLPLSTMAgent"
    greedy = greedy_mean_return(tmp_path, r2d2, 100)
    assert greedy >= R2D2_RECALL_GREEDY, progress(run_dir)
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
