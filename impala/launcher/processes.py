"""The files a supervised process leaves (impala/launcher/logged.py writes them), read back:
whether it runs, restarts or was left down, its last log line, and how to end exactly it.

A pidfile holds "pid start_ticks" of the running process: the start time (from /proc)
tells a recycled pid from ours, so a stop never hits another process that happens to get
the same number. Beside it, `P.state` holds the supervisor's own pid and start time, its
state (running, restarting, down, finished, stopped), its restarts and why it left the
process down. A stop goes to the supervisor first, so nothing is restarted meanwhile.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has exited
        return None
    return int(fields[19])


def read_pidfile(path: Path) -> tuple[int, int] | None:
    try:
        pid, ticks = path.read_text().split()
        return int(pid), int(ticks)
    except (OSError, ValueError):
        return None


def is_running(path: Path) -> bool:
    """The supervised process itself is alive."""
    recorded = read_pidfile(path)
    return recorded is not None and start_ticks(recorded[0]) == recorded[1]


def state_path(pidfile: Path) -> Path:
    return pidfile.with_name(pidfile.name + ".state")


def read_state(pidfile: Path) -> dict:
    """The supervisor's record ({} where there is none, or it cannot be read)."""
    try:
        return json.loads(state_path(pidfile).read_text())
    except (OSError, ValueError):
        return {}


def supervisor_alive(state: dict) -> bool:
    pid, ticks = state.get("supervisor") or (0, 0)
    return bool(pid) and start_ticks(pid) == ticks


def is_up(pidfile: Path) -> bool:
    """The process runs, or its supervisor is about to start it again."""
    state = read_state(pidfile)
    return is_running(pidfile) or (supervisor_alive(state)
                                   and state.get("state") in ("running", "restarting"))


def stop(pidfile: Path, grace_s: float, first_signal: int = signal.SIGTERM) -> str:
    """Send `first_signal` to the supervisor (which passes it on and restarts nothing), or
    to the recorded process group where none supervises it; SIGKILL both after `grace_s`;
    say what happened."""
    state = read_state(pidfile)
    supervisor = state["supervisor"][0] if supervisor_alive(state) else None
    recorded = read_pidfile(pidfile)
    pid = recorded[0] if recorded and start_ticks(recorded[0]) == recorded[1] else None
    if supervisor is None and pid is None:
        return "no pidfile" if recorded is None and not state else "not running"
    if supervisor is not None:
        os.kill(supervisor, first_signal)
    else:
        os.killpg(pid, first_signal)
    deadline = time.time() + grace_s
    while time.time() < deadline:
        if not supervisor_alive(state) and not is_running(pidfile) \
                and not (recorded and group_alive(recorded[0])):
            return "stopped"
        time.sleep(0.2)
    for target in ([recorded[0]] if recorded else []):
        try:
            os.killpg(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if supervisor is not None and supervisor_alive(state):
        os.kill(supervisor, signal.SIGKILL)
    return "killed"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def describe(pidfile: Path) -> str:
    """alive, restarting, down (with why), or dead."""
    state = read_state(pidfile)
    if is_running(pidfile):
        restarts = state.get("restarts", 0)
        return f"alive{f' (restarted {restarts}x)' if restarts else ''}"
    if supervisor_alive(state) and state.get("state") == "restarting":
        return f"restarting (restart {state.get('restarts', 0)})"
    if state.get("state") == "down":
        return f"down: {state.get('reason', '')}"
    if state.get("state") in ("stopped", "finished"):
        return f"{state['state']} (status {state.get('status')})"
    return "dead"


def last_line(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    with open(log, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
        lines = [line for line in f.read().decode(errors="replace").splitlines()
                 if line.strip()]
    return lines[-1][:200] if lines else ""
