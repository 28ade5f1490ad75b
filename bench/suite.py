"""The benchmark suite: a list of games, each trained with the defaults, stopped and started
again at will, each finished run a row of results/runs.csv with its episodes file.

  .venv/bin/python bench/suite.py                       # Atari-5, Pong, Breakout, 10M frames
  .venv/bin/python bench/suite.py --games=Pong,Breakout --seed=2
  .venv/bin/python bench/suite.py --status              # where each run stands; starts nothing
  .venv/bin/python bench/suite.py --games=BattleZone --trial=ent0.001 --until=3000000 \
      -- --entropy_cost=0.001                           # a trial beside the defaults

Each game runs `experiment.py --job_name=local --level_name=ALE/<Game>-v5` with the
preset the algorithm has for Atari (`--preset=auto`): the ALE v5 protocol of Dopamine's
published curves (sticky actions 0.25, the minimal action set, whole games of at most 108K
frames). Runs go one after another, in the order given:

- a run with a row in runs.csv is finished and skipped;
- a run with a checkpoint in `--logdir` resumes from it (the learner's own resume);
- a run whose directory is gone (a new machine) resumes from its last saved state in
  `results/suite-state/<run id>/`: the checkpoint, logs and episodes, a few MB, copied there
  at every new checkpoint and at the end, and committed with the results. The LASER replay
  is not kept there (hundreds of MB): such a resume starts with an empty replay, and the
  row's note says so.

A trial runs a game with other flags (after `--`) to compare with the defaults' run: its id
ends in the trial's name, it follows the learning-rate schedule of the full `--frames` (as
the defaults' run did) and stops at `--until`, and its row goes to the group `suite-trial`,
which the suite's page shows beside the defaults and never counts in the scores.

Ctrl-C or SIGTERM stops the current run (its learner checkpoints), saves its state and
exits 0; the same command goes on. A run that reaches its budget becomes a row (group
`suite`) and `results/redraw.py` draws the suite's page, `results/suite.md`.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import common
import pandas as pd

from results.scores import README_GAMES

# `readme`: the games of the README's table, Atari-5 first
SUITES = {"atari5": README_GAMES[:5], "readme": README_GAMES}
STATE_FILES = ("checkpoint.pt", "logs.csv", "episodes-0.csv", "meta.json")
EPISODE_COLUMNS = ["time", "frames", "episode_return", "episode_length"]
GROUP = "suite"
TRIAL_GROUP = "suite-trial"  # other settings, beside the defaults on the suite's page


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
    try:
        logs = pd.read_csv(run_dir / "logs.csv")
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return 0
    return int(logs["frames"].iloc[-1]) if len(logs) else 0


def meta(run_dir: Path) -> dict:
    """The run's meta.json ({} before the learner writes it)."""
    try:
        return json.loads((run_dir / "meta.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


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


def experiment_command(run: SuiteRun, port: int, extra: list[str]) -> list[str]:
    return [sys.executable, str(common.ROOT / "experiment.py"), "--job_name=local",
            f"--algorithm={run.algorithm}", f"--level_name={run.level}", f"--seed={run.seed}",
            f"--total_environment_frames={run.frames}", f"--logdir={run.logdir}",
            f"--run_name={run.run_id}", f"--learner_host=127.0.0.1:{port}", *extra]


class Stop:
    """SIGINT/SIGTERM: pass SIGTERM to the running experiment, then stop the suite."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.child: subprocess.Popen | None = None
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame) -> None:
        print(f"[suite] {signal.Signals(signum).name}: stopping the current run "
              "(it checkpoints); the same command goes on", flush=True)
        self.requested.set()
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)


def train(run: SuiteRun, port: int, extra: list[str], stop: Stop) -> str | None:
    """Run (or resume) one game until its budget or a stop; its state saved at every new
    checkpoint and at the end. Returns the learner's exit status."""
    record = read_record(run)
    if restore_state(run):
        record["resumes_without_replay"] += 1
        print(f"[suite] {run.run_id}: restored from {run.state_dir} at "
              f"{frames_so_far(run.run_dir) / 1e6:.2f}M frames (the replay starts empty)")
    if (run.run_dir / "checkpoint.pt").exists():
        record["resumes"] += 1
    write_record(run, record)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    with open(run.run_dir / "suite-experiment.log", "ab") as log_file:
        stop.child = subprocess.Popen(experiment_command(run, port, extra), stdout=log_file,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        checkpoint = run.run_dir / "checkpoint.pt"
        saved_at = checkpoint.stat().st_mtime if checkpoint.exists() else 0.0
        last_progress = 0.0
        while stop.child.poll() is None:
            time.sleep(2)
            if checkpoint.exists() and checkpoint.stat().st_mtime > saved_at:
                saved_at = checkpoint.stat().st_mtime
                save_state(run)
            if run.until and run.reached_its_end() and stop.child.poll() is None:
                stop.child.send_signal(signal.SIGTERM)  # it checkpoints on its way out
                stop.child.wait()
            if time.time() - last_progress >= 60:
                last_progress = time.time()
                print(f"[suite] {run.run_id}: {frames_so_far(run.run_dir) / 1e6:.2f}M of "
                      f"{run.last_frame / 1e6:g}M frames", flush=True)
    stop.child = None
    save_state(run)
    return meta(run.run_dir).get("exit_status")


def record_row(run: SuiteRun, extra: list[str]) -> None:
    """The finished run as a row of runs.csv, with its episodes file beside it."""
    episodes = pd.read_csv(run.run_dir / "episodes-0.csv")[EPISODE_COLUMNS]
    episodes = episodes[episodes["frames"] <= run.last_frame]  # a trial runs on to its next log row
    (run.results / "episodes").mkdir(parents=True, exist_ok=True)
    episodes.to_csv(run.results / "episodes" / f"{run.run_id}.csv", index=False)
    record = read_record(run)
    logs = pd.read_csv(run.run_dir / "logs.csv")
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
           "resumes": record["resumes"], "last_episode_frames": int(episodes["frames"].max()),
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


def status(runs: list[SuiteRun]) -> None:
    done = finished_ids(runs[0].results)
    for index, run in enumerate(runs, 1):
        if run.run_id in done:
            where = "finished (a row in runs.csv)"
        elif (run.run_dir / "checkpoint.pt").exists():
            where = f"at {frames_so_far(run.run_dir) / 1e6:.2f}M frames in {run.run_dir}"
        elif (run.state_dir / "checkpoint.pt").exists():
            where = f"saved at {frames_so_far(run.state_dir) / 1e6:.2f}M frames in {run.state_dir}"
        else:
            where = "not started"
        print(f"[suite] {index}/{len(runs)} {run.run_id}: {where}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", default="readme",
                        help="a suite name (readme: Atari-5, then Pong and Breakout; atari5) "
                             "or game names, comma-separated: Pong,Breakout")
    parser.add_argument("--algorithm", default="impala")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--frames", type=int, default=10_000_000, help="frames per game")
    parser.add_argument("--logdir", type=Path, default=common.ROOT / "runs" / "suite")
    parser.add_argument("--results", type=Path, default=common.ROOT / "results",
                        help="where runs.csv, episodes/ and suite-state/ are")
    parser.add_argument("--port", type=int, default=18301, help="the learner's port")
    parser.add_argument("--status", action="store_true", help="show where each run stands")
    parser.add_argument("--trial", default="",
                        help="run the games with the flags after -- as a trial of this name "
                             "(letters, digits, '.', '-'), shown beside the defaults")
    parser.add_argument("--until", type=int, default=0,
                        help="a trial's last frame, best a whole million (the scores' "
                             "iteration); its learning rate follows the schedule of --frames, "
                             "as the defaults' runs do")
    parser.add_argument("extra", nargs="*", help="more experiment.py flags (after --)")
    args = parser.parse_args(argv)
    names = SUITES.get(args.games) or tuple(g.strip() for g in args.games.split(",") if g.strip())
    if not names:
        parser.error("--games names no game")
    if args.trial and not re.fullmatch(r"[A-Za-z0-9.-]+", args.trial):
        parser.error(f"--trial={args.trial!r}: use letters, digits, '.' and '-'")
    if args.trial and not args.extra:
        parser.error("--trial needs the flags it tries, after --: a run without them is the "
                     "defaults' run")
    if args.until and not args.trial:
        parser.error("--until stops a trial early; the defaults' runs go to --frames")
    if not 0 <= args.until <= args.frames:
        parser.error(f"--until={args.until} must be between 0 and --frames={args.frames}")
    args.runs = [SuiteRun(name, args.algorithm, args.seed, args.frames, args.logdir.resolve(),
                          args.results.resolve(), args.trial, args.until) for name in names]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.status:
        status(args.runs)
        return 0
    stop = Stop()
    for index, run in enumerate(args.runs, 1):
        if stop.requested.is_set():  # it came between runs: start no other
            return 0
        if run.run_id in finished_ids(run.results):
            print(f"[suite] {index}/{len(args.runs)} {run.run_id}: finished, skipped")
            continue
        if run.until and run.reached_its_end():
            record_row(run, args.extra)
            print(f"[suite] {run.run_id}: already at {run.until / 1e6:g}M frames, recorded")
            continue
        print(f"[suite] {index}/{len(args.runs)} {run.run_id}: training {run.level} to "
              f"{run.last_frame / 1e6:g}M frames, log {run.run_dir / 'suite-experiment.log'}",
              flush=True)
        result = train(run, args.port, args.extra, stop)
        if result == "finished" or (run.until and run.reached_its_end()):
            record_row(run, args.extra)  # even if a stop came as it finished
            print(f"[suite] {run.run_id}: finished, recorded in {run.results / 'runs.csv'}")
            continue
        if stop.requested.is_set():
            print(f"[suite] {run.run_id}: stopped at {frames_so_far(run.run_dir) / 1e6:.2f}M "
                  f"frames, state in {run.state_dir}")
            return 0
        print(f"[suite] {run.run_id}: the run ended {result or 'without a status'}; see "
              f"{run.run_dir / 'suite-experiment.log'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
