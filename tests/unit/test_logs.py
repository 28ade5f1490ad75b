"""Run-directory files: numbers written plainly and at full precision; the commit a run records."""

import subprocess

import numpy as np
import pandas as pd

from impala import logs
from impala.algorithm import StatusItem
from impala.logs import CsvLog
from impala.meta import git_state, redact


def test_numpy_scalars_are_written_as_plain_numbers(tmp_path):
    log = CsvLog(tmp_path / "x.csv", ["a", "b", "c", "d"])
    log.write({"a": np.float64(0.1) + np.float64(0.2), "b": np.int64(3), "c": None,
               "d": 1 / 3})
    log.close()
    frame = pd.read_csv(tmp_path / "x.csv")
    assert frame["a"][0] == 0.1 + 0.2  # repr keeps every bit
    assert frame["b"][0] == 3 and np.isnan(frame["c"][0]) and frame["d"][0] == 1 / 3


def test_secrets_are_never_stored():
    flags = {"ssh_password": "hunter2", "api_token": "x", "batch_size": 32}
    assert redact(flags) == {"batch_size": 32}


def test_a_resumed_run_appends_under_the_header_already_there(tmp_path):
    """A run started by an older version with fewer columns: rows never shift."""
    old = CsvLog(tmp_path / "logs.csv", ["time", "frames"])
    old.write({"time": 1.0, "frames": 10})
    old.close()
    new = CsvLog(tmp_path / "logs.csv", ["time", "frames", "stream_restarts"])
    new.write({"time": 2.0, "frames": 20, "stream_restarts": 5})
    new.close()
    frame = pd.read_csv(tmp_path / "logs.csv")
    assert list(frame.columns) == ["time", "frames"]
    assert frame["frames"].tolist() == [10, 20]


def test_log_files_end_their_lines_as_pandas_does(tmp_path):
    """One line end ("\\n") for the files a run writes and those pandas writes beside them in
    results/, also after a restarted learner trims rows; else a copy shows as all changed."""
    log = CsvLog(tmp_path / "episodes-0.csv", ["frames", "episode_return"])
    for frames in (100, 200, 300):
        log.write({"frames": frames, "episode_return": 1.0})
    log.close()
    assert (tmp_path / "episodes-0.csv").read_bytes().count(b"\n") == 4
    assert b"\r" not in (tmp_path / "episodes-0.csv").read_bytes()
    assert logs.drop_rows_after(tmp_path / "episodes-0.csv", 200) == 1
    assert (tmp_path / "episodes-0.csv").read_bytes() == (
        b"frames,episode_return\n100,1.0\n200,1.0\n")


def test_the_status_line_reads_a_row_and_shows_what_is_missing_as_n_a():
    row = {"frames": 1_200_000.0, "sps": 1850.4, "mean_episode_return": -20.14,
           "episodes": 12.0, "policy_lag": 4.06, "total_loss": 3.21}
    line = logs.status_line(row, 10_000_000, elapsed_s=100.0, start_frames=200_000.0,
                            items=[StatusItem("loss", "total_loss")])
    # 1M frames in 100 s: the remaining 8.8M take 880 s.
    assert line == ("frames 1.20M/10.00M (12.0%) | ETA 14m40s | SPS 1,850 | return -20.1 "
                    "(12 eps) | lag 4.1 | loss 3.21")
    row["mean_episode_return"] = None
    assert "return n/a (12 eps)" in logs.status_line(row, 10_000_000, 0.0, 0.0)


def test_a_restarted_learner_removes_the_rows_written_after_its_checkpoint(tmp_path):
    """Rows past the checkpoint's frames go (they are trained again), so each file stays one
    series; a file without a frames column, or with nothing past it, is left as it is."""
    for name in ("logs.csv", "episodes-0.csv", "learner-0.csv"):
        (tmp_path / name).write_text("time,frames,x\n1,100,a\n2,200,b\n3,300,c\n4,400,d\n")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    learner_logs = logs.LearnerLogs(tmp_path, rank=0, resume_frames=200)
    learner_logs.run_row({"time": 5, "frames": 250, "sps": 1.0})
    learner_logs.close()
    frames = pd.read_csv(tmp_path / "logs.csv")["frames"].tolist()
    assert frames == [100, 200, 250]
    assert pd.read_csv(tmp_path / "episodes-0.csv")["frames"].tolist() == [100, 200]
    assert logs.drop_rows_after(tmp_path / "other.csv", 0) == 0
    assert logs.drop_rows_after(tmp_path / "learner-0.csv", 1000) == 0
    assert logs.drop_rows_after(tmp_path / "missing.csv", 0) == 0


def test_a_run_records_its_code_dirty_only_where_code_differs_from_the_commit(tmp_path):
    """Rows and saved states under results/ change while runs go on; they are not code."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    (tmp_path / "results").mkdir()
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "results" / "runs.csv").write_text("id\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    assert git_state(tmp_path)["git_dirty"] is False
    (tmp_path / "results" / "runs.csv").write_text("id\nrun-1\n")
    assert git_state(tmp_path)["git_dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    state = git_state(tmp_path)
    assert state["git_dirty"] is True and len(state["git_commit"]) == 40
