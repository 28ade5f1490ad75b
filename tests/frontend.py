"""Running the cluster frontend (run_experiment_mm_raw.py) in tests, and seeing what it left:
tmux sessions and processes. Shared by the CSV, Docker and Slurm tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import libtmux

from tests.helpers import ROOT

FRONTEND = str(ROOT / "run_experiment_mm_raw.py")
# The original project's example CSV: two learners and three actors on this host.
ORIGINAL_CSV = ROOT / "sandbox" / "local_workers_example.csv"
HEADER = "job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password\n"
# CartPole small and quick: 4 environments per actor, a batch of 8, one learner thread.
CARTPOLE = ["--level_name=CartPole-v1", "--agent_name=MLPAgent", "--batch_size=8",
            "--num_envs=4", "--learner_threads=1", "--log_interval_s=1",
            "--learning_rate=0.003", "--discounting=0.98"]  # run directory: CARTPOLE_RUN


def frontend(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, FRONTEND, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)


def tmux_has(session: str) -> bool:
    return libtmux.Server().has_session(session)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (e.g. the run's directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(cmdline)
    return found
