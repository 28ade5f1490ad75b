"""Pictures of learning: `curve.png` in a run directory, and several runs overlaid.

`curve.png` has panels over frames: the episode return (each episode faint, the mean of the
last 30 bold), then the panels the run's algorithm declares (impala/algorithm.py `Panel`,
kept in meta.json: its loss terms, values, replay...), then agent steps per second. While a
run trains, plotter.py's watcher process redraws it after every log row.

  impala-curves RUN_DIR                       # redraw RUN_DIR/curve.png
  impala-curves RUN_DIR RUN_DIR... --out=compare.png   # overlay runs: return vs frames
                                                        # and vs wall time
  impala-curves results/episodes/a.csv RUN_DIR --out=compare.png  # kept episodes files too
Only matplotlib's Agg backend is used: no display is needed.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from impala.algorithm import Panel
from impala.logs import EPISODE_COLUMNS
from impala.registry import algorithm_class, default_algorithm

log = logging.getLogger("curves")

CURVE_NAME = "curve.png"
RETURN_WINDOW = 30  # episodes in the bold running mean
# A running learner writes a log row every --log_interval_s (5 s by default); a silence of
# more than this (or of 3 median intervals, if longer) is a stop and a resume, not training.
STOPPED_GAP_S = 300.0


def _figure(rows: int, cols: int, size: tuple[float, float]):
    # The object API with an Agg canvas: no pyplot state and no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=90, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, cols, squeeze=False)


def read_csv(path: Path) -> pd.DataFrame | None:
    try:
        frame = pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return None
    return frame if len(frame) else None


def episodes_of(run_dir: Path) -> pd.DataFrame | None:
    """Every episode the learners here saw (all ranks' files), in order of frames."""
    frames = [f for f in (read_csv(p) for p in sorted(run_dir.glob("episodes-*.csv")))
              if f is not None]
    if not frames:
        return None
    return pd.concat(frames).sort_values("frames", kind="stable").reset_index(drop=True)


def running_return(episodes: pd.DataFrame) -> pd.Series:
    return episodes["episode_return"].rolling(RETURN_WINDOW, min_periods=1).mean()


def running_minutes(logs: pd.DataFrame, times: pd.Series) -> np.ndarray:
    """Minutes the run had been training at each of `times` (seconds since the epoch).

    Rows carry the seconds each covers (`interval_s`), since the row before or since the
    learner (re)started, so a row ends at the sum of the spans up to it: the first row's
    span counts and a stop between two rows does not. A time between two rows' spans (an
    episode written just before a stop or just after a resume) counts as the row before it.
    Logs from before `interval_s` was written fall back to `_minutes_from_gaps`.
    """
    spans = logs["interval_s"].to_numpy(dtype=float) if "interval_s" in logs else None
    if spans is None or len(spans) == 0 or np.isnan(spans).any():
        return _minutes_from_gaps(logs, times)
    log_times = logs["time"].to_numpy(dtype=float)
    at = times.to_numpy(dtype=float)
    row_end = np.cumsum(spans) / 60  # [rows]
    index = np.searchsorted(log_times, at).clip(0, len(log_times) - 1)  # the row ending next
    minutes = row_end[index] - (log_times[index] - at) / 60
    minutes = np.maximum(minutes, np.where(index > 0, row_end[index - 1], 0.0))
    after_last = at > log_times[-1]
    minutes[after_last] = row_end[-1] + (at[after_last] - log_times[-1]) / 60
    return minutes


def _minutes_from_gaps(logs: pd.DataFrame, times: pd.Series) -> np.ndarray:
    """`running_minutes` for logs without `interval_s`: time from the first row, less each
    silence between two rows longer than STOPPED_GAP_S (the first row's span is unknown)."""
    log_times = logs["time"].to_numpy(dtype=float)
    at = times.to_numpy(dtype=float)
    gaps = np.diff(log_times)
    longest_interval = max(STOPPED_GAP_S, 3 * float(np.median(gaps))) if len(gaps) else 0.0
    stopped = np.concatenate([[0.0], np.cumsum(np.where(gaps > longest_interval, gaps, 0.0))])
    row_minutes = (log_times - log_times[0] - stopped) / 60  # per row, [rows]
    after = np.searchsorted(log_times, at).clip(0, len(log_times) - 1)  # next row's index
    minutes = (at - log_times[0] - stopped[after]) / 60
    return np.maximum(minutes, row_minutes[np.maximum(after - 1, 0)])


def panels_of(run_dir: Path) -> list[Panel]:
    """The algorithm's panels, as meta.json keeps them; for a run from before they were
    kept there, those its algorithm declares now (without meta.json: the default
    algorithm's, the only one there was); none if the algorithm is unknown."""
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError):
        meta = {"flags": {}}
    if "panels" in meta:
        return [Panel(p["title"], tuple(p["columns"]), p["symlog"], _tag_at_most(p))
                for p in meta["panels"]]
    try:
        return list(algorithm_class(meta["flags"].get("algorithm") or default_algorithm()
                                    ).panels)
    except (KeyError, ValueError):
        return []


