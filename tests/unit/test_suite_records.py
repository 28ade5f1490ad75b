"""bench/suite.py's view of a run in progress (`--status`): the mean return of each 1M-frame
iteration wherever the run's episodes are now, the last one marked while it is partial; and
the games it is given, checked against ale-py's before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from suite_records import SuiteRun, iteration_line, record_row  # noqa: E402

from results import redraw  # noqa: E402


def write_episodes(path, frames: list[int], returns: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"time": 0.0, "frames": frames, "episode_return": returns,
                  "episode_length": 100}).to_csv(path, index=False)


def test_a_saved_run_shows_each_iterations_mean_and_marks_the_partial_one(tmp_path):
    run = SuiteRun("Breakout", "impala", 1, 10_000_000, tmp_path / "runs", tmp_path / "results")
    assert iteration_line(run, 0) is None
    # an episode ending exactly at 1M belongs to the first iteration, as in Dopamine's
    write_episodes(run.state_dir / "episodes-0.csv", [400_000, 1_000_000, 1_000_001, 2_300_000],
                   [1.0, 3.0, 10.0, 21.0])
    assert iteration_line(run, 2_400_000) == "1M 2.0 | 2M 10.0 | 3M 21.0 (so far)"
    # the run directory is newer than the saved state, and a finished run's file newest
    write_episodes(run.run_dir / "episodes-0.csv", [500_000, 3_000_000], [4.0, 30.0])
    assert iteration_line(run, 3_000_000) == "1M 4.0 | 3M 30.0"
    write_episodes(run.results / "episodes" / f"{run.run_id}.csv", [900_000], [7.0])
    assert iteration_line(run, 1_000_000) == "1M 7.0"


def test_returns_show_as_on_the_suites_page_tenths_only_below_100(tmp_path):
    run = SuiteRun("BattleZone", "impala", 1, 10_000_000, tmp_path / "runs", tmp_path / "results")
    write_episodes(run.run_dir / "episodes-0.csv", [500_000, 1_500_000], [2687.8, -18.55])
    assert iteration_line(run, 2_000_000) == "1M 2,688 | 2M -18.6"


def suite_status(games: str, logdir="/nonexistent", results="/nonexistent"
                 ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "suite.py"), f"--games={games}",
                           "--status", f"--logdir={logdir}", f"--results={results}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_a_suite_name_in_a_list_is_expanded_and_a_misspelt_game_refused():
    listed = suite_status("atari5,Breakout,Qbert")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[2] for line in listed.stdout.splitlines()] == [
        "impala-battlezone-v5-s1:", "impala-doubledunk-v5-s1:", "impala-namethisgame-v5-s1:",
        "impala-phoenix-v5-s1:", "impala-qbert-v5-s1:", "impala-breakout-v5-s1:"]
    refused = suite_status("Pong,Qbret")
    assert refused.returncode == 2 and "no ALE game 'Qbret'" in refused.stderr


def test_status_shows_a_run_training_before_its_first_checkpoint_as_started(tmp_path):
    run = SuiteRun("Pong", "impala", 1, 10_000_000, tmp_path / "runs", tmp_path / "results")
    write_episodes(run.run_dir / "episodes-0.csv", [300_000], [-20.0])
    pd.DataFrame({"frames": [200_000, 400_000]}).to_csv(run.run_dir / "logs.csv", index=False)
    out = suite_status("Pong", run.run_dir.parent, run.results)
    assert out.returncode == 0, out.stderr
    assert f"impala-pong-v5-s1: at 0.40M frames in {run.run_dir}, no checkpoint yet" in out.stdout
    assert "1M -20.0 (so far)" in out.stdout, out.stdout


def test_a_run_that_ended_no_episode_is_not_recorded_and_keeps_its_state(tmp_path):
    """A trial already at its last frame with no ended episode has no score: the suite says
    so, exits 1 and keeps the state a longer run would resume from, instead of crashing."""
    run = SuiteRun("Pong", "impala", 1, 48_000, tmp_path / "runs", tmp_path / "results",
                   trial="ent0.001", until=12_000)
    write_episodes(run.run_dir / "episodes-0.csv", [12_800], [-21.0])  # after its last frame
    pd.DataFrame({"frames": [6_000, 12_800], "interval_s": [1.0, 1.0]}).to_csv(
        run.run_dir / "logs.csv", index=False)
    run.state_dir.mkdir(parents=True)
    (run.state_dir / "checkpoint.pt").write_bytes(b"the state a resume needs")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "suite.py"), "--games=Pong",
                           "--frames=48000", "--trial=ent0.001", "--until=12000",
                           f"--logdir={run.logdir}", f"--results={run.results}", "--",
                           "--entropy_cost=0.001"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("impala-pong-v5-s1-ent0.001: no episode ended in its 12,000 frames" in done.stderr
            and "run the same command again" in done.stderr), done.stderr
    assert "Traceback" not in done.stderr
    assert not (run.results / "runs.csv").exists()
    assert (run.state_dir / "checkpoint.pt").read_bytes() == b"the state a resume needs"


def test_a_recorded_pong_row_carries_its_threshold_frames_and_passes_the_tables_check(
        tmp_path, monkeypatch):
    """The suite writes the columns `results/redraw.py --check` recomputes from the
    episodes: a Pong row that reached -15 must say where, or `make results` refuses it."""
    run = SuiteRun("Pong", "impala", 1, 100_000, tmp_path / "runs", tmp_path / "results")
    # 29 games at -21, then games at -14: the mean of the last 30 first meets -15 at the
    # 26th of those (26 * 7 = 182 points above 30 games at -21 reach the 180 needed; 25 do not)
    frames = [1_000 * (i + 1) for i in range(80)]
    returns = [-21.0] * 29 + [-14.0] * 51
    write_episodes(run.run_dir / "episodes-0.csv", frames, returns)
    pd.DataFrame({"frames": [50_000, 100_000], "interval_s": [1.0, 1.0]}).to_csv(
        run.run_dir / "logs.csv", index=False)
    record_row(run, [])
    row = pd.read_csv(run.results / "runs.csv").iloc[0]
    assert row["frames_to_minus15"] == frames[29 + 25]
    assert pd.isna(row["frames_to_plus18"]) and row["last_episode_frames"] == 80_000
    monkeypatch.setattr(redraw, "EPISODES", run.results / "episodes")
    assert redraw.disagreements(pd.read_csv(run.results / "runs.csv")) == []
