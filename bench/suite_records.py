"""What the benchmark suite keeps of each run, across stops and machines: its id and
places (`SuiteRun`), its record (the commit it started at, its resumes), the state a resume
on a new machine needs (`results/suite-state/<run id>/`), and at its end its row in
`results/runs.csv` with its episodes file and its learner's logs. `bench/suite.py` runs the
games.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import common
import pandas as pd

from impala.logs import EPISODE_COLUMNS
from results.columns import frame_columns
from results.scores import iteration_means, return_cell

STATE_FILES = ("checkpoint.pt", "logs.csv", "episodes-0.csv", "meta.json")
GROUP = "suite"
TRIAL_GROUP = "suite-trial"  # other settings, beside the defaults on the suite's page
LEARNER_LOGS = "learner-logs"  # results/learner-logs/<run id>.csv.gz: a recorded run's logs.csv


@dataclass(frozen=True)
class SuiteRun:
    """One game of the suite: where it runs and where its records go."""

    game: str
    algorithm: str
    seed: int
    frames: int
    logdir: Path
    results: Path
    trial: str = ""  # a trial's name: its flags differ from the defaults
    until: int = 0  # a trial's last frame, on the schedule of `frames` (0: all of them)

    @property
    def level(self) -> str:
        return f"ALE/{self.game}-v5"

    @property
    def run_id(self) -> str:
        trial = f"-{self.trial}" if self.trial else ""
        return f"{self.algorithm}-{self.game.lower()}-v5-s{self.seed}{trial}"

    @property
    def last_frame(self) -> int:
        return self.until or self.frames

    def reached_its_end(self) -> bool:
        return frames_so_far(self.run_dir) >= self.last_frame

    @property
    def run_dir(self) -> Path:
        return self.logdir / self.run_id

    @property
    def state_dir(self) -> Path:
        return self.results / "suite-state" / self.run_id

    @property
    def record_file(self) -> Path:
        return self.state_dir / "suite.json"


def read_record(run: SuiteRun) -> dict:
    """What the suite keeps of a run across stops: commit at its start, resumes, how many
    of them began without the replay."""
    if run.record_file.exists():
        return json.loads(run.record_file.read_text())
    return {"commit": common.git_commit(), "resumes": 0, "resumes_without_replay": 0}


def write_record(run: SuiteRun, record: dict) -> None:
    run.state_dir.mkdir(parents=True, exist_ok=True)
    run.record_file.write_text(json.dumps(record, indent=1) + "\n")


def finished_ids(results: Path) -> set[str]:
    runs = results / "runs.csv"
    return set(pd.read_csv(runs)["id"]) if runs.exists() else set()


def frames_so_far(run_dir: Path) -> int:
    """The frame count of the run's last log row (0 before the first)."""
    logs = rows_of(run_dir / "logs.csv")
    return 0 if logs is None else int(logs["frames"].iloc[-1])


def rows_of(path: Path) -> pd.DataFrame | None:
    """A CSV file's rows; None while it is missing, empty or only its header."""
    try:
        table = pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None
    return table if len(table) else None


