"""The benchmark suite: a list of games, each trained with the defaults, stopped and started
again at will, each finished run a row of results/runs.csv with its episodes file.

  .venv/bin/python bench/suite.py                       # Atari-5, Pong, Breakout, 10M frames
  .venv/bin/python bench/suite.py --games=atari5,Breakout --seed=2
  .venv/bin/python bench/suite.py --status              # each run's place, return per 1M
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
  row's note says so;
- a run whose saved state was trained with other values of the preset (the defaults have
  changed since) is not resumed: the suite names the values, trains the other games and
  exits 1.

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
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import common
from suite_records import (
    NothingToRecord,
    SuiteRun,
    finished_ids,
    frames_so_far,
    iteration_line,
    meta,
    preset_changes,
    read_record,
    record_row,
    restore_state,
    resumed_from,
    save_state,
    write_record,
)

from impala.signals import act_on_signals
from results.scores import README_GAMES

# `readme`: the games of the README's table, Atari-5 first
SUITES = {"atari5": README_GAMES[:5], "readme": README_GAMES}


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
        act_on_signals((signal.SIGINT, signal.SIGTERM), self._handle)

    def _handle(self, signum: int) -> None:
        print(f"[suite] {signal.Signals(signum).name}: stopping the current run "
              "(it checkpoints); the same command goes on", flush=True)
        self.requested.set()
        child = self.child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)


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


def status(runs: list[SuiteRun]) -> None:
    """Where each run stands, and its mean return per 1M frames so far."""
    done = finished_ids(runs[0].results)
    for index, run in enumerate(runs, 1):
        if run.run_id in done:
            where, reached = "finished (a row in runs.csv)", run.last_frame
        elif (run.run_dir / "checkpoint.pt").exists():
            reached = frames_so_far(run.run_dir)
            where = f"at {reached / 1e6:.2f}M frames in {run.run_dir}"
        elif (run.state_dir / "checkpoint.pt").exists():
            reached = frames_so_far(run.state_dir)
            where = f"saved at {reached / 1e6:.2f}M frames in {run.state_dir}"
        elif reached := frames_so_far(run.run_dir):  # training, before its first checkpoint
            where = f"at {reached / 1e6:.2f}M frames in {run.run_dir}, no checkpoint yet"
        else:
            where, reached = "not started", 0
        print(f"[suite] {index}/{len(runs)} {run.run_id}: {where}")
        line = iteration_line(run, reached)
        if line:
            print(f"        mean return per 1M frames: {line}")


def games_named(games: str, parser: argparse.ArgumentParser) -> list[str]:
    """`atari5,Breakout` -> the five Atari-5 games and Breakout, each an ALE v5 game."""
    import ale_py
    import gymnasium

    gymnasium.register_envs(ale_py)
    names: list[str] = []
    for name in (part.strip() for part in games.split(",") if part.strip()):
        names += [game for game in SUITES.get(name, (name,)) if game not in names]
    unknown = [game for game in names if f"ALE/{game}-v5" not in gymnasium.registry]
    if unknown:
        parser.error(f"--games={games}: no ALE game {', '.join(map(repr, unknown))}; a suite "
                     f"({', '.join(SUITES)}) or games as ale-py names them (Pong, "
                     "BattleZone, NameThisGame)")
    if not names:
        parser.error("--games names no game")
    return names


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
    names = games_named(args.games, parser)
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
    stop, refused = Stop(), 0
    for index, run in enumerate(args.runs, 1):
        if stop.requested.is_set():  # it came between runs: start no other
            return 0
        if run.run_id in finished_ids(run.results):
            print(f"[suite] {index}/{len(args.runs)} {run.run_id}: finished, skipped")
            continue
        if run.until and run.reached_its_end():
            if recorded(run, args.extra):
                print(f"[suite] {run.run_id}: already at {run.until / 1e6:g}M frames, recorded")
            else:
                refused += 1
            continue
        changed = preset_changes(run, preset_of(run))
        if changed:
            print(stale_state_message(run, changed), file=sys.stderr)
            refused += 1
            continue
        print(f"[suite] {index}/{len(args.runs)} {run.run_id}: training {run.level} to "
              f"{run.last_frame / 1e6:g}M frames, log {run.run_dir / 'suite-experiment.log'}",
              flush=True)
        result = train(run, args.port, args.extra, stop)
        if result == "finished" or (run.until and run.reached_its_end()):
            # recorded even if a stop came as it finished
            if recorded(run, args.extra):
                print(f"[suite] {run.run_id}: finished, recorded in {run.results / 'runs.csv'}")
            else:
                refused += 1
            continue
        if stop.requested.is_set():
            print(f"[suite] {run.run_id}: stopped at {frames_so_far(run.run_dir) / 1e6:.2f}M "
                  f"frames, state in {run.state_dir}")
            return 0
        print(f"[suite] {run.run_id}: the run ended {result or 'without a status'}; see "
              f"{run.run_dir / 'suite-experiment.log'}", file=sys.stderr)
        return 1
    return 1 if refused else 0


def recorded(run: SuiteRun, extra: list[str]) -> bool:
    """Record the run's row; False, with the reason on stderr, if it has no episode."""
    try:
        record_row(run, extra)
    except NothingToRecord as error:
        print(error, file=sys.stderr)
        return False
    return True


def preset_of(run: SuiteRun) -> dict:
    """The values the run's preset (`--preset=auto` for its game) has today."""
    from impala.presets import config_from_flags, preset_values

    return preset_values(config_from_flags({"algorithm": run.algorithm,
                                            "level_name": run.level}))


def _shown(value) -> str:
    return "unset" if value is None else str(value)


def stale_state_message(run: SuiteRun, changed: dict[str, tuple]) -> str:
    values = "; ".join(f"{name}: {_shown(then)} then, {_shown(now)} now" for name, (then, now)
                       in changed.items())
    return (f"[suite] {run.run_id}: not resumed: {resumed_from(run)} was trained with "
            f"other preset values ({values}). Record what it reached as a trial, or delete it (and "
            f"{run.run_dir}) to train the game again with today's defaults; the other "
            "games go on")


if __name__ == "__main__":
    sys.exit(main())
