"""Train Pong with the defaults (the atari preset) and `make train`'s split on this machine,
and record the learning curve.

  .venv/bin/python bench/pong_curve.py [--frames=N] [--minutes=120] [-- extra flags]

It runs `experiment.py --job_name=local` with 2 actors x 8 envs until --frames (default: the
atari preset's 20M; the learning rate is held for 80% of them, then anneals) or --minutes
(then SIGTERM: the learner checkpoints, and running the same command again continues the run
and the curve). Then it draws the run's curve.png and prints the curve (frames, wall time,
mean return of the last 30 episodes, entropy) as a Markdown table; a finished run becomes a
row of results/runs.csv with its episodes file in results/episodes/.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

import common
import pandas as pd

from impala.curves import RETURN_WINDOW, episodes_of, plot_run, running_minutes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=None,
                        help="frame budget (default: the preset's)")
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--logdir", default=str(common.ROOT / "runs" / "pong_curve"))
    parser.add_argument("--run_name", default="pong")
    parser.add_argument("--rows", type=int, default=20, help="rows in the printed table")
    parser.add_argument("extra", nargs="*", help="more experiment.py flags (after --)")
    args = parser.parse_args()
    command = [sys.executable, str(common.ROOT / "experiment.py"), "--job_name=local",
               "--level_name=PongNoFrameskip-v4", "--num_actors=2", "--num_envs=8",
               *([f"--total_environment_frames={args.frames}"] if args.frames else []),
               f"--logdir={args.logdir}",
               f"--run_name={args.run_name}", "--log_interval_s=30",
               "--learner_host=127.0.0.1:18777", *args.extra]
    proc = subprocess.Popen(command)
    try:
        proc.wait(timeout=args.minutes * 60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        proc.wait()
    run_dir = Path(args.logdir) / args.run_name
    print(plot_run(run_dir) or "no curve drawn: no log rows yet")
    print_curve(run_dir, args.rows)


def print_curve(run_dir: Path, rows: int) -> None:
    logs = pd.read_csv(run_dir / "logs.csv")
    if logs.empty:
        print(f"{run_dir / 'logs.csv'}: no rows yet (the run stopped before its first "
              "--log_interval_s)")
        return
    # None until an episode ends: a short or slow run (an Ape-X Pong episode on a busy
    # 2-core VM takes longer than the CI's 0.4-minute cut) still prints its rows.
    episodes = episodes_of(run_dir)
    if episodes is None:
        episodes = pd.DataFrame({"frames": [], "episode_return": []})
    minutes = running_minutes(logs, logs["time"])  # a resumed run's stop is not counted
    print(f"{common.machine()}\n")
    # The algorithm's own sign of life: IMPALA's policy entropy, a value-based agent's Q.
    vital = next(name for name in ("entropy", "q_value", "total_loss") if name in logs)
    print(f"| frames | wall time (min) | mean return, last {RETURN_WINDOW} episodes | "
          f"episodes so far | steps/s | {vital} |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for index in sorted(set(list(range(0, len(logs), max(1, len(logs) // rows)))
                            + [len(logs) - 1])):
        row = logs.iloc[index]
        seen = episodes[episodes["frames"] <= row["frames"]]
        recent = seen["episode_return"].tail(RETURN_WINDOW)
        mean = f"{recent.mean():.1f}" if len(recent) else "n/a"
        print(f"| {int(row['frames']):,} | {minutes[index]:.1f} | {mean} | "
              f"{len(seen)} | {row['sps']:,.0f} | {row[vital]:.3f} |")


if __name__ == "__main__":
    main()
