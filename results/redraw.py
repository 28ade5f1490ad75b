"""Redraw every figure, the summary and each algorithm's page from what was measured:
`results/runs.csv` and the episode files beside it.

  make results                          # = .venv/bin/python results/redraw.py
  .venv/bin/python results/redraw.py --check    # verify only: the table and the pages
  .venv/bin/python results/redraw.py --update   # rewrite the table's computed columns

The frame columns of runs.csv (`last_episode_frames`, `frames_to_minus15`, `frames_to_plus18`,
`least_exploring_to_plus18`) are computed from each run's episodes by `columns.py`: the first
frame at which the mean return of the last 30 episodes reached the threshold. This script
recomputes them and refuses a table that disagrees with its own data, so a number typed into
the table cannot drift from the run; and it refuses pages that no longer match the table.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from impala.algorithms.value import LEAST_EXPLORING_EPSILON  # noqa: E402
from impala.curves import RETURN_WINDOW, overlay  # noqa: E402
from results import scores  # noqa: E402
from results.columns import COMPUTED, frame_columns  # noqa: E402

RUNS = HERE / "runs.csv"
EPISODES = HERE / "episodes"
FIGURES = HERE / "figures"
SUMMARY = HERE / "SUMMARY.md"
README = HERE.parent / "README.md"
# the README's lines between these two are the suite's table, written here
TABLE_MARKS = ("<!-- the suite's table: written by `make results` -->",
               "<!-- end of the suite's table -->")

# figure group -> the page that shows it and its title there
GROUPS = {
    "preset": ("impala", "IMPALA on Pong with the atari preset, the code as it stands"),
    "preset-before-entropy": ("impala", "IMPALA on Pong, the preset before the entropy bonus "
                              "was weighted like the rest of the loss"),
    "replay-ratio": ("impala", "IMPALA on Pong: replayed unrolls per fresh one (and none)"),
    "entropy-weight": ("impala", "IMPALA on Pong: the preset with a tenth of the entropy "
                       "weight (0.001), the change BattleZone asks for"),
    "gpu-h200": ("impala", "IMPALA on Pong on one H200 with 16 cores"),
    "apex-preset": ("apex", "Ape-X on Pong with its preset, from the first frame"),
    "apex": ("apex", "Ape-X on Pong: shorter budgets, other settings and the code before"),
    "apex-h100-tf32": ("apex", "Ape-X on Pong on one H100: TF32 convolutions on and off, "
                       "seeds 1 and 2, four runs at once"),
    "r2d2-preset": ("r2d2", "R2D2 on Pong with its preset as it stood at each run's commit, "
                    "from the first frame (today's: one fresh sequence per update, the "
                    "bs1 and preset-bf16 rows)"),
    "r2d2": ("r2d2", "R2D2 on Pong: its parts swapped for Ape-X's a group at a time, and "
             "Ape-X with R2D2's network (seed 1)"),
    "r2d2-speed": ("r2d2", "R2D2 on Pong: the preset with two fresh sequences per update "
                   "(34913c9) and a bfloat16 torso"),
    "r2d2-h100": ("r2d2", "R2D2 on Pong on one H100 with 16 cores"),
    "h100-side-by-side": ("r2d2", "Ape-X and R2D2 on Pong side by side on one H100 with 16 "
                          "cores, 7 actors each, 7.8 minutes"),
}
# a group whose figure draws another group's runs in grey beneath its own, to compare with
BESIDE = {"entropy-weight": "preset"}
# page -> its title; one page per algorithm keeps each under the docs' page limit
PAGES = {"impala": "IMPALA with LASER on Pong", "apex": "Ape-X on Pong",
         "r2d2": "R2D2 on Pong"}
# the benchmark suite's runs: many games, scored at fixed frames on their own page
SUITE_GROUP = "suite"
# runs of a suite game with other settings, shown beside the defaults on the suite's page
TRIAL_GROUP = "suite-trial"
# the frame budget each group's runs are held to: IMPALA's 5M (LASER's anchor), Ape-X's
# 12M (RLlib's tuned example), R2D2's 16M (DI-engine's)
BUDGETS = {"apex-preset": 12_000_000, "apex": 12_000_000, "apex-h100-tf32": 12_000_000,
           "r2d2-preset": 16_000_000, "r2d2": 16_000_000, "r2d2-h100": 16_000_000,
           "r2d2-speed": 16_000_000,
           "h100-side-by-side": 16_000_000}


def episodes_path(run_id: str) -> Path:
    return EPISODES / f"{run_id}.csv"


def read_episodes(run_id: str) -> pd.DataFrame:
    path = episodes_path(run_id)
    if not path.exists():
        raise SystemExit(f"{RUNS.name}: run {run_id}: no episode file {path}")
    return pd.read_csv(path).sort_values("frames", kind="stable").reset_index(drop=True)


def computed_columns(run_id: str, level: str) -> dict[str, int | None]:
    """The frame columns from a run's episodes; the Pong thresholds only for Pong."""
    return frame_columns(read_episodes(run_id), level)


