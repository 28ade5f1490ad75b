"""Signals acted on in a thread of their own, never inside the signal handler.

A Python signal handler runs in the main thread between two bytecodes, wherever that
thread is: inside `Event.wait()` holding the event's lock, inside a `print` holding
stdout's lock, inside paramiko holding its transport's lock. A handler that takes the same
lock (`Event.set()`, `print`, `channel.close()`) then waits forever on its own thread, and
the process hangs instead of stopping. Here the handler does nothing itself: the
interpreter writes each signal's number to a pipe (`signal.set_wakeup_fd`), and one
reader thread runs the actions registered for it, where taking a lock is safe.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger("signals")

Action = Callable[[int], None]

_actions: dict[int, Action] = {}
_received: dict[int, int] = {}  # signal number -> how many came (the handler counts them)
_interrupt_on_repeat: set[int] = set()
_reader: threading.Thread | None = None


def act_on_signals(signums: Iterable[int], action: Action, *,
                   interrupt_on_repeat: bool = False) -> None:
    """Run `action(signum)` in the reader thread whenever one of `signums` arrives.

    With `interrupt_on_repeat`, a second SIGINT raises KeyboardInterrupt in the main thread
    (a user's second Ctrl-C when the first one's clean stop takes too long). Call from the
    main thread (Python installs signal handlers only there); a later call for the same
    signal replaces its action.
    """
    _start_reader()
    for signum in signums:
        _actions[signum] = action
        _received.setdefault(signum, 0)
        if interrupt_on_repeat and signum == signal.SIGINT:
            _interrupt_on_repeat.add(signum)
        signal.signal(signum, _count)


def _count(signum: int, _frame) -> None:
    """The handler itself: count the signal (no lock is taken), and interrupt on a repeat
    where asked. The wakeup pipe carries it to the reader thread."""
    _received[signum] = _received.get(signum, 0) + 1
    if signum in _interrupt_on_repeat and _received[signum] > 1:
        raise KeyboardInterrupt


def _start_reader() -> None:
    global _reader
    if _reader is not None and _reader.is_alive():
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the interpreter drops a byte rather than block
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _reader = threading.Thread(target=_read, args=(read_end,), name="signals", daemon=True)
    # The reader is born with every signal blocked: a signal the kernel gave to it would
    # leave the main thread asleep in a system call, its handler (and a repeat's
    # KeyboardInterrupt) waiting until that call ends by itself.
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        _reader.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


def _read(read_end: int) -> None:
    while True:
        try:
            numbers = os.read(read_end, 64)
        except OSError:
            return
        if not numbers:
            return
        for signum in numbers:
            action = _actions.get(signum)
            if action is None:
                continue
            try:
                action(signum)
            except Exception:  # an action's failure must not end the thread that stops us
                log.exception("acting on %s", signal.Signals(signum).name)


def _forget_in_child() -> None:
    """A forked child has no reader thread: its signals must not reach the parent's pipe,
    and they take their default effect again (SIGTERM ends it)."""
    global _reader
    _reader = None
    try:
        signal.set_wakeup_fd(-1)
        for signum in _actions:
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, default)
    except ValueError:  # not the child's main thread: Python cannot change them there
        pass
    _actions.clear()
    _interrupt_on_repeat.clear()


os.register_at_fork(after_in_child=_forget_in_child)
