"""Where the suite's time goes: with IMPALA_TEST_TIMES=path, each test's wall seconds and
the CPU seconds of pytest plus the processes it started and waited for go to a CSV.

A test whose CPU is far below twice its wall time (2 cores) mostly waits (mpirun's grace,
sshd). Processes that tmux or sshd started are not counted: the frontend's tests read low.
Run `IMPALA_TEST_TIMES=times.csv make test` to find where the minutes go.
"""

from __future__ import annotations

import csv
import os
import resource
import time

import pytest

TIMES_PATH = os.environ.get("IMPALA_TEST_TIMES")


def _cpu_seconds() -> float:
    mine = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not TIMES_PATH:
        yield
        return
    wall, cpu = time.monotonic(), _cpu_seconds()
    yield
    wall, cpu = time.monotonic() - wall, _cpu_seconds() - cpu
    new = not os.path.exists(TIMES_PATH)
    with open(TIMES_PATH, "a", newline="") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(["test", "wall_s", "cpu_s"])
        writer.writerow([item.nodeid, f"{wall:.2f}", f"{cpu:.2f}"])
