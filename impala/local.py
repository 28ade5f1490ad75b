"""`--job_name=local`: one learner in this process and `--num_actors` actor processes,
each restarted by a supervisor if it dies, for single-host runs and tests."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from impala.config import Config
from impala.cores import usable_cores
from impala.presets import to_argv
from impala.process import PARENT_PID_VARIABLE, name_os_thread
from impala.supervision import ACTOR_RESTART_LIMIT, ACTOR_RESTART_WINDOW_S, RestartPolicy

log = logging.getLogger("local")


def actor_command(cfg: Config, task: int) -> list[str]:
    """The command line of actor `task`, carrying every non-default flag of this run."""
    argv = to_argv(cfg, job_name="actor", task=task)
    return [sys.executable, "-m", "impala.cli", *argv]


class ActorSupervisor(threading.Thread):
    """Starts the actors, restarts any that dies (by impala/supervision.py's rule: with
    backoff, and left down after too many restarts), stops them all at the end.

    Actors get sessions of their own, so a Ctrl-C in the terminal reaches only the learner,
    which then stops them here: exactly the processes this run started.
    """

    def __init__(self, cfg: Config, run_dir: Path,
                 stopping: threading.Event | None = None) -> None:
        super().__init__(name="actor-supervisor", daemon=True)
        self.cfg = cfg
        self.run_dir = run_dir
        self.procs: dict[int, subprocess.Popen] = {}
        self.policies = {task: RestartPolicy(ACTOR_RESTART_LIMIT, ACTOR_RESTART_WINDOW_S)
                         for task in range(cfg.num_actors)}
        # The run's own stop event where there is one: a signal sets it before the
        # learner's last checkpoint and `stop()`, and an actor the same signal reached
        # (sent to the whole process group, say) must not be started again meanwhile.
        self.stopping = stopping or threading.Event()
        self._lock = threading.Lock()

    def _start(self, task: int) -> None:
        log_file = open(self.run_dir / f"actor-{task}.log", "ab")  # noqa: SIM115 - child owns it
        env = {**os.environ, PARENT_PID_VARIABLE: str(os.getpid())}
        proc = subprocess.Popen(actor_command(self.cfg, task), stdout=log_file,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        log_file.close()
        self.procs[task] = proc
        log.info("started actor %d (pid %d), log %s", task, proc.pid,
                 self.run_dir / f"actor-{task}.log")

    def run(self) -> None:
        name_os_thread()
        log.info("starting %d actors of %d environments each, actors on %s (%d cores here)",
                 self.cfg.num_actors, self.cfg.num_envs, self.cfg.actor_device,
                 usable_cores())
        with self._lock:
            for task in range(self.cfg.num_actors):
                self._start(task)
        next_start: dict[int, float] = {}
        down: set[int] = set()
        while not self.stopping.wait(0.5):
            with self._lock:
                for task, proc in list(self.procs.items()):
                    if proc.poll() is None or self.stopping.is_set() or task in down:
                        continue
                    if task not in next_start:
                        decision = self.policies[task].after_exit(proc.returncode, time.time())
                        if not decision.restart:
                            log.error("actor %d exited with %s and is left down: %s; the run "
                                      "goes on with the other actors", task, proc.returncode,
                                      decision.reason)
                            down.add(task)
                            continue
                        log.warning("actor %d exited with %s; restarting in %g s", task,
                                    proc.returncode, decision.delay_s)
                        next_start[task] = time.time() + decision.delay_s
                    elif time.time() >= next_start[task]:
                        del next_start[task]
                        self._start(task)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stopping.set()
        with self._lock:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.terminate()
            deadline = time.time() + timeout_s
            for task, proc in self.procs.items():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    log.warning("actor %d did not stop on SIGTERM; killing it", task)
                    proc.kill()
                    proc.wait()
