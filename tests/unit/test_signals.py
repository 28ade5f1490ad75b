"""impala/signals.py: stop actions run in a thread of their own, so a signal that lands while
the main thread holds a lock the action takes (an Event's, as in every stop) cannot hang
the process. Each case runs in a real child interpreter that is sent real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.helpers import ROOT

PRELUDE = """
import os, signal, sys, threading, time
from impala.signals import act_on_signals
"""


def start(body: str) -> subprocess.Popen:
    """A child interpreter running PRELUDE + `body`, once it has printed `ready`."""
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=10)[0]
    return proc


def test_a_barrage_of_signals_on_a_thread_busy_in_event_waits_ends_in_a_clean_stop():
    """The stop pattern of the frontend and the learner: the main thread waits on an Event,
    the signal's action sets it. Run in the handler, a signal that lands inside `wait()`
    (which holds the Event's lock) blocks on that lock for ever."""
    proc = start("""
        stop, poke = threading.Event(), threading.Event()
        pokes = []
        act_on_signals([signal.SIGUSR1], lambda s: (pokes.append(s), poke.set()))
        act_on_signals([signal.SIGTERM], lambda s: stop.set())
        print("ready", flush=True)
        while not stop.is_set():
            poke.wait(0)
            poke.clear()
            poke.set()
        print("stopped after", len(pokes), "pokes", flush=True)
    """)
    for _ in range(5000):
        os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "stopped after" in out and " 0 pokes" not in out, out


def test_a_second_sigint_interrupts_the_main_thread_when_asked():
    proc = start("""
        act_on_signals([signal.SIGINT], lambda s: print("stopping", flush=True),
                       interrupt_on_repeat=True)
        print("ready", flush=True)
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() == "stopping"
    # A second signal that lands before the main thread has run the first one's handler
    # merges with it (Python runs a handler once per wake-up); a user's second Ctrl-C
    # comes seconds later.
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    # The repeat also reaches the reader thread, which runs the action again while the main
    # thread prints: the two lines may come in either order, or interleaved.
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "interrupted" in out, out


def test_without_repeat_interrupts_every_sigint_only_runs_its_action():
    proc = start("""
        count = []
        act_on_signals([signal.SIGINT], lambda s: count.append(s))
        print("ready", flush=True)
        deadline = time.time() + 20
        while len(count) < 3 and time.time() < deadline:
            time.sleep(0.01)
        print("actions", len(count), flush=True)
    """)
    for _ in range(3):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "actions 3", out


def test_a_forked_child_takes_the_default_sigterm_and_never_wakes_its_parent():
    proc = start("""
        acted = []
        act_on_signals([signal.SIGTERM], lambda s: acted.append(s))
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(3)
        print("ready", flush=True)
        time.sleep(0.5)
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
        time.sleep(0.5)
        print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, len(acted),
              flush=True)
    """)
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "True 0", out
