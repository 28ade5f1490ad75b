"""Redraw every figure and the summary from what was measured: `results/runs.csv` and the
episode files beside it.

  make results                          # = .venv/bin/python results/redraw.py
  .venv/bin/python results/redraw.py --check    # verify only: draw and write nothing
  .venv/bin/python results/redraw.py --update   # rewrite the table's computed columns

The frame columns of runs.csv (`last_episode_frames`, `frames_to_minus15`, `frames_to_plus18`,
`least_exploring_to_plus18`) are computed from each run's episodes: the first frame at which
the mean return of the last 30 episodes reached the threshold. This script recomputes them
and refuses a table that disagrees with its own data, so a number typed into the table
cannot drift from the run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from impala.algorithms.value import LEAST_EXPLORING_EPSILON  # noqa: E402
from impala.curves import RETURN_WINDOW, overlay  # noqa: E402

RUNS = HERE / "runs.csv"
EPISODES = HERE / "episodes"
FIGURES = HERE / "figures"
SUMMARY = HERE / "SUMMARY.md"
THRESHOLDS = {"frames_to_minus15": -15.0, "frames_to_plus18": 18.0}
COMPUTED = ("last_episode_frames", *THRESHOLDS, "least_exploring_to_plus18")

# figure group -> its title in the summary
GROUPS = {
    "preset": "IMPALA on Pong with the atari preset, the code as it stands",
    "preset-before-entropy": "IMPALA on Pong, the preset before the entropy bonus was "
                             "weighted like the rest of the loss",
    "replay-ratio": "IMPALA on Pong: replayed unrolls per fresh one (and none)",
    "gpu-h200": "IMPALA on Pong on one H200 with 16 cores",
    "apex-preset": "Ape-X on Pong with its preset, from the first frame",
    "apex": "Ape-X on Pong: shorter budgets, other settings and the code before",
    "r2d2-preset": "R2D2 on Pong with its preset as it stood at each run's commit, from the "
                   "first frame (today's: the rows with Ape-X's targets and exponents)",
    "r2d2": "R2D2 on Pong: its parts swapped for Ape-X's a group at a time, and Ape-X "
            "with R2D2's network (seed 1)",
    "apex-h100-tf32": "Ape-X on Pong on one H100: TF32 convolutions on and off, seeds 1 and "
                      "2, four runs at once",
    "r2d2-h100": "R2D2 on Pong on one H100 with 16 cores",
    "h100-side-by-side": "Ape-X and R2D2 on Pong side by side on one H100 with 16 cores, "
                         "7 actors each, 7.8 minutes",
}
# the frame budget each group's runs are held to: IMPALA's 5M (LASER's anchor), Ape-X's
# 12M (RLlib's tuned example), R2D2's 16M (DI-engine's)
BUDGETS = {"apex-preset": 12_000_000, "apex": 12_000_000, "apex-h100-tf32": 12_000_000,
           "r2d2-preset": 16_000_000, "r2d2": 16_000_000, "r2d2-h100": 16_000_000,
           "h100-side-by-side": 16_000_000}


def episodes_path(run_id: str) -> Path:
    return EPISODES / f"{run_id}.csv"


def first_frame_at(episodes: pd.DataFrame, threshold: float) -> int | None:
    """The frame of the first episode at which the mean of the last RETURN_WINDOW returns
    reached `threshold`; None if it never did."""
    mean = episodes["episode_return"].rolling(RETURN_WINDOW).mean()
    reached = episodes["frames"][mean >= threshold]
    return int(reached.iloc[0]) if len(reached) else None


def computed_columns(run_id: str) -> dict[str, int | None]:
    path = episodes_path(run_id)
    if not path.exists():
        raise SystemExit(f"{RUNS.name}: run {run_id}: no episode file {path}")
    episodes = pd.read_csv(path).sort_values("frames", kind="stable").reset_index(drop=True)
    values: dict[str, int | None] = {"last_episode_frames": int(episodes["frames"].iloc[-1])}
    for column, threshold in THRESHOLDS.items():
        values[column] = first_frame_at(episodes, threshold)
    values["least_exploring_to_plus18"] = None
    if "epsilon" in episodes:
        least = episodes[episodes["epsilon"] <= LEAST_EXPLORING_EPSILON]
        values["least_exploring_to_plus18"] = first_frame_at(least.reset_index(drop=True),
                                                           THRESHOLDS["frames_to_plus18"])
    return values


def read_runs() -> pd.DataFrame:
    runs = pd.read_csv(RUNS, dtype={"commit": str, "flags": str, "note": str})
    unknown = set(runs["figure"]) - set(GROUPS)
    if unknown:
        raise SystemExit(f"{RUNS.name}: unknown figure group(s) {sorted(unknown)}; "
                         f"known: {sorted(GROUPS)}")
    if runs["id"].duplicated().any():
        raise SystemExit(f"{RUNS.name}: duplicate ids {list(runs['id'][runs['id'].duplicated()])}")
    return runs


def disagreements(runs: pd.DataFrame) -> list[str]:
    """Where the table's computed columns differ from its episodes."""
    found = []
    for index, row in runs.iterrows():
        for column, value in computed_columns(row["id"]).items():
            stored = row[column]
            stored = None if pd.isna(stored) else int(stored)
            if stored != value:
                found.append(f"line {index + 2}, {row['id']}: {column} is {stored}, "
                             f"the episodes say {value}")
    return found