def read_runs() -> pd.DataFrame:
    runs = pd.read_csv(RUNS, dtype={"commit": str, "flags": str, "note": str})
    unknown = set(runs["figure"]) - set(GROUPS) - {SUITE_GROUP, TRIAL_GROUP}
    if unknown:
        raise SystemExit(f"{RUNS.name}: unknown figure group(s) {sorted(unknown)}; "
                         f"known: {sorted([*GROUPS, SUITE_GROUP, TRIAL_GROUP])}")
    if runs["id"].duplicated().any():
        raise SystemExit(f"{RUNS.name}: duplicate ids {list(runs['id'][runs['id'].duplicated()])}")
    return runs


def disagreements(runs: pd.DataFrame) -> list[str]:
    """Where the table's computed columns differ from its episodes."""
    found = []
    for index, row in runs.iterrows():
        for column, value in computed_columns(row["id"], row["level"]).items():
            stored = row[column]
            stored = None if pd.isna(stored) else int(stored)
            if stored != value:
                found.append(f"line {index + 2}, {row['id']}: {column} is {stored}, "
                             f"the episodes say {value}")
    return found


def update(runs: pd.DataFrame) -> pd.DataFrame:
    for index, row in runs.iterrows():
        for column, value in computed_columns(row["id"], row["level"]).items():
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


def definitions() -> list[str]:
    return [f"Frames are environment frames (4 per agent step on Atari). A threshold is "
            f"reached when the mean return of the last {RETURN_WINDOW} episodes first meets "
            f"it. Ape-X and R2D2 explore with a fixed epsilon per environment, up to 0.4; "
            f"\"least exploring third\" counts only the episodes of the third of "
            f"environments that explore least (epsilon <= {LEAST_EXPLORING_EPSILON:.4f}), the "
            f"return RLlib's Ape-X reports.", ""]


def solved(group: str, rows: pd.DataFrame) -> str:
    """How many of a group's runs reached +18, and how many within its frame budget."""
    budget = BUDGETS.get(group, 5_000_000)
    reached = int(rows["frames_to_plus18"].notna().sum())
    within = int((rows["frames_to_plus18"] <= budget).sum())
    return f"{reached} of {len(rows)} runs ({within} within {budget / 1e6:g}M frames)"


def run_cells(row: pd.Series) -> list[str]:
    def cell(column: str, form: str = "{}") -> str:
        return "" if pd.isna(row[column]) else form.format(row[column])
    return [row["id"], str(row["seed"]), row["machine"], row["commit"], cell("flags", "`{}`"),
            millions(row["frames_to_minus15"]), millions(row["frames_to_plus18"]),
            least_exploring(row), cell("wall_min_to_plus18", "{:g}"),
            cell("greedy_score", "{:g}"), cell("note")]


