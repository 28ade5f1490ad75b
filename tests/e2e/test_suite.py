"""bench/suite.py, CI-sized: two games under the ALE v5 protocol for a few thousand frames,
stopped midway, its run directories lost as on a new machine, resumed from the saved state,
finished as two rows of runs.csv with their episodes, and skipped when run again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pandas as pd
import pytest

from results import scores
from tests.faults import text_of
from tests.helpers import ROOT, free_port, read_csv, wait_for

pytestmark = pytest.mark.slow
SUITE = str(ROOT / "bench" / "suite.py")
FRAMES = 12_000


def suite(tmp_path, *more: str, games: str = "Pong,Breakout") -> list[str]:
    return [sys.executable, SUITE, f"--games={games}", f"--frames={FRAMES}",
            f"--logdir={tmp_path / 'runs'}", f"--results={tmp_path / 'results'}",
            f"--port={free_port()}", *more, "--", "--num_actors=1", "--num_envs=2",
            "--checkpoint_interval_s=2"]


def has_an_episode(state) -> bool:
    """A saved state with its checkpoint, logs and at least one ended episode."""
    return ((state / "checkpoint.pt").exists() and (state / "logs.csv").exists()
            and read_csv(state / "episodes-0.csv") is not None)


def test_the_suite_stops_resumes_on_a_new_machine_records_and_skips(tmp_path):
    """Breakout goes first and is stopped: its episodes are short, so a stop anywhere
    after its first ended episode leaves it a score, however late the stop comes."""
    games = "Breakout,Pong"
    state = tmp_path / "results" / "suite-state" / "impala-breakout-v5-s1"
    out = tmp_path / "first.out"
    with open(out, "w") as log:
        first = subprocess.Popen(suite(tmp_path, games=games), stdout=log,
                                 stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_for(lambda: has_an_episode(state), 180, "Breakout's first saved state")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0
    finally:
        if first.poll() is None:
            first.kill()
    assert "impala-breakout-v5-s1: stopped at" in text_of(out)
    subprocess.run(["rm", "-rf", str(tmp_path / "runs")], check=True)  # a new machine
    second = subprocess.run(suite(tmp_path, games=games), capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "impala-breakout-v5-s1: restored from" in second.stdout
    runs = pd.read_csv(tmp_path / "results" / "runs.csv")
    assert list(runs["id"]) == ["impala-breakout-v5-s1", "impala-pong-v5-s1"]
    assert list(runs["level"]) == ["ALE/Breakout-v5", "ALE/Pong-v5"]
    assert list(runs["resumes"]) == [1, 0] and set(runs["preset"]) == {"atari"}
    assert "1 of them with an empty replay" in runs["note"].iloc[0]
    assert "frames/s" in runs["note"].iloc[1]
    for run_id in runs["id"]:
        episodes = pd.read_csv(tmp_path / "results" / "episodes" / f"{run_id}.csv")
        assert episodes["frames"].is_monotonic_increasing and len(episodes) > 0
        kept = pd.read_csv(tmp_path / "results" / "learner-logs" / f"{run_id}.csv.gz")
        assert kept["frames"].iloc[-1] >= FRAMES and "trust_region_masked" in kept
    breakout = tmp_path / "runs" / "impala-breakout-v5-s1"
    assert pd.read_csv(breakout / "logs.csv")["frames"].iloc[-1] >= FRAMES
    assert not state.exists()
    page = scores.page(runs, lambda run_id: pd.read_csv(
        tmp_path / "results" / "episodes" / f"{run_id}.csv"))
    assert "| Pong | impala-pong-v5-s1 |" in page and "| Breakout |" in page
    third = subprocess.run(suite(tmp_path, games=games), capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
    assert third.stdout.count("finished, skipped") == 2, third.stdout
    status = subprocess.run(suite(tmp_path, "--status", games=games), capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    assert status.stdout.count("finished (a row in runs.csv)") == 2
    assert status.stdout.count("mean return per 1M frames: 1M ") == 2, status.stdout


def test_a_trial_keeps_the_suites_schedule_stops_at_its_frame_and_is_recorded_apart(tmp_path):
    """A trial (other flags, stopped early) trains on the learning-rate schedule of the full
    budget, stops at --until, and becomes a `suite-trial` row with its flags, which the
    suite's page shows beside the defaults."""
    until = FRAMES
    trial = [*suite(tmp_path, "--games=Pong", f"--frames={4 * FRAMES}", "--trial=ent0.001",
                    f"--until={until}"), "--entropy_cost=0.001"]
    trial.remove(f"--frames={FRAMES}")
    done = subprocess.run(trial, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = pd.read_csv(tmp_path / "results" / "runs.csv")
    assert list(runs["id"]) == ["impala-pong-v5-s1-ent0.001"]
    row = runs.iloc[0]
    assert row["figure"] == "suite-trial" and "--entropy_cost=0.001" in row["flags"]
    assert row["note"].startswith(f"a trial, stopped at {until / 1e6:g}M frames")
    logs = pd.read_csv(tmp_path / "runs" / "impala-pong-v5-s1-ent0.001" / "logs.csv")
    assert until <= logs["frames"].iloc[-1] < 4 * FRAMES
    # 0.8 of the 48K-frame schedule is still at the full rate; a 12K schedule would not be
    assert logs["learning_rate"].iloc[-1] == pytest.approx(0.0012)
    again = subprocess.run(trial, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "finished, skipped" in again.stdout


def test_a_state_saved_under_other_preset_values_is_not_resumed_and_the_other_games_go_on(
        tmp_path):
    """A run's saved state trained with values the preset no longer has (here: before the
    entropy floor) would make the defaults' row a mixture of two versions of the
    defaults: the suite leaves it untouched, says which values differ and what to do, and
    trains the other games."""
    from impala.presets import config_from_flags, preset_values

    state = tmp_path / "results" / "suite-state" / "impala-pong-v5-s1"
    state.mkdir(parents=True)
    then = {name: value for name, value in preset_values(config_from_flags(
        {"level_name": "ALE/Pong-v5"})).items() if not name.startswith("entropy_floor")}
    (state / "meta.json").write_text(json.dumps({"preset_values": then}))
    (state / "checkpoint.pt").write_bytes(b"a checkpoint of the older defaults")
    done = subprocess.run(suite(tmp_path), capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert ("impala-pong-v5-s1: not resumed" in done.stderr
            and "entropy_floor: unset then, 0.8 now" in done.stderr), done.stderr
    assert list(pd.read_csv(tmp_path / "results" / "runs.csv")["id"]) == [
        "impala-breakout-v5-s1"]
    assert (state / "checkpoint.pt").read_bytes() == b"a checkpoint of the older defaults"
    assert not (tmp_path / "runs" / "impala-pong-v5-s1").exists()


@pytest.mark.parametrize("flags, error", [
    (["--trial=ent0.001"], "--trial needs the flags it tries"),
    (["--until=1000"], "--until stops a trial early"),
    (["--trial=a b", "--", "--entropy_cost=0.001"], "use letters, digits"),
])
def test_a_trial_without_its_flags_or_an_until_without_a_trial_is_refused(flags, error):
    done = subprocess.run([sys.executable, SUITE, "--status", *flags], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and error in done.stderr
