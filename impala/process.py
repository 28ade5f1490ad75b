"""Process-wide settings: how an actor yields the CPU, how a learner keeps its memory, how
a supervised process knows its supervisor."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

# Set by impala.local for the actors it supervises, read by the actor's orphan watch.
PARENT_PID_VARIABLE = "IMPALA_SUPERVISOR_PID"
# Set by a supervisor (impala.launcher.logged) that leaves its actor down: the actor then
# only tells its learner why, and exits.
DOWN_REASON_VARIABLE = "IMPALA_DOWN_REASON"


def lower_priority(niceness: int) -> None:
    """Let a learner on the same host have the CPU first. It is the slower stage, and while
    it waits for a core its actors' unrolls only queue up (measured on a 2-core Pong run:
    its two threads waited 8 of every 20 s for a core; at niceness 10, 1.8 s, and with the
    learner's other settings the run went from 0.77 to 0.96 of the machine's ceiling).

    Linux schedules each session as one group ("autogroup") and nice only orders processes
    within a group, so an actor that leads its own session (every launcher here starts it
    so) sets its group's niceness too. Called before any thread starts: on Linux niceness
    is per thread, and new threads inherit it.
    """
    if niceness <= 0:
        return  # turned off
    # A process started niced already (e.g. under `nice -n 19`) keeps the larger value;
    # its new session's group still starts at 0, so the group is set in every case.
    niceness = max(niceness, os.getpriority(os.PRIO_PROCESS, 0))
    os.setpriority(os.PRIO_PROCESS, 0, niceness)
    if os.getsid(0) == os.getpid():
        try:
            Path("/proc/self/autogroup").write_text(str(niceness))
        except OSError:
            pass  # not Linux, or no autogroups: plain niceness is all there is


PR_SET_NAME = 15  # prctl(2): the calling thread's name, 15 bytes and a NUL


def name_os_thread() -> None:
    """Give the calling thread its Python name in the OS too, so that `top -H` and
    bench/threads.py tell a learner's receiver from its publisher (the main thread keeps
    the process's name, which tools that find processes by name rely on). A no-op where
    there is no prctl."""
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):  # not Linux
        return
    prctl(PR_SET_NAME, threading.current_thread().name.encode()[:15], 0, 0, 0)


# mallopt(3) options (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(threshold_bytes: int = 1 << 30) -> bool:
    """Let glibc reuse the learner's large freed blocks instead of giving them back.

    glibc serves blocks over 32 MiB straight from mmap and unmaps them when freed; the
    first conv layer's activations for a [81, 8] batch are 33 MiB, so every update faulted
    in fresh zeroed pages: 1.6M page faults and 19% of a 1-thread learner's time in the
    kernel (bench/learner.py, T=80, B=8), none with this. The learner's memory then stays
    at its peak, which it reaches every update anyway. False where there is no glibc.
    """
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # macOS, musl
        return False
    return all(mallopt(option, threshold_bytes) == 1
               for option in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD))
