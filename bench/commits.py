"""The same local training run from several commits, alternating, so that each commit's
runs share the machine's hour (this VM's speed drifts by up to 2x between hours): for a
before-and-after, or a bisect.

Each commit is checked out in a temporary git worktree and runs `experiment.py
--job_name=local` with the given flags (the user's defaults unless overridden), with this
project's Python. Steps/s are agent steps per second over the log rows after the first
`--skip_s` seconds (start-up and the first batches left out).

  .venv/bin/python bench/commits.py bc0b540 HEAD --rounds 2 -- \\
      --level_name=PongNoFrameskip-v4 --total_environment_frames=400000
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import common
import pandas as pd


def steps_per_second(logs_csv: Path, skip_s: float) -> float:
    """Agent steps/s over the rows after the first `skip_s` seconds of `logs_csv` (each
    row's `sps` covers the time since the row before)."""
    rows = pd.read_csv(logs_csv)
    rows = rows[rows["time"] - rows["time"].iloc[0] >= skip_s]
    if len(rows) < 2:
        raise SystemExit(f"{logs_csv}: fewer than 2 rows after {skip_s} s; run longer")
    elapsed = rows["time"].diff().iloc[1:]
    return float((rows["sps"].iloc[1:] * elapsed).sum() / elapsed.sum())


def checkout(commit: str, under: Path) -> Path:
    path = under / commit
    subprocess.run(["git", "-C", str(common.ROOT), "worktree", "add", "--detach", str(path),
                    commit], check=True, capture_output=True)
    return path


def run(tree: Path, flags: list[str], logdir: Path, name: str, timeout_s: float) -> Path:
    """One run from checkout `tree`; its run directory."""
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"{name}.log"
    with log.open("w") as out:
        status = subprocess.run([sys.executable, "experiment.py", "--job_name=local",
                                 f"--logdir={logdir}", f"--run_name={name}", *flags],
                                cwd=tree, stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout_s).returncode
    if status != 0:
        raise SystemExit(f"run {name} failed with status {status}: see {log}")
    return logdir / name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commits", nargs="+", help="commits to compare, in run order")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip_s", type=float, default=40.0)
    parser.add_argument("--timeout_s", type=float, default=1800.0, help="per run")
    parser.add_argument("--runs_dir", type=Path, default=None,
                        help="where the runs and their logs stay (default: a new /tmp dir)")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    flags = argv[split + 1:]  # after --: experiment.py flags for every run
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="commits-"))
    print(f"runs and their logs: {runs_dir}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        trees = {commit: checkout(commit, scratch) for commit in args.commits}
        try:
            for round_ in range(1, args.rounds + 1):
                for commit, tree in trees.items():
                    run_dir = run(tree, flags, runs_dir, f"{commit}-{round_}", args.timeout_s)
                    sps = steps_per_second(run_dir / "logs.csv", args.skip_s)
                    print(f"round {round_} {commit}: {sps:.0f} steps/s", flush=True)
                    rows.append({"of_commit": commit, "round": round_, "steps_per_s": sps,
                                 "flags": " ".join(flags)})
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(common.ROOT), "worktree", "remove",
                                "--force", str(tree)], capture_output=True)
    for commit in args.commits:
        mine = [r["steps_per_s"] for r in rows if r["of_commit"] == commit]
        rows.append({"of_commit": commit, "round": "mean", "steps_per_s": statistics.mean(mine),
                     "flags": " ".join(flags)})
    common.report("commits", rows, ["of_commit", "round", "steps_per_s", "flags"])


if __name__ == "__main__":
    main()
