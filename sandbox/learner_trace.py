"""How did a run's learner move over its frames? Average the learner's logged statistics
(`logs.csv`) and the score (the mean return of the episodes that ended, `episodes-*.csv`)
over spans of frames (each 1M by default, as the suite scores a run), and print them as a
table with a column per span:

  .venv/bin/python sandbox/learner_trace.py impala-namethisgame-v5-s1   # a suite's row
  .venv/bin/python sandbox/learner_trace.py runs/suite/impala-phoenix-v5-s1   # a run directory
  .venv/bin/python sandbox/learner_trace.py <run> --per=500000 --start=7000000 \
      --columns=learning_rate,entropy,trust_region_masked
  .venv/bin/python sandbox/learner_trace.py <run> --statistic=q0.99 --columns=policy_kl

A suite's row is found by its id in `results/`: the learner's logs the suite kept
(`learner-logs/<id>.csv.gz`) and its episodes (`episodes/<id>.csv`).

A run's `logs.csv` is one row per logging interval, so a span's value is the mean of the
rows logged in it (intervals are of about equal length), or with `--statistic` their median
or a quantile (`q0.99`: the value 99% of the rows are at or below), which shows the rare
large rows that a mean hides. The `score` row is always the mean return of the episodes
that ended in the span, as the suite scores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from suite_records import LEARNER_LOGS  # noqa: E402

from results.scores import span_ends  # noqa: E402

RESULTS = ROOT / "results"

DEFAULT_COLUMNS = ("learning_rate", "grad_norm", "baseline_loss", "entropy", "policy_kl",
                   "trust_region_masked")


def span_statistic(rows: pd.DataFrame, values: list[str], per: int, start: int,
                   statistic: str | float = "mean") -> pd.DataFrame:
    """`statistic` ("mean", "median", or a quantile's fraction) of each of `values` over the
    rows whose `frames` fall in each span of `per` frames after `start`, (end - per, end] as
    the suite's scores: a DataFrame [span, value] indexed by the span's last frame."""
    rows = rows[rows["frames"] > start]
    spans = rows.groupby(span_ends(rows["frames"], per, start))[values]
    if isinstance(statistic, float):
        return spans.quantile(statistic)
    return spans.agg(statistic)


def parse_statistic(text: str) -> str | float:
    """"mean" or "median" as they are, "q<fraction>" as the fraction (a float in [0, 1]);
    anything else an argparse error."""
    if text in ("mean", "median"):
        return text
    try:
        fraction = float(text[1:]) if text.startswith("q") else -1.0
    except ValueError:
        fraction = -1.0
    if not 0.0 <= fraction <= 1.0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: mean, median, or q followed by a fraction in [0, 1] (q0.99)")
    return fraction


def run_files(run: str) -> tuple[Path, list[Path]]:
    """(logs, episode files) of `run`: a run directory, else a suite row's id in results/."""
    if Path(run, "logs.csv").is_file():
        return Path(run, "logs.csv"), sorted(Path(run).glob("episodes-*.csv"))
    logs = RESULTS / LEARNER_LOGS / f"{run}.csv.gz"
    if logs.is_file():
        episodes = RESULTS / "episodes" / f"{run}.csv"
        return logs, [episodes] if episodes.is_file() else []
    raise SystemExit(f"{run}: neither a run directory with a logs.csv nor a suite run kept "
                     f"in {RESULTS / LEARNER_LOGS}")


def trace(logs_file: Path, episode_files: list[Path], columns: list[str], per: int,
          start: int, statistic: str | float = "mean") -> pd.DataFrame:
    """Rows: the run's `score` and each of `columns`; columns: the spans, named by their
    last frame in millions (the suite's score at 5M is the span that ends at 5M)."""
    logs = pd.read_csv(logs_file)
    unknown = [c for c in columns if c not in logs.columns]
    if unknown:
        raise SystemExit(f"{logs_file}: no column {', '.join(unknown)}; it has "
                         f"{', '.join(logs.columns)}")
    table = span_statistic(logs, columns, per, start, statistic)
    if episode_files:
        episodes = pd.concat(pd.read_csv(f) for f in episode_files)
        score = span_statistic(episodes, ["episode_return"], per, start)["episode_return"]
        table.insert(0, "score", score)
    table.index = [f"{end / 1e6:g}M" for end in table.index]
    return table.T


def markdown(table: pd.DataFrame) -> str:
    """`table` as a Markdown table, 4 significant digits."""
    lines = ["| | " + " | ".join(table.columns) + " |",
             "| --- |" + " ---: |" * len(table.columns)]
    for name, row in table.iterrows():
        cells = ["-" if pd.isna(v) else f"{v:.4g}" for v in row]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory, or the id of a suite's row")
    parser.add_argument("--columns", default=",".join(DEFAULT_COLUMNS),
                        help="logs.csv columns to average, comma-separated")
    parser.add_argument("--per", type=int, default=1_000_000, help="frames per span")
    parser.add_argument("--start", type=int, default=0, help="the first span's first frame")
    parser.add_argument("--statistic", type=parse_statistic, default="mean",
                        help="of the logged rows in a span: mean, median, or a quantile "
                             "such as q0.99 (the score is always the mean)")
    args = parser.parse_args()
    if args.per <= 0 or args.start < 0:
        parser.error("--per must be > 0 and --start >= 0")
    columns = [c for c in args.columns.split(",") if c]
    print(markdown(trace(*run_files(args.run), columns, args.per, args.start,
                         args.statistic)))


if __name__ == "__main__":
    main()
