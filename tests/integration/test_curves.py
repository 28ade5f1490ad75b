"""Pictures of learning: curve.png of a run directory, and runs overlaid into one PNG."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from impala.curves import main, plot_run, running_minutes
from impala.logs import EPISODE_COLUMNS, LOG_COLUMNS, CsvLog
from impala.plotter import CurvePlotter
from tests.helpers import ROOT, pid_alive, wait_for


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def fake_run(run_dir: Path, rows: int, start_return: float) -> Path:
    """A run directory written by the learner's own writers."""
    run_dir.mkdir(parents=True)
    logs = CsvLog(run_dir / "logs.csv", LOG_COLUMNS)
    episodes = CsvLog(run_dir / "episodes-0.csv", EPISODE_COLUMNS)
    for i in range(rows):
        frames = (i + 1) * 10_000
        logs.write({"time": 1000.0 + 5 * i, "frames": frames, "sps": 1000 + i, "updates": i,
                    "episodes": 2, "total_loss": 10.0 - i, "pg_loss": -1.0 + 0.1 * i,
                    "baseline_loss": 5.0, "entropy": 1.79 - 0.01 * i})
        for k in range(2):
            episodes.write({"time": 1000.0 + 5 * i + k, "frames": frames,
                            "episode_return": start_return + i + np.sin(k),
                            "episode_length": 800})
    logs.close()
    episodes.close()
    return run_dir


def test_a_run_gets_its_curve(tmp_path):
    run_dir = fake_run(tmp_path / "run", rows=40, start_return=-21)
    out = plot_run(run_dir)
    assert out == run_dir / "curve.png"
    width, height = png_size(out)
    assert width > 600 and height > 400


def test_the_time_a_run_was_stopped_is_not_counted_as_training():
    """A run stopped for two hours and resumed: its logs.csv spans 2h 10min, it trained 10."""
    before = [1000.0 + 5 * i for i in range(60)]  # 5 min of rows, then SIGTERM
    after = [before[-1] + 7200 + 5 * i for i in range(1, 61)]  # resumed 2 h later, 5 min more
    logs = pd.DataFrame({"time": before + after})
    minutes = running_minutes(logs, logs["time"])
    assert minutes[-1] == pytest.approx(10, abs=0.2)
    assert np.all(np.diff(minutes) >= 0)
    # An episode written after the last row before the stop, and one before the first row
    # after the resume, fall between the rows around them, not two hours off.
    episodes = pd.Series([before[-1] + 2, after[0] - 2])
    assert np.all(np.abs(running_minutes(logs, episodes) - minutes[59]) < 0.2)


def test_the_spans_rows_carry_count_the_first_row_and_leave_out_a_stop():
    """Rows with `interval_s`: the first row came 10 s after the start (on a GPU machine Pong
    makes 150K frames before it), and a 2-hour stop falls between two rows."""
    before = [1010.0 + 10 * i for i in range(6)]  # trained from 1000 s to 1060 s
    after = [before[-1] + 7200 + 10 * i for i in range(1, 4)]  # resumed, 30 s more
    logs = pd.DataFrame({"time": before + after, "interval_s": [10.0] * 9})
    minutes = running_minutes(logs, logs["time"])
    assert minutes == pytest.approx([(10 + 10 * i) / 60 for i in range(9)])
    # An episode 4 s into training, one written during the stop, one 5 s after the resume.
    episodes = pd.Series([1004.0, before[-1] + 60, after[0] - 5])
    assert running_minutes(logs, episodes) == pytest.approx([4 / 60, 1.0, 65 / 60])


def test_rows_as_far_apart_as_the_log_interval_asks_are_not_stops():
    logs = pd.DataFrame({"time": [1000.0 + 600 * i for i in range(10)]})  # --log_interval_s=600
    assert running_minutes(logs, logs["time"])[-1] == pytest.approx(90)


def test_no_rows_yet_draws_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    assert plot_run(tmp_path / "empty") is None


def test_the_watcher_redraws_after_a_new_row_and_the_close_draws_the_last(tmp_path):
    run_dir = fake_run(tmp_path / "run", rows=5, start_return=0)
    plotter = CurvePlotter(run_dir, max_cpu_share=0.5)  # the default waits ~50x a drawing
    plotter.start()
    try:
        wait_for(lambda: (run_dir / "curve.png").exists(), 60, "the watcher's first picture")
        first = (run_dir / "curve.png").stat().st_mtime_ns
        with open(run_dir / "logs.csv", "a") as logs:  # a new row, as the learner writes it
            logs.write("1100.0,60000,1000\n")
        wait_for(lambda: (run_dir / "curve.png").stat().st_mtime_ns != first, 30,
                 "a redraw after the new row")
        # The watcher is a session of its own that runs only on otherwise idle CPU.
        assert os.getsid(plotter.proc.pid) == plotter.proc.pid
        assert os.sched_getscheduler(plotter.proc.pid) == os.SCHED_IDLE
    finally:
        plotter.close()
    assert plotter.proc.poll() is not None
    png_size(run_dir / "curve.png")
    assert not list(run_dir.glob("*.tmp.png"))


def test_the_watcher_does_not_outlive_its_learner(tmp_path):
    run_dir = fake_run(tmp_path / "run", rows=3, start_return=0)
    parent = ("import sys; from pathlib import Path; from impala.plotter import CurvePlotter; "
              "p = CurvePlotter(Path(sys.argv[1])); p.start(); print(p.proc.pid)")
    out = subprocess.run([sys.executable, "-c", parent, str(run_dir)], capture_output=True,
                         text=True, timeout=60, check=True, cwd=ROOT)
    watcher = int(out.stdout)
    wait_for(lambda: not pid_alive(watcher), 30, "the orphaned watcher to exit")


def test_runs_are_overlaid_by_the_command(tmp_path, capsys):
    runs = [fake_run(tmp_path / name, rows=20, start_return=r)
            for name, r in (("a", -21), ("b", -5))]
    out = tmp_path / "compare.png"
    assert main([*map(str, runs), f"--out={out}"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    png_size(out)


def test_the_command_names_a_directory_that_is_not_a_run(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path)])
    assert f"not a run directory (no logs.csv): {tmp_path}" in capsys.readouterr().err


def test_kept_episodes_files_are_overlaid_beside_run_directories(tmp_path, capsys):
    """results/episodes/ keeps only episodes CSVs; they overlay with minutes from their
    start, with or without an algorithm's tag columns after the shared ones."""
    run = fake_run(tmp_path / "run", rows=20, start_return=-21)
    kept = tmp_path / "pong_X_episodes.csv"
    kept.write_text((fake_run(tmp_path / "old", rows=20, start_return=-5)
                     / "episodes-0.csv").read_text())
    out = tmp_path / "compare.png"
    assert main([str(kept), str(run), f"--out={out}"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    png_size(out)
    not_episodes = tmp_path / "other.csv"
    not_episodes.write_text("a,b\n1,2\n")
    with pytest.raises(SystemExit):
        main([str(not_episodes), f"--out={out}"])
    assert (f"nor an episodes CSV (columns time, frames, episode_return, episode_length): "
            f"{not_episodes}") in capsys.readouterr().err
    tagged = tmp_path / "tagged.csv"  # an algorithm's episode tags follow the shared columns
    tagged.write_text("time,frames,episode_return,episode_length,epsilon\n1,10,-21,800,0.4\n")
    assert main([str(tagged), f"--out={out}"]) == 0
