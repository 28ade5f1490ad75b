"""Process-wide scheduling settings: how a background process yields the CPU."""

from __future__ import annotations

import os
from pathlib import Path


def lower_priority(niceness: int) -> None:
    """Let a learner on the same host have the CPU first. It is the slower stage, and while
    it waits for a core its actors' unrolls only queue up (measured on a 2-core Pong run:
    its two threads waited 8 of every 20 s for a core; at niceness 10, 1.8 s, and with the
    learner's other settings the run went from 0.77 to 0.96 of the machine's ceiling;
    sandbox/speed.md).

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
