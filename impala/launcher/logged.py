"""Run one process of a cluster: its own process group, its output to the terminal (a tmux
pane) and to a log file, its pid and start time in a pidfile, signals passed on.

  python -m impala.launcher.logged --pidfile P [--log L] -- command args...
  python -m impala.launcher.logged --stop P [--grace_s 20]   # end exactly that group
  python -m impala.launcher.logged --status P [--log L]      # alive/dead + last log line

A pidfile holds "pid start_ticks": the start time (from /proc) tells a recycled pid from
ours, so a stop never hits another process that happens to get the same number.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
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
    recorded = read_pidfile(path)
    return recorded is not None and start_ticks(recorded[0]) == recorded[1]


def run(pidfile: Path, log: Path | None, command: list[str]) -> int:
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    log_file = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log, "ab")  # noqa: SIM115 - closed below
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    pidfile.write_text(f"{proc.pid} {start_ticks(proc.pid)}\n")

    def forward(signum: int, _frame) -> None:
        # A closed terminal or ssh session (SIGHUP) ends the process like a stop does.
        sent = signal.SIGTERM if signum == signal.SIGHUP else signum
        try:
            os.killpg(proc.pid, sent)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    out = sys.stdout.buffer
    while chunk := proc.stdout.read1(65536):
        for sink in (out, log_file):
            if sink is None:
                continue
            try:
                sink.write(chunk)
                sink.flush()
            except (OSError, ValueError):
                pass  # the terminal went away; the log still gets everything
    code = proc.wait()
    message = f"\n[{time.strftime('%H:%M:%S')}] exited with status {code}\n".encode()
    for sink in (out, log_file):
        try:
            if sink is not None:
                sink.write(message)
                sink.flush()
        except (OSError, ValueError):
            pass
    if log_file is not None:
        log_file.close()
    return code


def stop(pidfile: Path, grace_s: float, first_signal: int = signal.SIGTERM) -> str:
    """Send `first_signal` to the recorded process group, SIGKILL it after `grace_s`; say
    what happened."""
    recorded = read_pidfile(pidfile)
    if recorded is None:
        return "no pidfile"
    pid, ticks = recorded
    if start_ticks(pid) != ticks:
        return "not running"
    os.killpg(pid, first_signal)
    deadline = time.time() + grace_s
    while time.time() < deadline:
        if start_ticks(pid) != ticks and not _group_alive(pid):
            return "stopped"
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return "stopped"
    return "killed"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def last_line(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    with open(log, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
        lines = [line for line in f.read().decode(errors="replace").splitlines()
                 if line.strip()]
    return lines[-1][:200] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m impala.launcher.logged")
    parser.add_argument("--pidfile", type=Path)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--stop", type=Path, help="pidfile of the group to end")
    parser.add_argument("--status", type=Path, help="pidfile to report on")
    parser.add_argument("--grace_s", type=float, default=20.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.stop:
        print(stop(args.stop, args.grace_s))
        return 0
    if args.status:
        state = "alive" if is_running(args.status) else "dead"
        print(f"{state}\t{last_line(args.log)}")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.pidfile or not command:
        parser.error("--pidfile and a command after -- are needed")
    return run(args.pidfile, args.log, command)


if __name__ == "__main__":
    sys.exit(main())
