"""run_experiment_mm_raw.py: start a whole cluster from a CSV of hosts, or from the Slurm
allocation it runs in (--slurm, slurm.py) (the CLI).

  plan     hosts -> learner groups -> one command per process (plan.py; --dry_run prints it)
  check    every remote host over SSH, in parallel; nothing starts if one fails (running.py)
  start    a tmux session: the mpirun of all learners, a pane per actor (local, ssh or srun)
  follow   a live summary until training ends (or --detach)
  stop     --stop ends exactly the recorded processes on every host; --status reports them
           (control.py)

What was started is recorded in <run_dir>/cluster.json; each process's pid and start time
in <run_dir>/pids/ on its host (see impala.launcher.logged).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from pathlib import Path

from impala.flags import add_config_flags, config_from_namespace
from impala.launcher.cluster import ClusterFileError, WorkerSpec, read_cluster_csv
from impala.launcher.control import status_run, stop_run
from impala.launcher.options import FrontendOptions
from impala.launcher.plan import (
    PROJECT_ROOT,
    build_plan,
    describe_plan,
    local_workdir_problems,
)
from impala.launcher.running import start
from impala.launcher.slurm import SlurmError, SlurmNode, allocation_nodes, slurm_workers


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run_experiment_mm_raw.py",
        description="Start learners (one mpirun) and actors (tmux panes) from a CSV of hosts; "
                    "the training flags are passed to every process.")
    add_frontend_flags(parser.add_argument_group("cluster"))
    try:
        add_config_flags(parser, argv)
    except ValueError as exc:  # an --algorithm=module:Class that cannot be imported
        parser.error(str(exc))
    return parser


def add_frontend_flags(group: argparse._ArgumentGroup) -> None:
    """One `--name` per FrontendOptions field: booleans are switches, a field without a
    default is required, every other takes its type and default from the dataclass."""
    for f in dataclasses.fields(FrontendOptions):
        help = f.metadata["help"]
        if f.default is dataclasses.MISSING:
            group.add_argument(f"--{f.name}", required=True, help=help)
        elif f.type in (bool, "bool"):
            group.add_argument(f"--{f.name}", action="store_true", help=help)
        else:
            kind = {"str": str, "int": int, "float": float}[str(f.type)]
            group.add_argument(f"--{f.name}", type=kind, default=f.default,
                               help=f"{help} (default: {f.default!r})")


def hosts_of(opts: FrontendOptions) -> tuple[list[WorkerSpec], dict[int, SlurmNode] | None]:
    """The run's workers from the CSV, or from the Slurm allocation (with each one's node)."""
    if opts.slurm:
        nodes = allocation_nodes()
        workers, node_of = slurm_workers(nodes, opts.num_learners)
        print(f"Slurm job {os.environ['SLURM_JOB_ID']}: " + "; ".join(
            f"{n.name} ({n.address}, {n.cpus} CPUs{f', GPUs {sorted(n.gpus)}' if n.gpus else ''}"
            f"): {describe_node(n, workers, node_of)}" for n in nodes), flush=True)
        return workers, node_of
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        workers = read_cluster_csv(opts.workers_csv_path)
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    problems = local_workdir_problems(workers)
    if problems:
        raise ClusterFileError(Path(opts.workers_csv_path), problems)
    return workers, None


def describe_node(node: SlurmNode, workers: list[WorkerSpec],
                  node_of: dict[int, SlurmNode]) -> str:
    """"learner + 2 actors", "3 actors": what the run puts on `node`."""
    jobs = [w.job for w in workers if node_of[w.line] == node]
    parts = ["learner"] * jobs.count("learner")
    if jobs.count("actor"):
        parts.append(f"{jobs.count('actor')} actor(s)")
    return " + ".join(parts) or "nothing"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        opts = FrontendOptions(**{name: getattr(args, name)
                                  for name in FrontendOptions.__dataclass_fields__})
        cfg = config_from_namespace(args)
    except ValueError as exc:
        parser.error(str(exc))
    run_dir = cfg.run_dir_on(PROJECT_ROOT)
    if opts.stop:
        return stop_run(opts, run_dir)
    if opts.status:
        return status_run(opts, run_dir)
    try:
        workers, node_of = hosts_of(opts)
    except (ClusterFileError, SlurmError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plan = build_plan(cfg, opts, workers, node_of)
    if opts.dry_run:
        print(describe_plan(plan))
        return 0
    return start(cfg, opts, workers, plan)
