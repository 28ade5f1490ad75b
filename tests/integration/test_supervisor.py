"""impala.launcher.logged as a supervisor of real processes: restarts with backoff, leaves a
process that keeps exiting down with its reason, reports that once through the command, and
a stop reaches the supervisor, so nothing is started again after it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from impala.launcher import processes
from tests.helpers import wait_for


def supervise(tmp_path, script: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "impala.launcher.logged", "--pidfile", str(tmp_path / "p.pid"),
         "--log", str(tmp_path / "p.log"), *flags, "--", "sh", "-c", script],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)


def test_a_process_that_keeps_exiting_is_left_down_and_reports_why(tmp_path):
    script = ('[ -n "$IMPALA_DOWN_REASON" ] && { echo "report: $IMPALA_DOWN_REASON"; exit 0; }'
              '; echo "start $IMPALA_RESTARTS"; exit 3')
    proc = supervise(tmp_path, script, "--restart=always", "--restart_limit=2",
                     "--restart_window_s=60", "--report_down")
    assert proc.wait(timeout=30) == 86
    log = (tmp_path / "p.log").read_text()
    assert [line for line in log.splitlines() if line.startswith("start")] == \
        ["start 0", "start 1", "start 2"]
    assert "restart 1 in 1 s" in log and "restart 2 in 2 s" in log
    assert "report: exited 3 times within 60 s (last status 3); restart limit 2" in log
    state = json.loads((tmp_path / "p.pid.state").read_text())
    assert state["state"] == "down" and state["restarts"] == 2
    assert processes.describe(tmp_path / "p.pid").startswith("down: exited 3 times")


@pytest.fixture
def pidfile(tmp_path):
    """The supervised process's pidfile; whatever a failing test left running is stopped."""
    path = tmp_path / "p.pid"
    yield path
    processes.stop(path, grace_s=10)


def test_a_killed_process_is_restarted_and_a_stop_during_the_backoff_ends_it(tmp_path,
                                                                            pidfile):
    proc = supervise(tmp_path, "sleep 1000", "--restart=always")
    wait_for(lambda: processes.is_running(pidfile), 10, "the process")
    first = processes.read_pidfile(pidfile)[0]
    subprocess.run(["kill", "-9", str(first)], check=True)
    wait_for(lambda: processes.is_running(pidfile) and processes.read_pidfile(pidfile)[0] != first,
             10, "the process started again")
    assert processes.describe(pidfile) == "alive (restarted 1x)"
    second = processes.read_pidfile(pidfile)[0]
    subprocess.run(["kill", "-9", str(second)], check=True)
    wait_for(lambda: processes.describe(pidfile).startswith("restarting"), 5, "the backoff")
    assert processes.is_up(pidfile) and not processes.is_running(pidfile)
    assert processes.stop(pidfile, grace_s=10) == "stopped"
    assert proc.wait(timeout=10) != 86
    time.sleep(2.5)  # past the backoff: nothing may have been started again
    assert not processes.is_up(pidfile) and processes.read_pidfile(pidfile)[0] == second
    assert processes.describe(pidfile).startswith("stopped")


def test_a_learner_group_that_finishes_is_not_started_again(tmp_path):
    proc = supervise(tmp_path, "exit 0", "--restart=on-failure", "--restart_limit=3")
    assert proc.wait(timeout=10) == 0
    assert "restart" not in (tmp_path / "p.log").read_text()
    assert processes.describe(tmp_path / "p.pid") == "finished (status 0)"


def test_a_new_supervisor_of_the_same_process_ends_the_one_left_behind(tmp_path, pidfile):
    """An ssh session cut off and started again: the supervisor it left on the host is
    ended first, so the process never runs twice."""
    old = supervise(tmp_path, "sleep 1000", "--restart=always")
    wait_for(lambda: processes.is_running(pidfile), 10, "the first process")
    first = processes.read_pidfile(pidfile)[0]
    new = supervise(tmp_path, "sleep 1000", "--restart=always")
    assert old.wait(timeout=30) is not None
    wait_for(lambda: processes.is_running(pidfile) and processes.read_pidfile(pidfile)[0] != first,
             10, "the new process")
    assert subprocess.run(["kill", "-0", str(first)], capture_output=True).returncode != 0
    assert processes.stop(pidfile, grace_s=10) == "stopped"
    new.wait(timeout=10)


def test_a_stopped_supervisor_ends_cleanly_so_the_one_above_it_starts_nothing(tmp_path,
                                                                              pidfile):
    """The ssh layout: a supervisor that restarts on failure (the local end) runs one that
    always restarts (the remote end). A stop that reaches the inner one first ends both:
    the inner exits 0, whatever its process's status, so the outer does not restart it."""
    inner = [sys.executable, "-m", "impala.launcher.logged", "--pidfile", str(pidfile),
             "--restart=always", "--", "sleep", "1000"]
    outer = subprocess.Popen(
        [sys.executable, "-m", "impala.launcher.logged", "--pidfile",
         str(tmp_path / "outer.pid"), "--log", str(tmp_path / "outer.log"),
         "--restart=on-failure", "--", *inner],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: processes.is_running(pidfile), 10, "the inner process")
    assert processes.stop(pidfile, grace_s=10) == "stopped"
    assert outer.wait(timeout=15) == 0
    log = (tmp_path / "outer.log").read_text()
    assert "exited with status -15" in log and "exited with status 0" in log
    assert "restart" not in log
    assert processes.describe(tmp_path / "outer.pid") == "finished (status 0)"
