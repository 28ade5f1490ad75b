"""The run directory's logs: each process's log file, and the rows a learner writes.

<logdir>/<run_name>/
  meta.json          what the run was (meta.py)
  curve.png          the learning curve, redrawn after every log row (curves.py)
  logs.csv           one row per logging interval (rank 0), flushed as written
  learner-<r>.csv    per-rank throughput and parameter checksum (sync can be checked)
  episodes-<r>.csv   every finished episode seen by learner r (raw return and length, then
                     the algorithm's episode tags)
  events.out.tfevents.*  TensorBoard scalars (rank 0)
  checkpoint.pt      see checkpoint.py
  *.log              one log file per process
"""

from __future__ import annotations

import csv
import logging
import numbers
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from impala.algorithm import StatusItem
    from impala.counters import Counters, IntervalStats
    from impala.receiver import ReceiverCounts
    from impala.unroll.reader import EpisodeStats

# logs.csv: these, then the algorithm's own scalars (Algorithm.log_scalars). `interval_s`: the
# seconds a row covers, since the row before or since training (re)started, so the sum is the
# time trained; the first row's span counts, and a stop between two rows does not.
LOG_COLUMNS = [
    "time", "frames", "sps", "interval_s", "updates", "episodes", "mean_episode_return",
    "mean_episode_length", "total_loss", "grad_norm", "learning_rate", "policy_lag",
    "queue_depth", "dropped_messages", "unroll_bytes", "stream_restarts", "skipped_updates",
    "feature_std", "dead_features", "dormant_units", "recycled_units", "replay_fill",
    "replayed_share", "replay_age",
]
# param_checksum: the sum of the parameters, readable; state_digest: a hash of everything the
# ranks must hold identically (distributed.state_digest). Both equal across ranks at a row.
RANK_COLUMNS = ["time", "updates", "frames", "local_frames", "local_sps", "param_checksum",
                "state_digest"]
# The algorithm's episode tags follow these (impala/algorithm.py `episode_tags`).
EPISODE_COLUMNS = ["time", "frames", "episode_return", "episode_length"]


def setup_logging(log_file: Path | None, name: str) -> logging.Logger:
    """Log to stderr and, if given, to `log_file` (appending, so resumes keep history)."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.handlers.clear()
    formatter = logging.Formatter(f"%(asctime)s {name} %(levelname)s %(message)s", "%H:%M:%S")
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(formatter)
    root.addHandler(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file)
        handler.setFormatter(formatter)
        root.addHandler(handler)
    return logging.getLogger(name)


def drop_rows_after(path: Path, frames: int) -> int:
    """Remove the rows of a log CSV whose `frames` exceed `frames`: what a learner wrote
    after the checkpoint a restarted run resumes from, whose frames are trained again, so
    the file stays one series and no frame is counted twice. Returns how many went."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with open(path, newline="") as file:
        rows = list(csv.reader(file))
    header, body = rows[0], rows[1:]
    if "frames" not in header:
        return 0
    column = header.index("frames")
    kept = [row for row in body if len(row) <= column or not row[column]
            or float(row[column]) <= frames]
    if len(kept) == len(body):
        return 0
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", newline="") as file:
        csv.writer(file, lineterminator="\n").writerows([header, *kept])
    os.replace(temporary, path)
    return len(body) - len(kept)


