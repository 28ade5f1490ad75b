"""Faults injected into a running cluster, and what a run that survived them must show.
Shared by the CSV (tests/e2e/test_faults.py) and Slurm fault tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from tests.frontend import FRONTEND, frontend
from tests.helpers import ROOT, last_value, read_csv, wait_for


@contextlib.contextmanager
def foreground_run(out_path: Path, flags: list[str]) -> Iterator[subprocess.Popen]:
    """The frontend in the foreground, as a user runs it (its output to `out_path`); a
    test that fails midway stops the whole run, so no later run meets its processes."""
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, FRONTEND, *flags], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            frontend(*flags, "--stop", timeout=200)
            proc.kill()
            proc.wait()


def text_of(path: Path) -> str:
    """A file's text, or "" before it is written."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def pid_in(pidfile: Path) -> int:
    return int(pidfile.read_text().split()[0])


def learner_rank_pid(run_dir: Path, rank: int) -> int:
    """The pid of learner `rank` of the run in `run_dir`, from its environment (mpirun's
    OMPI_COMM_WORLD_RANK)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--job_name=learner" in cmdline and \
                any(str(run_dir.parent).encode() in part for part in cmdline) and \
                f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(proc.name)
    raise AssertionError(f"no learner rank {rank} of {run_dir} is running")


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def wait_past(run_dir: Path, frames: int, timeout: float = 180) -> None:
    wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > frames, timeout,
             f"training past {frames} frames")


def assert_one_series(run_dir: Path) -> pd.DataFrame:
    """logs.csv and the episodes' frames never went back."""
    logs = read_csv(run_dir / "logs.csv")
    assert logs is not None and logs["frames"].is_monotonic_increasing, logs["frames"].tolist()
    episodes = read_csv(run_dir / "episodes-0.csv")
    assert episodes["frames"].is_monotonic_increasing
    return logs


def assert_one_series_to_the_budget(run_dir: Path, budget: int) -> pd.DataFrame:
    """logs.csv reached the budget and its frames, and its episodes', never went back."""
    logs = assert_one_series(run_dir)
    assert logs["frames"].iloc[-1] >= budget, logs.tail()
    return logs
