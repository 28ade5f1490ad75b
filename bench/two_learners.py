"""Two Horovod learners and one actor each on this host, CartPole to a frame budget: the
whole system's frames/s where learners and actors share the cores, per allreduce backend
and Horovod cycle time (`HOROVOD_CYCLE_TIME`, which the frontend sets; docs/speed.md).

  .venv/bin/python bench/two_learners.py [--frames=150000] [--cycle_times default 5 10]
      [--torch]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
import pandas as pd

from impala.launcher.mpi import LearnerLaunch, MpiOptions, mpirun_command
from tests.helpers import free_port

FLAGS = ["--level_name=CartPole-v1", "--agent_name=MLPAgent", "--batch_size=8",
         "--log_interval_s=1", "--learner_threads=1"]


def measure(backend: str, cycle_time_ms: float | None, frames: int) -> dict[str, object]:
    logdir = Path(tempfile.mkdtemp(prefix="two_learners-"))
    flags = [*FLAGS, f"--allreduce_backend={backend}", f"--logdir={logdir}"]
    ports = [free_port(), free_port()]
    learners = [LearnerLaunch("127.0.0.1", port, sys.executable, str(common.ROOT))
                for port in ports]
    command = mpirun_command(learners, [*flags, f"--total_environment_frames={frames}"],
                             MpiOptions(master_port=free_port(),
                                        horovod_cycle_time_ms=cycle_time_ms))
    t0 = time.perf_counter()
    with open(logdir / "mpirun.log", "wb") as log:
        mpirun = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  cwd=common.ROOT, stdin=subprocess.DEVNULL)
        actors = [subprocess.Popen([sys.executable, "experiment.py", "--job_name=actor",
                                    f"--task={i}", *flags, f"--learner_host=127.0.0.1:{port}"],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=common.ROOT,
                                   stdin=subprocess.DEVNULL) for i, port in enumerate(ports)]
        code = mpirun.wait(timeout=1800)
        for actor in actors:
            actor.terminate()
            actor.wait(timeout=60)
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"mpirun failed ({code}); see {logdir / 'mpirun.log'}")
    logs = pd.read_csv(next(logdir.glob("*/logs.csv")))
    return {"backend": backend,
            "cycle_time_ms": "default" if cycle_time_ms is None else cycle_time_ms,
            "frames": frames, "frames_per_s": logs["sps"].median(), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=150_000)
    parser.add_argument("--cycle_times", nargs="*", default=["default", "5"],
                        help="Horovod cycle times in ms ('default': Horovod's own)")
    parser.add_argument("--torch", action="store_true", help="also the torch backend")
    args = parser.parse_args()
    rows = [measure("horovod", None if c == "default" else float(c), args.frames)
            for c in args.cycle_times]
    if args.torch:
        rows.append(measure("torch", None, args.frames))
    common.report("two_learners", rows, ["backend", "cycle_time_ms", "frames",
                                         "frames_per_s", "wall_s"])


if __name__ == "__main__":
    main()
