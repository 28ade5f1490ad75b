"""Running a planned cluster: check hosts, hand out the keys, open tmux, follow to the end."""

from __future__ import annotations

import csv
import io
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from impala import auth
from impala.config import Config
from impala.launcher import processes, tmux
from impala.launcher.cluster import WorkerSpec
from impala.launcher.control import stop_processes
from impala.launcher.keys import copy_keys
from impala.launcher.options import FrontendOptions
from impala.launcher.plan import (
    PROJECT_ROOT,
    ClusterRecord,
    Plan,
    key_copies,
    preflight_checks,
)
from impala.launcher.ssh import preflight
from impala.logs import status_line
from impala.signals import act_on_signals


def _report(problems: list[str], what: str) -> int:
    print(f"{what}; nothing was started:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return 1


def start(cfg: Config, opts: FrontendOptions, workers: list[WorkerSpec], plan: Plan) -> int:
    checks = preflight_checks(plan)
    if checks:
        print(f"checking {len(checks)} remote host(s) over ssh ...", flush=True)
    problems = preflight(checks)
    if problems:
        return _report(problems, "preflight failed")
    if cfg.auth == "curve":
        copies = key_copies(plan)
        problems = copy_keys(plan.run_dir, copies)
        if problems:
            return _report(problems, "the run's keys could not be copied")
        print(f"run keys: {auth.keys_path(plan.run_dir)} (mode 0600)"
              + (f", copied to {len(copies)} remote host(s)" if copies else ""), flush=True)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    (plan.run_dir / "pids").mkdir(exist_ok=True)
    learners, actors = plan.learners, plan.actors
    try:
        panes = tmux.start_panes(
            opts.tmux_sess,
            tmux.PaneSpec(learners.title, shlex.join(learners.command), learners.workdir),
            [tmux.PaneSpec(p.title, shlex.join(p.command), str(PROJECT_ROOT)) for p in actors],
            force=opts.force)
    except tmux.TmuxSessionExists as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ClusterRecord(tmux_session=opts.tmux_sess, started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  workers_csv_path=(str(Path(opts.workers_csv_path).resolve())
                                    if opts.workers_csv_path else ""),
                  ssh_config=opts.ssh_config, ssh_options=opts.ssh_options, panes=panes,
                  processes=plan.processes).save(plan.run_dir)
    print(f"started {len(plan.groups)} learner(s) and {len(actors)} actor(s) in tmux session "
          f"{opts.tmux_sess!r}; run directory {plan.run_dir}", flush=True)
    print(f"  attach: tmux attach -t {opts.tmux_sess}    (Ctrl-b n / Ctrl-b p: next/previous "
          "window, Ctrl-b o: next pane, Ctrl-b d: detach)", flush=True)
    stop_hint = shlex.join([sys.executable, "run_experiment_mm_raw.py", *sys.argv[1:], "--stop"])
    print(f"  stop:   {stop_hint}", flush=True)
    if opts.detach:
        return 0
    return follow(cfg, opts, plan)


def _last_log_row(plan: Plan) -> dict[str, float | None] | None:
    """The newest row of logs.csv as numbers (None for empty cells), or None before it has
    one."""
    path = plan.run_dir / "logs.csv"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 2:
        return None
    row = next(csv.DictReader(io.StringIO(lines[0] + "\n" + lines[-1])))
    try:
        return {key: float(value) if value else None for key, value in row.items()}
    except (TypeError, ValueError):  # a row still being written
        return None


def follow(cfg: Config, opts: FrontendOptions, plan: Plan) -> int:
    """Print a summary line until the learners exit; Ctrl-C stops the whole run."""
    interrupted = threading.Event()

    # SIGUSR1: Slurm's warning before a time limit (sandbox/slurm.sbatch passes it on).
    act_on_signals((signal.SIGINT, signal.SIGTERM, signal.SIGUSR1),
                   lambda _signum: interrupted.set())
    learners, actors = plan.learners, plan.actors
    first_seen: tuple[float, float] | None = None  # (time, frames) of the first row read
    time.sleep(2)
    while not interrupted.wait(opts.summary_interval_s):
        alive = sum(processes.is_running(Path(p.pidfile)) for p in actors)
        row = _last_log_row(plan)
        if row:
            first_seen = first_seen or (time.time(), row["frames"])
            # The learner's own status line, ETA measured from the first row seen here.
            line = status_line(row, cfg.total_environment_frames, time.time() - first_seen[0],
                               first_seen[1])
            print(f"{line} | actors alive {alive}/{len(actors)}", flush=True)
        else:
            print(f"waiting for the learners' first log row | actors alive "
                  f"{alive}/{len(actors)}", flush=True)
        if not processes.is_up(Path(learners.pidfile)):
            status = processes.describe(Path(learners.pidfile))
            print(f"learners ended ({status}: {processes.last_line(Path(learners.log))}); "
                  "stopping the actors", flush=True)
            _end_run(plan, opts)
            return 0 if status == "finished (status 0)" else 1
    print("interrupted: stopping the whole run", flush=True)
    _end_run(plan, opts)
    return 0


def _end_run(plan: Plan, opts: FrontendOptions) -> None:
    stop_processes(plan.processes, opts, csv_path=opts.workers_csv_path)
    tmux.kill_session(opts.tmux_sess)
