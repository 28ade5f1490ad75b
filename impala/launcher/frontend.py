"""run_experiment_mm_raw.py: start a whole cluster from a CSV of hosts (the CLI).

  plan     CSV -> learner groups -> one command per process (plan.py; --dry_run prints it)
  check    every remote host over SSH, in parallel; nothing starts if one fails (running.py)
  start    a tmux session: the mpirun of all learners, a pane per actor (local, or ssh)
  follow   a live summary until training ends (or --detach)
  stop     --stop ends exactly the recorded processes on every host; --status reports them
           (control.py)

What was started is recorded in <run_dir>/cluster.json; each process's pid and start time
in <run_dir>/pids/ on its host (see impala.launcher.logged).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from impala.config import add_config_flags, config_from_namespace
from impala.launcher.cluster import ClusterFileError, read_cluster_csv
from impala.launcher.control import status_run, stop_run
from impala.launcher.plan import (
    PROJECT_ROOT,
    FrontendOptions,
    build_plan,
    describe_plan,
    local_workdir_problems,
)
from impala.launcher.running import start


def build_parser() -> argparse.ArgumentParser:
    defaults = FrontendOptions  # the dataclass's class attributes are its defaults
    parser = argparse.ArgumentParser(
        prog="run_experiment_mm_raw.py",
        description="Start learners (one mpirun) and actors (tmux panes) from a CSV of hosts.")
    group = parser.add_argument_group("cluster")
    group.add_argument("--workers_csv_path", required=True,
                       help="CSV: job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,"
                            "ssh_password[,num_envs,python,workdir,ssh_key]")
    group.add_argument("--tmux_sess", default=defaults.tmux_sess, help="tmux session name")
    group.add_argument("--dry_run", action="store_true",
                       help="print the plan and every command, start nothing")
    group.add_argument("--force", action="store_true",
                       help="replace an existing tmux session of that name")
    group.add_argument("--detach", action="store_true", help="return right after starting")
    group.add_argument("--stop", action="store_true",
                       help="stop exactly the processes of this run on every host")
    group.add_argument("--status", action="store_true",
                       help="show each process of this run alive or dead with its last line")
    group.add_argument("--mpi_iface", default=defaults.mpi_iface,
                       help="network (CIDR) or interface for MPI traffic, e.g. 10.0.0.0/24")
    group.add_argument("--ssh_config", default=defaults.ssh_config,
                       help="ssh_config file for ssh and mpirun")
    group.add_argument("--ssh_options", default=defaults.ssh_options,
                       help="extra OpenSSH options for ssh and mpirun, e.g. '-o "
                            "ConnectTimeout=5'")
    group.add_argument("--remote_workdir", default=defaults.remote_workdir,
                       help="project checkout on remote hosts (default: this checkout's path)")
    group.add_argument("--remote_python", default=defaults.remote_python,
                       help="interpreter on remote hosts (default: <workdir>/.venv/bin/python)")
    group.add_argument("--master_port", type=int, default=defaults.master_port,
                       help="torch.distributed rendezvous port (--allreduce_backend=torch)")
    group.add_argument("--summary_interval_s", type=float,
                       default=defaults.summary_interval_s)
    add_config_flags(parser.add_argument_group("training (passed to every process)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    opts = FrontendOptions(**{name: getattr(args, name)
                              for name in FrontendOptions.__dataclass_fields__})
    try:
        cfg = config_from_namespace(args)
    except ValueError as exc:
        parser.error(str(exc))
    run_dir = cfg.run_dir_on(PROJECT_ROOT)
    if opts.stop:
        return stop_run(opts, run_dir)
    if opts.status:
        return status_run(opts, run_dir)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            workers = read_cluster_csv(opts.workers_csv_path)
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
        problems = local_workdir_problems(workers)
        if problems:
            raise ClusterFileError(Path(opts.workers_csv_path), problems)
    except ClusterFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plan = build_plan(cfg, opts, workers)
    if opts.dry_run:
        print(describe_plan(plan))
        return 0
    return start(cfg, opts, workers, plan)
