"""Run one process of a cluster under supervision: its own process group, its output to the
terminal (a tmux pane) and to a log file, its pid and start time in a pidfile, signals
passed on, and (with --restart) started again when it exits, by the rule of
impala/supervision.py.

  python -m impala.launcher.logged --pidfile P [--log L] [--restart=always --restart_limit=5
      --restart_window_s=300] [--report_down] [--end_run RUN_DIR] -- command args...
  python -m impala.launcher.logged --stop P [--grace_s 20]   # end exactly that group
  python -m impala.launcher.logged --status P [--log L]      # state + last log line

The files it keeps (pidfile and state) and reading them back: impala/launcher/processes.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from impala.launcher.processes import (
    describe,
    group_alive,
    last_line,
    read_state,
    start_ticks,
    state_path,
    stop,
    supervisor_alive,
)
from impala.process import DOWN_REASON_VARIABLE
from impala.signals import act_on_signals
from impala.supervision import LEFT_DOWN_STATUS, RestartPolicy

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
DOWN_REPORT_TIMEOUT_S = 60.0


class Supervisor:
    """Starts the command, copies its output, and restarts it as `policy` says."""

    def __init__(self, pidfile: Path, log: Path | None, command: list[str],
                 policy: RestartPolicy | None, report_down: bool,
                 end_run_dir: Path | None = None) -> None:
        self.pidfile, self.log, self.command = pidfile, log, command
        self.policy, self.report_down = policy, report_down
        self.end_run_dir = end_run_dir
        self.stopping = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.log_file = None
        self.state = {"supervisor": [os.getpid(), start_ticks(os.getpid())], "restarts": 0,
                      "state": "running", "reason": "", "status": None}

    def write_state(self, **changes) -> None:
        self.state.update(changes)
        path = state_path(self.pidfile)
        path.with_name(path.name + ".tmp").write_text(json.dumps(self.state) + "\n")
        os.replace(path.with_name(path.name + ".tmp"), path)

    def say(self, text: str) -> None:
        """A line of the supervisor's own, to the pane and the log."""
        self.write(f"\n[{time.strftime('%H:%M:%S')}] {text}\n".encode())

    def write(self, chunk: bytes) -> None:
        for sink in (sys.stdout.buffer, self.log_file):
            if sink is None:
                continue
            try:
                sink.write(chunk)
                sink.flush()
            except (OSError, ValueError):
                pass  # the terminal went away; the log still gets everything

    def forward(self, signum: int) -> None:
        """A stop request (SIGUSR1 asks learners to stop, through mpirun): pass it on,
        and start nothing again."""
        self.stopping.set()
        # A closed terminal or ssh session (SIGHUP) ends the process like a stop does.
        sent = signal.SIGTERM if signum == signal.SIGHUP else signum
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sent)
            except ProcessLookupError:
                pass

    def run_once(self, command: list[str]) -> int:
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "IMPALA_RESTARTS": str(self.state["restarts"])}
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.pidfile.write_text(f"{self.proc.pid} {start_ticks(self.proc.pid)}\n")
        if self.stopping.is_set():  # a stop that came while it was being started
            os.killpg(self.proc.pid, signal.SIGTERM)
        threading.Thread(target=end_group_after, args=(self.proc,), daemon=True).start()
        while chunk := self.proc.stdout.read1(65536):
            self.write(chunk)
        code = self.proc.wait()
        self.say(f"exited with status {code}")
        return code

    def run(self) -> int:
        act_on_signals(FORWARDED, self.forward)
        while True:
            self.write_state(state="running")
            code = self.run_once(self.command)
            if self.stopping.is_set():
                return self.stopped(code)
            if self.policy is None:
                self.write_state(state="finished", status=code)
                return code
            decision = self.policy.after_exit(code, time.time())
            if not decision.restart:
                status = self.leave(code, decision.reason)
                if self.end_run_dir is not None:
                    self.end_run()
                return status
            self.write_state(state="restarting", status=code, restarts=self.policy.restarts)
            self.say(f"restart {self.policy.restarts} in {decision.delay_s:g} s")
            if self.stopping.wait(decision.delay_s):
                return self.stopped(code)

    def stopped(self, code: int) -> int:
        """A stop that was asked for is a clean end, whatever the process's status: exit 0,
        so a supervisor above this one (the local end of an ssh session, which restarts on
        failure) starts nothing again when a remote stop came first."""
        self.write_state(state="stopped", status=code)
        return 0

    def leave(self, code: int, reason: str) -> int:
        """Done for good: finished (status 0 where that ends it), or left down."""
        if reason == "finished":
            self.write_state(state="finished", status=code)
            return code
        self.write_state(state="down", status=code, reason=reason)
        self.say(f"left down: {reason}")
        if self.report_down:
            self.tell_peer(reason)
        return LEFT_DOWN_STATUS

    def end_run(self) -> None:
        """The learners ended by themselves: stop the rest of the run (its actors, its tmux
        session), so a detached run ends whole. A stop that comes meanwhile (a frontend
        in the foreground ending the same run) does not cut it short."""
        ending = subprocess.Popen(
            [sys.executable, "-m", "impala.launcher.control", "--end_actors",
             str(self.end_run_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        output, _ = ending.communicate()
        self.write(output)

    def tell_peer(self, reason: str) -> None:
        """Run the command once more with the reason in DOWN_REASON_VARIABLE: an actor so
        started tells its learner why it is gone, then exits."""
        env = {**os.environ, DOWN_REASON_VARIABLE: reason}
        try:
            self.proc = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=env)
            output, _ = self.proc.communicate(timeout=DOWN_REPORT_TIMEOUT_S)
            self.write(output)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def end_group_after(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Once the process exits, end what it left in its group (a child still holding its
    output open, say): SIGTERM, then SIGKILL after `grace_s`. Only then can a restart
    follow, and no orphan of the run outlives it."""
    proc.wait()
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            return
        deadline = time.time() + grace_s
        while time.time() < deadline and group_alive(proc.pid):
            time.sleep(0.1)


def run(pidfile: Path, log: Path | None, command: list[str],
        policy: RestartPolicy | None = None, report_down: bool = False,
        end_run_dir: Path | None = None) -> int:
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    earlier = read_state(pidfile)
    if supervisor_alive(earlier) and earlier["supervisor"][0] != os.getpid():
        # A supervisor of the same process that outlived its connection (an ssh session
        # cut off and started again): end it, so the process never runs twice.
        stop(pidfile, grace_s=20.0)
    supervisor = Supervisor(pidfile, log, command, policy, report_down, end_run_dir)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        supervisor.log_file = open(log, "ab")  # noqa: SIM115 - closed below
    try:
        return supervisor.run()
    finally:
        if supervisor.log_file is not None:
            supervisor.log_file.close()


def policy_of(args: argparse.Namespace) -> RestartPolicy | None:
    if args.restart == "never":
        return None
    return RestartPolicy(args.restart_limit, args.restart_window_s or float("inf"),
                         restart_on_success=args.restart == "always")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m impala.launcher.logged")
    parser.add_argument("--pidfile", type=Path)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--restart", choices=("never", "always", "on-failure"),
                        default="never", help="start the command again when it exits: "
                        "whatever its status, or only when not 0")
    parser.add_argument("--restart_limit", type=int, default=5,
                        help="leave it down after this many restarts within the window")
    parser.add_argument("--restart_window_s", type=float, default=0.0,
                        help="seconds the restarts are counted over (0: the whole run)")
    parser.add_argument("--report_down", action="store_true",
                        help=f"when left down, run the command once more with "
                        f"{DOWN_REASON_VARIABLE}=why (an actor then tells its learner)")
    parser.add_argument("--end_run", type=Path, metavar="RUN_DIR",
                        help="when done for good, stop the rest of the run recorded there "
                        "(the learners' supervisor: their actors and tmux session)")
    parser.add_argument("--stop", type=Path, help="pidfile of the group to end")
    parser.add_argument("--status", type=Path, help="pidfile to report on")
    parser.add_argument("--grace_s", type=float, default=20.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.stop:
        print(stop(args.stop, args.grace_s))
        return 0
    if args.status:
        print(f"{describe(args.status)}\t{last_line(args.log)}")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.pidfile or not command:
        parser.error("--pidfile and a command after -- are needed")
    return run(args.pidfile, args.log, command, policy_of(args), args.report_down,
               args.end_run)


if __name__ == "__main__":
    sys.exit(main())