class CsvLog:
    """Append rows to a CSV with a fixed header, flushing each row (nothing lost on a crash)."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        new = not path.exists() or path.stat().st_size == 0
        if not new:
            # A resumed run appends under the header already there (an older version may
            # have written fewer columns), so rows never shift against their header.
            with open(path, newline="") as existing:
                columns = next(csv.reader(existing), None) or columns
        self.columns = columns
        self._file = open(path, "a", newline="")  # noqa: SIM115 - closed in close()
        # "\n", not the csv module's "\r\n": the files are copied into results/ beside
        # pandas-written ones, and git shows a line-end change as the whole file changed
        self._writer = csv.DictWriter(self._file, fieldnames=columns, extrasaction="ignore",
                                      lineterminator="\n")
        if new:
            self._writer.writeheader()
            self._file.flush()

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow({k: _format(row.get(k)) for k in self.columns})
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _format(value: Any) -> Any:
    """Plain numbers (NumPy scalars too); floats at full precision, since checksums are
    compared across ranks."""
    if isinstance(value, numbers.Integral | np.bool_):  # bool is Integral; np.bool_ is not
        return int(value)
    if isinstance(value, numbers.Real):
        return repr(float(value))
    return "" if value is None else value


class TensorBoard:
    """Scalars by global frame count; a no-op where tensorboard is not importable."""

    def __init__(self, run_dir: Path, resume_frames: int = 0) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # pragma: no cover - tensorboard is a dependency
            self._writer = None
            return
        # A resumed run hides the points written after its checkpoint's frame count.
        self._writer = SummaryWriter(log_dir=str(run_dir), purge_step=resume_frames or None)

    def write(self, row: dict[str, Any], step: int) -> None:
        if self._writer is None:
            return
        for key, value in row.items():
            if key not in ("time", "frames") and isinstance(value, int | float):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def status_line(row: dict[str, Any], total_frames: int, elapsed_s: float,
                start_frames: float, items: Sequence[StatusItem] = ()) -> str:
    """`frames 1.2M/200M (0.6%) | ETA 3h12m | SPS 1,850 | return -20.1 (12 eps) | lag 4.1`
    and then the algorithm's `items` (`| loss 3.2`), from a logs.csv row (missing values
    show as n/a)."""
    frames = row["frames"]
    done = frames - start_frames
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    eta = (total_frames - frames) / rate if rate > 0 else float("inf")
    return (f"frames {_human(frames)}/{_human(total_frames)} "
            f"({100.0 * frames / total_frames:.1f}%) | ETA {_duration(eta)} | "
            f"SPS {_shown(row.get('sps'), ',.0f')} | "
            f"return {_shown(row.get('mean_episode_return'), '.1f')} "
            f"({_shown(row.get('episodes'), '.0f')} eps) | "
            f"lag {_shown(row.get('policy_lag'), '.1f')}"
            + "".join(f" | {item.label} {_shown(row.get(item.column), item.format)}"
                      for item in items))


def _shown(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _human(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{int(seconds) % 60:02d}s"


class RowSink(Protocol):
    def log(self, row: dict[str, Any]) -> None: ...


class LearnerLogs:
    """Every file a learner writes while it trains. Each rank: `learner-<rank>.csv` (sync
    check) and `episodes-<rank>.csv`; rank 0 also `logs.csv` and TensorBoard events
    (`curve.png` is curves.py's, drawn from these files)."""

    def __init__(self, run_dir: Path, rank: int, scalars: Sequence[str] = (),
                 episode_tags: Sequence[str] = (), tracker: RowSink | None = None,
                 resume_frames: int = 0) -> None:
        """`resume_frames`: the frame count the run (re)starts from; rows past it, written
        after that checkpoint by a learner that then died, are removed first."""
        self.is_chief = rank == 0
        self.tracker = tracker  # rank 0's W&B run (tracking.py), where there is one
        names = [f"learner-{rank}.csv", f"episodes-{rank}.csv",
                 *(["logs.csv"] if self.is_chief else [])]
        dropped = sum(drop_rows_after(run_dir / name, resume_frames) for name in names)
        if dropped:
            logging.getLogger("learner").warning(
                "rank %d: removed %d log rows written after the checkpoint's %d frames "
                "(trained again from there)", rank, dropped, resume_frames)
        self.rank_log = CsvLog(run_dir / f"learner-{rank}.csv", RANK_COLUMNS)
        self.episode_log = CsvLog(run_dir / f"episodes-{rank}.csv",
                                  [*EPISODE_COLUMNS, *episode_tags])
        self.run_log = (CsvLog(run_dir / "logs.csv", [*LOG_COLUMNS, *scalars])
                        if self.is_chief else None)
        self.tensorboard = TensorBoard(run_dir, resume_frames) if self.is_chief else None

    def episodes(self, frames: int, episodes: EpisodeStats) -> None:
        now = time.time()
        for episode_return, length, tags in zip(episodes.returns, episodes.lengths,
                                                episodes.tags, strict=True):
            self.episode_log.write({**tags, "time": now, "frames": frames,
                                    "episode_return": episode_return, "episode_length": length})

    def interval(self, interval: IntervalStats, counters: Counters, param_checksum: float,
                 state_digest: str, frames_per_step: int, received: ReceiverCounts,
                 queue_depth: int, skipped_updates: int) -> dict[str, Any] | None:
        """The rows of a log interval that ends now: this rank's, and on rank 0 the run's
        (logs.csv, TensorBoard, W&B), which it returns (None elsewhere)."""
        now = time.time()
        elapsed = max(now - interval.start_time, 1e-9)
        self.rank_log.write({
            "time": now, "updates": counters.updates, "frames": counters.frames,
            "local_frames": interval.local_frames,
            "local_sps": interval.local_frames / frames_per_step / elapsed,
            "param_checksum": param_checksum, "state_digest": state_digest,
        })
        if not self.is_chief:
            return None
        episodes = int(interval.episodes)
        row = {
            "time": now, "frames": counters.frames,
            "sps": (counters.frames - interval.start_frames) / frames_per_step / elapsed,
            "interval_s": elapsed, "updates": counters.updates, "episodes": episodes,
            "mean_episode_return": interval.return_sum / episodes if episodes else None,
            "mean_episode_length": interval.length_sum / episodes if episodes else None,
            **interval.last,
            "policy_lag": float(np.mean(interval.lags)) if interval.lags else 0.0,
            "queue_depth": queue_depth, "dropped_messages": received.dropped,
            "unroll_bytes": received.unroll_bytes, "stream_restarts": received.stream_restarts,
            "skipped_updates": skipped_updates,
        }
        self.run_row(row)
        return row

    def run_row(self, row: dict[str, Any]) -> None:
        """One row of logs.csv and TensorBoard (rank 0 only; ignored elsewhere)."""
        if self.run_log is None or self.tensorboard is None:
            return
        self.run_log.write(row)
        self.tensorboard.write(row, row["frames"])
        if self.tracker is not None:
            self.tracker.log(row)

    def close(self) -> None:
        for writer in (self.rank_log, self.episode_log, self.run_log, self.tensorboard):
            if writer is not None:
                writer.close()
