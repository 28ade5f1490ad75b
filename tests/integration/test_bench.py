"""bench/'s results files stay readable tables when a benchmark gains a column."""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from tests.helpers import ROOT

# Loaded from its file, so bench/ (env.py, learner.py, ...) is not put on every test's path.
_spec = importlib.util.spec_from_file_location("bench_common", ROOT / "bench" / "common.py")
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)


def test_a_new_column_rewrites_the_file_under_one_header(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.report("x", [{"a": 1, "b": 2.0}], ["a", "b"])
    common.report("x", [{"a": 3, "r": 1.0, "b": 4.0}], ["a", "r", "b"])
    table = pd.read_csv(tmp_path / "x.csv")
    assert list(table.columns)[-3:] == ["a", "b", "r"]
    assert table["a"].tolist() == [1, 3] and table["r"].isna().tolist() == [True, False]


def test_a_row_wider_than_its_header_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    (tmp_path / "x.csv").write_text("a,b\n1,2\n3,4,5\n")
    with pytest.raises(ValueError, match=r"x.csv: line 3 has 3 cells under a header of 2"):
        common.report("x", [{"a": 1, "b": 2}], ["a", "b"])


def test_a_file_with_only_its_header_gets_no_second_header(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    (tmp_path / "x.csv").write_text("date,commit,cores,cpu,a,b\n")
    common.report("x", [{"a": 1, "b": 2}], ["a", "b"])
    assert (tmp_path / "x.csv").read_text().count("date,") == 1


@pytest.mark.slow
def test_the_gpu_session_script_runs_a_pong_run_and_keeps_its_curve(tmp_path):
    """bench/gpu_session.sh, dry-run on the CPU: a value-based Pong run with the machine's
    defaults is cut at its minutes, and its table (with Q, not IMPALA's entropy) and files
    land in $OUT, as a GPU session would fetch them."""
    out, runs = tmp_path / "out", tmp_path / "runs"
    result = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_session.sh"), "pong", "1", "apex", "0.4", "--",
         "--num_envs=2"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "DEVICE": "cpu", "PYTHON": sys.executable, "OUT": str(out),
             "RUNS": str(runs)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| steps/s | q_value |" in result.stdout
    assert (out / "apex-1-logs.csv").exists() and (out / "apex-1-episodes-0.csv").exists()
    assert "| steps/s | q_value |" in (out / "pong-apex-1.log").read_text()
    # Mid-run, each thread's share of a core, by name: the learner's receiver and publisher,
    # ZeroMQ's I/O thread, and an actor's orphan watch.
    learner, actor = (thread_table(result.stdout, label) for label in ("rank 0", "started actor 0"))
    for thread in ("| main (", "| unroll-receiver |", "| publisher |", "| ZMQbg/IO/0 |"):
        assert thread in learner, result.stdout[-3000:]
    assert "| main (" in actor, result.stdout[-3000:]


@pytest.mark.slow
def test_the_gpu_session_script_runs_suites_at_once_and_brings_their_results_back(tmp_path):
    """bench/gpu_session.sh suite, dry-run on the CPU: two suites at once, one cut at the
    call's minutes (its state comes back to resume from) and one finished (its row and
    episodes come back, and the state it had before goes); `unpack` lays that into the
    results folder that is kept."""
    device, kept, out = (tmp_path / name for name in ("device", "kept", "out"))
    small = "-- --num_actors=1 --num_envs=2 --checkpoint_interval_s=2"
    for results in (device, kept):  # a Breakout run stopped before its first checkpoint
        (results / "suite-state" / "impala-breakout-v5-s1").mkdir(parents=True)
        (results / "suite-state" / "impala-breakout-v5-s1" / "suite.json").write_text(
            '{"commit": "abc", "resumes": 0, "resumes_without_replay": 0}')
    result = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_session.sh"), "suite", "3",
         f"--games=Pong {small}", f"--games=Breakout --frames=2000 {small}"],
        capture_output=True, text=True, timeout=400,
        env={**os.environ, "PYTHON": sys.executable, "OUT": str(out),
             "RUNS": str(tmp_path / "runs"), "SUITE_RESULTS": str(device)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (out / "suite-removed.txt").read_text() == "suite-state/impala-breakout-v5-s1\n"
    unpacked = subprocess.run(["bash", str(ROOT / "bench" / "gpu_session.sh"), "unpack",
                               str(out), str(kept)], capture_output=True, text=True, timeout=60)
    assert unpacked.returncode == 0, unpacked.stderr
    assert list(pd.read_csv(kept / "runs.csv")["id"]) == ["impala-breakout-v5-s1"]
    assert pd.read_csv(kept / "runs.csv")["commit"].iloc[0] == "abc"
    assert len(pd.read_csv(kept / "episodes" / "impala-breakout-v5-s1.csv")) > 0
    assert not (kept / "suite-state" / "impala-breakout-v5-s1").exists()
    pong = kept / "suite-state" / "impala-pong-v5-s1"
    assert {"checkpoint.pt", "logs.csv", "meta.json", "suite.json"} <= {
        path.name for path in pong.iterdir()}


def thread_table(output: str, label: str) -> str:
    """The rows bench/threads.py printed after `label: process ...` (the two samples run at
    once, so either may come first)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{label}: process "))
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines[start + 1:])
    return "\n".join(rows)


def test_a_run_cut_before_its_first_episode_still_prints_its_curve_rows(tmp_path):
    """A GPU session's table of a run stopped before any episode ended (a slow machine, a
    short cut): the rows with no mean yet, not a crash that loses the rest."""
    columns = "time,frames,sps,q_value\n"
    (tmp_path / "logs.csv").write_text(columns + "100.0,320,13.0,-0.003\n"
                                                 "130.0,4480,193.0,-0.011\n")
    result = subprocess.run(
        [sys.executable, "-c", "import sys, pathlib; sys.path.insert(0, 'bench'); "
         f"import pong_curve; pong_curve.print_curve(pathlib.Path({str(tmp_path)!r}), 5)"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "| 4,480 | 0.5 | n/a | 0 | 193 | -0.011 |" in result.stdout


def test_the_gpu_session_script_says_how_to_call_it():
    result = subprocess.run(["bash", str(ROOT / "bench" / "gpu_session.sh"), "pong"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "gpu_session.sh pong SEED" in result.stdout


@pytest.mark.slow
def test_the_ingest_bench_measures_a_learner_serving_weights_under_curve():
    """bench/ingest.py: one sender playing an actor against the learner's socket, receiver
    and weight serving, CURVE on and new weights 20 times a second; unrolls come in,
    weights go out, each thread's CPU per step is reported, nothing is dropped, and the
    launch probe beside the receiver reports its speed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "ingest.py"), "--seconds=2", "--senders=1",
         "--envs=2", "--auth", "curve", "--publish_hz", "20", "--io_threads", "2",
         "--launch_probe"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("algorithm=impala"))
    row = dict(cell.split("=") for cell in line.split(", "))
    assert row["auth"] == "curve" and row["io_threads"] == "2" and row["dropped"] == "0"
    for measured in ("steps_per_s", "weights_MB_per_s", "receiver_ms_per_step",
                     "zmq_ms_per_step", "probe_speed"):
        assert float(row[measured]) > 0, measured