def page(runs: pd.DataFrame, name: str) -> str:
    """One algorithm's page: per group its figure and a row per run."""
    lines = [f"# {PAGES[name]} (generated by `make results` from runs.csv; do not edit)", "",
             "Back to [the summary](SUMMARY.md).", "", *definitions()]
    for group, (group_page, title) in GROUPS.items():
        if group_page != name:
            continue
        rows = runs[runs["figure"] == group]
        lines += [f"## {title}", "", f"![{title}](figures/{group}.png)", "",
                  f"+18 reached in {solved(group, rows)}.", "",
                  "| run | seed | machine | commit | flags | to -15 | to +18 | to +18, least "
                  "exploring third | minutes to +18 | greedy | note |",
                  "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        lines += ["| " + " | ".join(run_cells(row)) + " |" for _, row in rows.iterrows()]
        lines.append("")
    return "\n".join(lines)


def summary(runs: pd.DataFrame) -> str:
    """The index: every group in one line, linking to its algorithm's page."""
    lines = ["# Results (generated by `make results` from runs.csv; do not edit)", "",
             *definitions(), "Every run is a row of [`runs.csv`](runs.csv) with its episodes "
             "in [`episodes/`](episodes/) (a suite's run also keeps its learner's logs in "
             "[`learner-logs/`](learner-logs/)); each algorithm's page shows them per group.",
             "",
             "| group | page | runs | +18 | +18, least exploring third |",
             "| --- | --- | ---: | --- | ---: |"]
    for group, (name, title) in GROUPS.items():
        rows = runs[runs["figure"] == group]
        least = rows["least_exploring_to_plus18"].notna().sum()
        anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")  # GitHub's rule
        lines.append(f"| [{title}]({name}.md#{anchor}) | [{PAGES[name]}]({name}.md) | "
                     f"{len(rows)} | {solved(group, rows)} | "
                     f"{'' if name == 'impala' else least} |")
    return "\n".join(lines) + "\n"


def written_pages(runs: pd.DataFrame) -> dict[Path, str]:
    """Every generated page and its text."""
    pages = {SUMMARY: summary(runs), **{HERE / f"{name}.md": page(runs, name) for name in PAGES}}
    suite = runs[runs["figure"] == SUITE_GROUP]
    if len(suite):
        pages[scores.PAGE] = scores.page(suite, read_episodes,
                                         runs[runs["figure"] == TRIAL_GROUP])
    pages[README] = readme_with_table(suite)
    return pages


def readme_with_table(suite: pd.DataFrame) -> str:
    """README.md with the suite's table (scores.readme_table) between its marks."""
    text = README.read_text()
    begin, end = TABLE_MARKS
    if begin not in text or end not in text:
        raise SystemExit(f"{README}: the suite's table needs the lines {begin!r} and {end!r}")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    return f"{head}{begin}\n{scores.readme_table(suite, read_episodes)}{end}{tail}"


def stale(runs: pd.DataFrame) -> list[str]:
    return [path.name for path, text in written_pages(runs).items()
            if not path.exists() or path.read_text() != text]


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
        outdated = stale(runs)
        if outdated:
            print(f"{', '.join(outdated)} differ from {RUNS}: `make results` "
                  f"rewrites them", file=sys.stderr)
            return 1
        print(f"{RUNS}: {len(runs)} runs agree with their episodes and pages")
        return 0
    FIGURES.mkdir(exist_ok=True)
    for group in GROUPS:
        ids = runs["id"][runs["figure"] == group]
        beside_group = BESIDE.get(group)
        beside = runs["id"][runs["figure"] == beside_group]
        overlay([episodes_path(run_id) for run_id in ids], FIGURES / f"{group}.png",
                [episodes_path(run_id) for run_id in beside],
                f"{beside_group} group ({len(beside)} runs)")
    scores.draw(runs[runs["figure"] == SUITE_GROUP], read_episodes, FIGURES,
                runs[runs["figure"] == TRIAL_GROUP])
    for path, text in written_pages(runs).items():
        path.write_text(text)
    print(f"wrote {SUMMARY}, {len(PAGES)} pages and {len(GROUPS)} figures in {HERE}, "
          f"and the suite's table in {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