def update(runs: pd.DataFrame) -> pd.DataFrame:
    for index, row in runs.iterrows():
        for column, value in computed_columns(row["id"]).items():
            runs.loc[index, column] = value
    for column in COMPUTED:
        runs[column] = runs[column].astype("Int64")
    runs.to_csv(RUNS, index=False)
    return runs


def millions(value) -> str:
    return "-" if pd.isna(value) else f"{value / 1e6:.2f}M"


def least_exploring(row: pd.Series) -> str:
    """The least-exploring third's frames to +18; blank for IMPALA, which has no epsilon."""
    return "" if row["algorithm"] == "impala" else millions(row["least_exploring_to_plus18"])


def summary(runs: pd.DataFrame) -> str:
    lines = ["# Results (generated by `make results` from runs.csv; do not edit)", "",
             f"Frames are environment frames (4 per agent step on Atari). A threshold is "
             f"reached when the mean return of the last {RETURN_WINDOW} episodes first "
             f"meets it. Ape-X and R2D2 explore with a fixed epsilon per environment, up to "
             f"0.4; \"least exploring third\" counts only the episodes of the third of "
             f"environments that explore least (epsilon <= {LEAST_EXPLORING_EPSILON:.4f}), "
             f"the return RLlib's Ape-X reports.", ""]
    for group, title in GROUPS.items():
        rows = runs[runs["figure"] == group]
        solved = rows["frames_to_plus18"].notna()
        budget = BUDGETS.get(group, 5_000_000)
        within = (rows["frames_to_plus18"] <= budget).sum()
        lines += [f"## {title}", "", f"![{title}](figures/{group}.png)", "",
                  f"+18 reached in {int(solved.sum())} of {len(rows)} runs "
                  f"({int(within)} within {budget / 1e6:g}M frames).", "",
                  "| run | seed | machine | commit | flags | to -15 | to +18 | to +18, least "
                  "exploring third | minutes to +18 | greedy | note |",
                  "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for _, row in rows.iterrows():
            cells = [row["id"], str(row["seed"]), row["machine"], row["commit"],
                     "" if pd.isna(row["flags"]) else f"`{row['flags']}`",
                     millions(row["frames_to_minus15"]), millions(row["frames_to_plus18"]),
                     least_exploring(row),
                     "" if pd.isna(row["wall_min_to_plus18"]) else f"{row['wall_min_to_plus18']:g}",
                     "" if pd.isna(row["greedy_score"]) else f"{row['greedy_score']:g}",
                     "" if pd.isna(row["note"]) else row["note"]]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="verify only")
    mode.add_argument("--update", action="store_true",
                      help="rewrite the computed columns from the episodes")
    args = parser.parse_args(argv)
    runs = read_runs()
    if args.update:
        runs = update(runs)
    problems = disagreements(runs)
    if problems:
        print(f"{RUNS}: the table disagrees with its episodes (--update rewrites it):",
              *problems, sep="\n  ", file=sys.stderr)
        return 1
    if args.check:
        print(f"{RUNS}: {len(runs)} runs agree with their episodes")
        return 0
    FIGURES.mkdir(exist_ok=True)
    for group in GROUPS:
        ids = runs["id"][runs["figure"] == group]
        overlay([episodes_path(run_id) for run_id in ids], FIGURES / f"{group}.png")
    SUMMARY.write_text(summary(runs))
    print(f"wrote {SUMMARY} and {len(GROUPS)} figures in {FIGURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