def meta(run_dir: Path) -> dict:
    """The run's meta.json ({} before the learner writes it)."""
    try:
        return json.loads((run_dir / "meta.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def resumed_from(run: SuiteRun) -> Path | None:
    """Where the checkpoint a resume would start from is: the run directory, else the
    saved state; None if neither has one."""
    for place in (run.run_dir, run.state_dir):
        if (place / "checkpoint.pt").exists():
            return place
    return None


def preset_changes(run: SuiteRun, preset_now: dict) -> dict[str, tuple]:
    """The preset values a resume would change: name -> (the saved run's, `preset_now`'s).
    A run of the suite is the defaults of one version of the preset; a resume under
    another would record a mixture of the two as the defaults' row."""
    place = resumed_from(run)
    then = None if place is None else meta(place).get("preset_values")
    if then is None:  # nothing saved yet
        return {}
    now = json.loads(json.dumps(preset_now))  # as meta.json has them: lists, not tuples
    return {name: (then.get(name), now.get(name)) for name in sorted({*then, *now})
            if then.get(name) != now.get(name)}


def save_state(run: SuiteRun) -> None:
    """Copy what a resume on another machine needs into the run's state folder."""
    run.state_dir.mkdir(parents=True, exist_ok=True)
    for name in STATE_FILES:
        source = run.run_dir / name
        if source.exists():
            target = run.state_dir / name
            shutil.copy2(source, target.with_name(name + ".tmp"))
            os.replace(target.with_name(name + ".tmp"), target)


def restore_state(run: SuiteRun) -> bool:
    """Lay a saved state into a run directory that lacks a checkpoint; True if one was."""
    if (run.run_dir / "checkpoint.pt").exists() or not (run.state_dir / "checkpoint.pt").exists():
        return False
    run.run_dir.mkdir(parents=True, exist_ok=True)
    for name in STATE_FILES:
        if (run.state_dir / name).exists():
            shutil.copy2(run.state_dir / name, run.run_dir / name)
    return True


class NothingToRecord(Exception):
    """A run reached its last frame before any episode of it ended: it has no score."""


def record_row(run: SuiteRun, extra: list[str]) -> None:
    """The finished run as a row of runs.csv, with its episodes file beside it. Raises
    NothingToRecord, leaving the saved state, if no episode ended by the run's last frame."""
    episodes = rows_of(run.run_dir / "episodes-0.csv")
    if episodes is not None:  # a trial runs on to its next log row
        episodes = episodes.loc[episodes["frames"] <= run.last_frame, EPISODE_COLUMNS]
    if episodes is None or episodes.empty:
        raise NothingToRecord(
            f"[suite] {run.run_id}: no episode ended in its {run.last_frame:,} frames, so it has "
            f"no score to record; its state stays in {run.state_dir}. Give it more frames "
            "(--frames, or --until for a trial) and run the same command again")
    (run.results / "episodes").mkdir(parents=True, exist_ok=True)
    episodes.to_csv(run.results / "episodes" / f"{run.run_id}.csv", index=False)
    record = read_record(run)
    logs = pd.read_csv(run.run_dir / "logs.csv")
    # The learner's statistics are the evidence when a game falls short
    # (sandbox/learner_trace.py reads them by run id); the run directory is not kept.
    (run.results / LEARNER_LOGS).mkdir(parents=True, exist_ok=True)
    logs.to_csv(run.results / LEARNER_LOGS / f"{run.run_id}.csv.gz", index=False)
    speed = logs["frames"].iloc[-1] / logs["interval_s"].sum()  # the time it trained
    note = (f"benchmark suite, ALE v5 protocol; {speed:,.0f} frames/s; "
            f"{record['resumes']} resumes")
    if run.until:
        note = (f"a trial, stopped at {run.until / 1e6:g}M frames of a "
                f"{run.frames / 1e6:g}M-frame schedule; {note}")
    if record["resumes_without_replay"]:
        note += f", {record['resumes_without_replay']} of them with an empty replay"
    flags = " ".join([f"--total_environment_frames={run.frames}", *extra])
    row = {"id": run.run_id, "algorithm": run.algorithm, "level": run.level,
           "seed": run.seed, "machine": common.machine_name(), "commit": record["commit"],
           "preset": meta(run.run_dir).get("flags", {}).get("preset", ""), "flags": flags,
           "resumes": record["resumes"], **frame_columns(episodes, run.level),
           "figure": TRIAL_GROUP if run.trial else GROUP, "note": note}
    append_row(run.results / "runs.csv", row)
    shutil.rmtree(run.state_dir, ignore_errors=True)  # the row and episodes replace it


def append_row(path: Path, row: dict) -> None:
    """Add a row to runs.csv under a lock: suites running at once (a trial beside the
    defaults) would otherwise each write back the table they read, without the other's row."""
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = pd.read_csv(path, dtype=str) if path.exists() else pd.DataFrame(columns=list(row))
        table = pd.concat([table, pd.DataFrame([row]).astype(str)], ignore_index=True)
        table.to_csv(path, index=False)


def episodes_so_far(run: SuiteRun) -> pd.DataFrame | None:
    """The run's episodes wherever they are now: its row's file once finished, else its run
    directory, else its saved state; None before its first episode."""
    for path in (run.results / "episodes" / f"{run.run_id}.csv", run.run_dir / "episodes-0.csv",
                 run.state_dir / "episodes-0.csv"):
        try:
            episodes = pd.read_csv(path)
        except (FileNotFoundError, pd.errors.EmptyDataError):
            continue
        return episodes if len(episodes) else None
    return None


def iteration_line(run: SuiteRun, reached: int) -> str | None:
    """`1M 2.6 | 2M 13.3 | 3M 20.1 (so far)`: the mean return of each 1M-frame iteration
    (the figures the suite's page scores) up to `reached` frames; None before an episode."""
    episodes = episodes_so_far(run)
    if episodes is None:
        return None
    means = iteration_means(episodes)
    cells = [f"{end / 1e6:g}M {return_cell(mean)}" for end, mean in means.items()]
    if means.index[-1] > reached:
        cells[-1] += " (so far)"
    return " | ".join(cells)