def plot_run(run_dir: Path, out: Path | None = None) -> Path | None:
    """Draw `run_dir`'s curve.png (or `out`); None if it has no log rows yet."""
    logs = read_csv(run_dir / "logs.csv")
    if logs is None:
        return None
    episodes = episodes_of(run_dir)
    panels = panels_of(run_dir)
    count = len(panels) + 2
    columns = 2 if count <= 4 else 3
    rows = math.ceil(count / columns)
    figure, axes = _figure(rows, columns, (5.5 * columns, 3.5 * rows))
    axes = list(axes.flat)
    millions = logs["frames"] / 1e6
    _draw_returns(axes[0], episodes)
    for ax, panel in zip(axes[1:], panels, strict=False):
        if panel.tag_at_most is not None:
            _draw_tagged_returns(ax, episodes, panel)
        else:
            for column in panel.columns:
                if column in logs:
                    ax.plot(millions, logs[column], label=column, linewidth=1)
            if panel.symlog:
                ax.set_yscale("symlog")
            if len(panel.columns) > 1:
                ax.legend(fontsize=8)
        ax.set_title(panel.title)
    axes[count - 1].plot(millions, logs["sps"], color="tab:green")
    axes[count - 1].set_title("agent steps per second")
    for ax in axes[:count]:
        ax.set_xlabel("frames (millions)")
        ax.grid(alpha=0.3)
    for ax in axes[count:]:
        ax.set_visible(False)
    minutes = running_minutes(logs, logs["time"])[-1]
    latest = f", return {running_return(episodes).iloc[-1]:.1f}" if episodes is not None else ""
    figure.suptitle(f"{run_dir.name}: {logs['frames'].iloc[-1] / 1e6:.2f}M frames in "
                    f"{minutes:.0f} min{latest}")
    return _save(figure, out or run_dir / CURVE_NAME)


def _draw_returns(ax, episodes: pd.DataFrame | None) -> None:
    if episodes is not None:
        ax.scatter(episodes["frames"] / 1e6, episodes["episode_return"], s=3, alpha=0.25,
                   color="tab:blue", label="episode")
        ax.plot(episodes["frames"] / 1e6, running_return(episodes), color="tab:blue",
                linewidth=2, label=f"mean of last {RETURN_WINDOW}")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_title("episode return (raw score)")


def _tag_at_most(panel: dict) -> tuple[str, float] | None:
    """A panel's (tag, limit) as meta.json keeps it (JSON makes the pair a list)."""
    pair = panel.get("tag_at_most")
    return None if pair is None else (str(pair[0]), float(pair[1]))


def _draw_tagged_returns(ax, episodes: pd.DataFrame | None, panel: Panel) -> None:
    """The running mean return of the episodes whose tag was at most the panel's limit."""
    tag, limit = panel.tag_at_most
    if episodes is None or tag not in episodes:
        return
    greedy = episodes[episodes[tag] <= limit].reset_index(drop=True)
    if len(greedy):
        ax.scatter(greedy["frames"] / 1e6, greedy["episode_return"], s=3, alpha=0.25,
                   color="tab:red")
        ax.plot(greedy["frames"] / 1e6, running_return(greedy), color="tab:red", linewidth=2)