def test_the_thread_sampler_names_a_log_that_is_not_there_yet(tmp_path):
    missing = tmp_path / "learner-0.log"
    result = subprocess.run([sys.executable, "bench/threads.py", "--pid_from", str(missing)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{missing}: cannot read it" in result.stderr
    missing.write_text("12:00:00 learner-0 INFO starting\n")
    result = subprocess.run([sys.executable, "bench/threads.py", "--pid_from", str(missing)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "no 'rank 0 (pid N)' in it yet" in result.stderr


def test_the_ale_vector_bench_compares_frames_and_costs():
    out = subprocess.run([sys.executable, "bench/ale_vector.py", "--envs=2", "--seconds=0.5",
                          "--rounds=1", "--compare_steps=50"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "frames, FIRE at reset off: 0 of 50 differ (largest pixel difference 0)" in out, out
    assert "frames, FIRE at reset on:" in out
    assert re.search(r"round 1: toolkit [0-9.]+ core-ms per agent step, AtariVectorEnv "
                     r"[0-9.]+ \([0-9.]+x\); forward pass [0-9.]+: the actor [0-9.]+ "
                     r"against [0-9.]+ \([0-9.]+x\)", out), out


def test_suites_writing_rows_at_once_lose_none(tmp_path):
    """bench/suite.py: a trial and the defaults run as two suites at once, and each adds its
    row to the same runs.csv; none of the rows is lost to the other's write."""
    writer = ("import sys; sys.path.insert(0, 'bench'); import pathlib, suite_records\n"
              "for i in range(25):\n"
              "    row = {'id': f'{sys.argv[2]}-{i}'}\n"
              "    suite_records.append_row(pathlib.Path(sys.argv[1]), row)\n")
    writers = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path / "runs.csv"),
                                 name], cwd=ROOT) for name in "abcd"]
    assert [w.wait(timeout=120) for w in writers] == [0] * 4
    ids = pd.read_csv(tmp_path / "runs.csv")["id"]
    assert sorted(ids) == sorted(f"{name}-{i}" for name in "abcd" for i in range(25))
