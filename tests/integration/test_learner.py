"""The learner process's own settings, checked in fresh processes (they are process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

FAULTS_PER_ALLOCATION = """
import resource, torch
from impala.process import keep_freed_memory

def faults_per_allocation():
    # A 100 MiB block, freed at once: like a conv layer's activations in every update.
    for _ in range(3):
        torch.empty(100 << 20, dtype=torch.uint8).fill_(1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        torch.empty(100 << 20, dtype=torch.uint8).fill_(1)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10

before = faults_per_allocation()
applied = keep_freed_memory()
faults_per_allocation()  # glibc settles on its new heap layout
print(before, applied, faults_per_allocation())
"""


def test_large_freed_blocks_are_reused_instead_of_faulted_in_again():
    out = subprocess.run([sys.executable, "-c", FAULTS_PER_ALLOCATION], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=120).stdout.split()
    before, applied, after = float(out[0]), out[1], float(out[2])
    assert applied == "True"
    assert after < before / 10, f"page faults per 100 MiB block: {before} -> {after}"


def test_openmp_threads_sleep_rather_than_spin_unless_the_user_says_otherwise():
    probe = "import impala, os; print(os.environ['OMP_WAIT_POLICY'])"
    env_of = {"PATH": "/usr/bin:/bin"}
    default = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env_of, check=True,
                             capture_output=True, text=True).stdout.strip()
    chosen = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, text=True,
                            env={**env_of, "OMP_WAIT_POLICY": "ACTIVE"},
                            capture_output=True).stdout.strip()
    assert (default, chosen) == ("PASSIVE", "ACTIVE")


def test_an_actor_started_niced_still_lowers_its_sessions_group():
    """An actor under `nice -n 15` in a new session: its group started at 0 and must be
    set too (it was skipped because the process was niced enough already)."""
    probe = ("import os; from pathlib import Path; from impala.process import lower_priority; "
             "lower_priority(10); print(os.getpriority(os.PRIO_PROCESS, 0), "
             "Path('/proc/self/autogroup').read_text().split('nice')[-1].strip())")
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("no autogroups on this kernel")
    out = subprocess.run(["nice", "-n", "15", sys.executable, "-c", probe], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True,
                         start_new_session=True).stdout.split()
    niced = str(min(19, os.getpriority(os.PRIO_PROCESS, 0) + 15))  # pytest may run niced
    assert out == [niced, niced]


def test_the_return_window_holds_the_last_episodes_in_whole_updates():
    """Against the episodes themselves: after each update, the window's mean is the mean of
    the fewest trailing whole updates that hold >= N episodes (updates with none skipped)."""
    import numpy as np

    from impala.learner import ReturnWindow

    rng = np.random.default_rng(0)
    window, updates = ReturnWindow(episodes=10), []
    for _ in range(200):
        returns = rng.normal(size=rng.integers(0, 5)).tolist()
        window.add(sum(returns), len(returns))
        updates.append(returns)
        kept: list[float] = []
        for earlier in reversed(updates):
            if len(kept) >= 10:
                break
            kept = earlier + kept
        assert window.count == len(kept)
        if len(kept) >= 10:
            assert window.mean == pytest.approx(np.mean(kept))
            assert window.reached(np.mean(kept) - 1e-9)
            assert not window.reached(np.mean(kept) + 1e-9)
        else:
            assert not window.reached(-np.inf)
