"""Train Pong with the IMPALA paper's settings on this machine and record the learning curve.

Settings: SimpleConvNetAgent, unroll 20, batch 32, lr 0.0006, entropy 0.01, gradient clipping
40, RMSProp epsilon 0.01 (all defaults of experiment.py), 2 actors x 8 envs. It trains for
--minutes (then SIGTERM: the learner checkpoints), so running it again continues the same
run and the same curve. Prints the curve (frames, wall time, mean return) as a Markdown
table for sandbox/pong_curve.md.

  .venv/bin/python bench/pong_curve.py --minutes=60 [--logdir=runs/pong_curve]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

import common
import pandas as pd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--logdir", default=str(common.ROOT / "runs" / "pong_curve"))
    parser.add_argument("--rows", type=int, default=20, help="rows in the printed table")
    args = parser.parse_args()
    command = [sys.executable, str(common.ROOT / "experiment.py"), "--job_name=local",
               "--level_name=PongNoFrameskip-v4", "--agent_name=SimpleConvNetAgent",
               "--num_actors=2", "--num_envs=8", "--learner_threads=2",
               "--unroll_length=20", "--batch_size=32", "--learning_rate=0.0006",
               "--entropy_cost=0.01", "--gradients_clipping=40", "--epsilon=0.01",
               "--total_environment_frames=200000000", f"--logdir={args.logdir}",
               "--log_interval_s=30", "--learner_host=127.0.0.1:18777"]
    proc = subprocess.Popen(command)
    try:
        proc.wait(timeout=args.minutes * 60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    print_curve(Path(args.logdir) / "PongNoFrameskip-v4_SimpleConvNetAgent", args.rows)


def print_curve(run_dir: Path, rows: int) -> None:
    logs = pd.read_csv(run_dir / "logs.csv")
    episodes = pd.read_csv(run_dir / "episodes-0.csv")
    start = logs["time"].iloc[0]
    print(f"{common.machine()}\n")
    print("| frames | wall time (min) | mean return, last 20 episodes | episodes so far |")
    print("| ---: | ---: | ---: | ---: |")
    for index in sorted(set(list(range(0, len(logs), max(1, len(logs) // rows)))
                            + [len(logs) - 1])):
        row = logs.iloc[index]
        seen = episodes[episodes["frames"] <= row["frames"]]
        recent = seen["episode_return"].tail(20)
        mean = f"{recent.mean():.1f}" if len(recent) else "n/a"
        print(f"| {int(row['frames']):,} | {(row['time'] - start) / 60:.1f} | {mean} | "
              f"{len(seen)} |")


if __name__ == "__main__":
    main()