def overlay(sources: list[Path], out: Path, background: list[Path] = (),
            background_label: str = "") -> Path:
    """Running mean return of several runs against frames and against wall time.

    A source is a run directory or an episodes CSV kept from one (`results/episodes/`); a
    CSV's minutes count from its first episode, and a stop inside it is not left out.
    `background` runs are drawn thin and grey under them, labelled once, to compare with.
    """
    figure, axes = _figure(1, 2, (12, 4.5))
    for index, source in enumerate(background):
        _plot_run(axes, source, background_label if index == 0 else None,
                  color="0.75", lw=0.8)
    for source in sources:
        if not _plot_run(axes, source, source.stem if source.is_file() else source.name):
            log.warning("%s: no episodes or log rows yet; left out", source)
    for ax, xlabel in zip(axes.flat, ("frames (millions)", "wall time (minutes)"),
                          strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"mean return, last {RETURN_WINDOW} episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(figure, out)


def _plot_run(axes, source: Path, label: str | None, **style) -> bool:
    """A run's running mean return against frames and against minutes, on the two panels
    of `axes` [1, 2]; False where it has no episodes yet."""
    episodes, minutes = _episodes_and_minutes(source)
    if episodes is None:
        return False
    mean = running_return(episodes)
    axes[0, 0].plot(episodes["frames"] / 1e6, mean, label=label, **style)
    axes[0, 1].plot(minutes, mean, label=label, **style)
    return True


def _episodes_and_minutes(source: Path) -> tuple[pd.DataFrame | None, np.ndarray]:
    """A source's episodes in order of frames, and the minutes it had trained at each."""
    if source.is_file():
        episodes = read_csv(source)
        if episodes is None:
            return None, np.empty(0)
        episodes = episodes.sort_values("frames", kind="stable").reset_index(drop=True)
        return episodes, (episodes["time"] - episodes["time"].min()).to_numpy() / 60
    episodes = episodes_of(source)
    logs = read_csv(source / "logs.csv")
    if episodes is None or logs is None:
        return None, np.empty(0)
    return episodes, running_minutes(logs, episodes["time"])


def _save(figure, out: Path) -> Path:
    tmp = out.with_name(out.name + ".tmp.png")  # a reader never sees half a picture
    figure.savefig(tmp)
    os.replace(tmp, out)
    return out


def draw(run_dir: Path) -> None:
    """plot_run that only warns when it fails: a picture must never stop training."""
    try:
        plot_run(run_dir)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, training goes on
        log.warning("could not draw %s: %s", run_dir / CURVE_NAME, exc)


def _is_episodes_csv(path: Path) -> bool:
    """A file whose header starts as the learner's episodes-<r>.csv header does (the
    algorithm's episode tags may follow)."""
    if not path.is_file():
        return False
    with open(path) as f:
        header = f.readline().strip().split(",")
    return header[:len(EPISODE_COLUMNS)] == EPISODE_COLUMNS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="impala-curves", description="Draw a run's curve.png, or overlay several runs.")
    parser.add_argument("run_dirs", nargs="+", type=Path,
                        help="run directories (with --out, also episodes CSV files)")
    parser.add_argument("--out", type=Path, help="overlay the runs into this PNG")
    args = parser.parse_args(argv)
    if args.out is not None:
        wrong = [str(p) for p in args.run_dirs
                 if not ((p / "logs.csv").exists() or _is_episodes_csv(p))]
        if wrong:
            parser.error("neither a run directory (no logs.csv) nor an episodes CSV (columns "
                         f"{', '.join(EPISODE_COLUMNS)}): {', '.join(wrong)}")
        print(overlay(args.run_dirs, args.out))
        return 0
    missing = [str(d) for d in args.run_dirs if not (d / "logs.csv").exists()]
    if missing:
        parser.error(f"not a run directory (no logs.csv): {', '.join(missing)}")
    for run_dir in args.run_dirs:
        print(plot_run(run_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
