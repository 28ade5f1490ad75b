"""The watcher process that keeps a training run's curve.png current.

`CurvePlotter` (in the learner) starts `python -m impala.plotter`, a process in a session of
its own at idle priority, which redraws the picture (curves.py) when logs.csv changes and
exits when the learner does; `close` draws the final picture in the learner.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from impala.curves import draw
from impala.process import lower_priority


def watch(run_dir: Path, parent_pid: int, poll_s: float = 1.0,
          max_cpu_share: float = 0.02) -> None:
    """Redraw `run_dir`'s curve.png when logs.csv has changed, until `parent_pid` is gone;
    after each drawing wait until it has used at most `max_cpu_share` of one core (a drawing
    takes ~0.3-1 s of CPU, more as the run grows; every 5 s row it took 10% of a core, 5% of
    this 2-core machine, from the training run beside it)."""
    last_change = None
    next_draw = 0.0
    while os.getppid() == parent_pid:
        try:
            change = (run_dir / "logs.csv").stat().st_mtime_ns
        except FileNotFoundError:
            change = None
        if change is not None and change != last_change and time.monotonic() >= next_draw:
            last_change = change
            cpu_before = time.process_time()
            draw(run_dir)
            next_draw = time.monotonic() + (time.process_time() - cpu_before) / max_cpu_share
        time.sleep(poll_s)


def idle_priority() -> None:
    """Run only when a core would otherwise be idle (SCHED_IDLE; niceness 19 where that is
    refused): niceness alone still took a tenth of a core from niced actors."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        lower_priority(19)


class CurvePlotter:
    """A watcher process that redraws curve.png after new log rows, in a session of its own
    at idle priority and using at most 2% of a core (`watch`): drawing costs ~0.5 s of CPU,
    which in the learner's process took CPU and the GIL from training. `close` stops it
    and draws the final picture in the caller, so that one is always complete."""

    def __init__(self, run_dir: Path, max_cpu_share: float = 0.02) -> None:
        self.run_dir = run_dir
        self.max_cpu_share = max_cpu_share
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "impala.plotter", f"--parent={os.getpid()}",
             f"--max_cpu_share={self.max_cpu_share}", str(self.run_dir)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        draw(self.run_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Redraw a run's curve.png as it trains.")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--parent", type=int, required=True, help="exit once this pid is gone")
    parser.add_argument("--max_cpu_share", type=float, default=0.02)
    args = parser.parse_args(argv)
    idle_priority()
    watch(args.run_dir, args.parent, max_cpu_share=args.max_cpu_share)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
