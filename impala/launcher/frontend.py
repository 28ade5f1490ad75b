"""run_experiment_mm_raw.py: start a whole cluster from a CSV of hosts.

  plan     CSV -> learner groups -> one command per process (printed by --dry_run)
  check    every remote host over SSH, in parallel; nothing starts if one fails
  start    a tmux session: the mpirun of all learners, a pane per actor (local, or ssh)
  follow   a live summary until training ends (or --detach)
  stop     --stop ends exactly the recorded processes on every host; --status reports them

What was started is recorded in <run_dir>/cluster.json; each process's pid and start time
in <run_dir>/pids/ on its host (see impala.launcher.logged).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import shlex
import signal
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from impala import auth
from impala.config import Config, add_config_flags, config_from_namespace
from impala.launcher import logged, tmux
from impala.launcher.cluster import (
    ClusterFileError,
    LearnerGroup,
    WorkerSpec,
    learner_groups,
    read_cluster_csv,
)
from impala.launcher.keys import KeyCopy, copy_keys
from impala.launcher.mpi import LearnerLaunch, MpiOptions, mpirun_command
from impala.launcher.ssh import (
    HostAccess,
    PreflightCheck,
    SshSettings,
    host_access,
    is_local,
    local_addresses,
    mpirun_ssh_agent,
    openssh_argv,
    preflight,
    run_remote,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
# Flags that the frontend sets per process instead of passing through.
PER_PROCESS_FLAGS = ("job_name", "task", "learner_host", "num_actors", "num_envs", "mode",
                     "actor_hosts", "run_name", "logdir")
LEARNER_STOP_GRACE_S = 90.0  # learners save a checkpoint on SIGTERM
ACTOR_STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class FrontendOptions:
    workers_csv_path: str
    tmux_sess: str = "impala"
    dry_run: bool = False
    force: bool = False
    detach: bool = False
    stop: bool = False
    status: bool = False
    mpi_iface: str = ""
    ssh_config: str = ""
    ssh_options: str = ""
    remote_workdir: str = ""
    remote_python: str = ""
    master_port: int = 29500
    summary_interval_s: float = 10.0


@dataclass
class Process:
    """One pane of the run, and where its pidfiles and log are."""

    name: str  # learners, actor-0, actor-1, ...
    role: str  # learners or actor
    host: str
    local: bool
    title: str
    workdir: str  # on its host
    command: list[str]  # what the pane runs, on this host
    pidfile: str  # of the pane's wrapper, on this host
    log: str  # on this host
    remote_pidfile: str = ""  # of the process itself on a remote host
    remote_python: str = ""
    csv_line: int = 0
    # How --stop and --status reach a remote process: the login used at start, without
    # the password (never written); a password login reads it from the CSV again.
    ssh: dict[str, Any] = field(default_factory=dict)
    ssh_password_in_csv: bool = False


@dataclass
class Plan:
    run_dir: Path
    groups: list[LearnerGroup]
    processes: list[Process]


# ------------------------------------------------------------------------------- plan
def _resolve(workdir: str, logdir: str, run_name: str) -> str:
    path = Path(logdir)
    return str(path / run_name if path.is_absolute() else Path(workdir) / path / run_name)


def _training_flags(cfg: Config) -> list[str]:
    return [flag for flag in cfg.to_argv()
            if flag.split("=", 1)[0].lstrip("-") not in PER_PROCESS_FLAGS]


def workdir_of(worker: WorkerSpec, local: bool, opts: FrontendOptions) -> str:
    """The project checkout a worker runs in: this one locally; the CSV's, the flag's, or
    this checkout's path remotely."""
    if local:
        return str(PROJECT_ROOT)
    return worker.workdir or opts.remote_workdir or str(PROJECT_ROOT)


def python_of(worker: WorkerSpec, local: bool, workdir: str, opts: FrontendOptions) -> str:
    """The interpreter a worker runs: the CSV's, else this one locally and the checkout's
    .venv remotely (or --remote_python)."""
    if local:
        return worker.python or sys.executable
    return worker.python or opts.remote_python or f"{workdir}/.venv/bin/python"


def _local_workdir_problems(workers: list[WorkerSpec]) -> list[str]:
    """A workdir on a row of this host would be silently ignored: refuse it instead."""
    addresses = local_addresses()
    return [f"line {w.line}, column workdir: {w.ip} is this host, whose processes run in "
            f"this checkout ({PROJECT_ROOT}); leave workdir empty for local rows"
            for w in workers
            if w.workdir and is_local(w.ip, addresses)
            and Path(w.workdir).resolve() != PROJECT_ROOT]


def build_plan(cfg: Config, opts: FrontendOptions, workers: list[WorkerSpec]) -> Plan:
    addresses = local_addresses()
    settings = _ssh_settings(opts)
    run_name = cfg.resolved_run_name
    run_dir = Path(_resolve(str(PROJECT_ROOT), cfg.logdir, run_name))
    common = _training_flags(cfg) + [f"--logdir={cfg.logdir}", f"--run_name={run_name}"]
    groups = learner_groups(workers)
    wrapper = [sys.executable, "-m", "impala.launcher.logged"]
    learners = []
    for group in groups:
        worker = group.learner
        local = is_local(worker.ip, addresses)
        workdir = workdir_of(worker, local, opts)
        learners.append(LearnerLaunch(worker.ip, worker.port,
                                      python_of(worker, local, workdir, opts), workdir,
                                      worker.cuda_visible_devices))
    mpi = mpirun_command(learners, common, MpiOptions(
        iface=opts.mpi_iface or None, ssh_command=mpirun_ssh_agent(settings),
        master_port=opts.master_port))
    processes = [Process(
        name="learners", role="learners", host=", ".join(sorted({w.ip for w in
                                                                 (g.learner for g in groups)})),
        local=True, title=f"learners x{len(groups)} (mpirun)", workdir=str(PROJECT_ROOT),
        command=[*wrapper, "--pidfile", str(run_dir / "pids" / "learners.pid"),
                 "--log", str(run_dir / "mpirun.log"), "--", *mpi],
        pidfile=str(run_dir / "pids" / "learners.pid"), log=str(run_dir / "mpirun.log"))]

    # Actor i is the i-th actor of the file and serves learner i mod L.
    actors = [w for w in workers if w.job == "actor"]
    for task, worker in enumerate(actors):
        group = groups[task % len(groups)]
        processes.append(_actor_process(cfg, opts, settings, worker, group, task, common,
                                         run_dir, addresses))
    return Plan(run_dir=run_dir, groups=groups, processes=processes)


def _actor_process(cfg: Config, opts: FrontendOptions, settings: SshSettings,
                   worker: WorkerSpec, group: LearnerGroup, task: int, common: list[str],
                   run_dir: Path, addresses: set[str]) -> Process:
    local = is_local(worker.ip, addresses)
    workdir = workdir_of(worker, local, opts)
    python = python_of(worker, local, workdir, opts)
    name = f"actor-{task}"
    actor = ["env", f"CUDA_VISIBLE_DEVICES={worker.cuda_visible_devices}", python,
             "experiment.py", "--job_name=actor", f"--task={task}",
             f"--learner_host={group.learner.address}",
             f"--num_envs={worker.num_envs or cfg.num_envs}", *common]
    pidfile = str(run_dir / "pids" / f"{name}.pid")
    log = str(run_dir / f"{name}.log")
    wrapper = [sys.executable, "-m", "impala.launcher.logged"]
    title = f"{name} {worker.ip}:{worker.port} -> learner {group.rank}"
    if local:
        return Process(name, "actor", worker.ip, True, title, workdir,
                       [*wrapper, "--pidfile", pidfile, "--log", log, "--", *actor],
                       pidfile, log, csv_line=worker.line)
    remote_run_dir = _resolve(workdir, cfg.logdir, cfg.resolved_run_name)
    remote_pidfile = f"{remote_run_dir}/pids/{name}.pid"
    remote_line = (f"cd {shlex.quote(workdir)} && exec {shlex.quote(python)} -m "
                   f"impala.launcher.logged --pidfile {shlex.quote(remote_pidfile)} -- "
                   f"{shlex.join(actor)}")
    if worker.ssh_password:
        # OpenSSH cannot take a password non-interactively: a paramiko relay reads it from
        # the CSV itself, so it is on no command line.
        transport = [sys.executable, "-m", "impala.launcher.relay", "--csv",
                     str(Path(opts.workers_csv_path).resolve()), "--line", str(worker.line)]
        if opts.ssh_config:
            transport += ["--ssh_config", opts.ssh_config]
        transport += ["--", "sh", "-c", remote_line]
    else:
        transport = [*openssh_argv(host_access(worker, settings), settings, tty=True),
                     remote_line]
    local_pidfile = str(run_dir / "pids" / f"{name}.ssh.pid")
    login = {k: v for k, v in asdict(host_access(worker, settings)).items() if k != "password"}
    return Process(name, "actor", worker.ip, False, title, workdir,
                   [*wrapper, "--pidfile", local_pidfile, "--log", log, "--", *transport],
                   local_pidfile, log, remote_pidfile=remote_pidfile, remote_python=python,
                   csv_line=worker.line, ssh=login,
                   ssh_password_in_csv=bool(worker.ssh_password))


def _ssh_settings(opts: FrontendOptions) -> SshSettings:
    return SshSettings(config_file=opts.ssh_config, options=tuple(shlex.split(opts.ssh_options)))


def describe_plan(plan: Plan) -> str:
    lines = [f"run directory: {plan.run_dir}", ""]
    for group in plan.groups:
        actors = ", ".join(a.address for a in group.actors) or "(none)"
        lines.append(f"learner {group.rank} at {group.learner.address} "
                     f"(CSV line {group.learner.line}): actors {actors}")
    lines.append("")
    for process in plan.processes:
        where = "this host" if process.local else f"{process.host} via ssh"
        lines.append(f"[{process.title}] on {where}, log {process.log}:")
        lines.append(f"  {shlex.join(process.command)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ start
def preflight_checks(plan: Plan, opts: FrontendOptions,
                     workers: list[WorkerSpec]) -> list[PreflightCheck]:
    """One check per distinct login (host, port, user, key, password), interpreter and
    checkout: every row's own credentials are tried, rows that share them once."""
    settings = _ssh_settings(opts)
    checks: dict[tuple[HostAccess, str, str], PreflightCheck] = {}
    addresses = local_addresses()
    learner_ips = {g.learner.ip for g in plan.groups}
    for worker in workers:
        if is_local(worker.ip, addresses):
            continue
        workdir = workdir_of(worker, False, opts)
        python = python_of(worker, False, workdir, opts)
        key = (host_access(worker, settings), python, workdir)
        previous = checks.get(key)
        lines = (previous.lines if previous else ()) + (worker.line,)
        checks[key] = PreflightCheck(key[0], python, workdir,
                                     needs_mpi=worker.ip in learner_ips, lines=lines)
    return list(checks.values())


def key_copies(cfg: Config, opts: FrontendOptions, workers: list[WorkerSpec]) -> list[KeyCopy]:
    """Where each remote host's processes look for the run's key file: <run_dir>/keys."""
    settings = _ssh_settings(opts)
    addresses = local_addresses()
    copies: dict[tuple[HostAccess, str], tuple[int, ...]] = {}
    for worker in workers:
        if is_local(worker.ip, addresses):
            continue  # local processes read this host's run directory
        run_dir = _resolve(workdir_of(worker, False, opts), cfg.logdir, cfg.resolved_run_name)
        key = (host_access(worker, settings), f"{run_dir}/{auth.KEYS_FILE}")
        copies[key] = copies.get(key, ()) + (worker.line,)
    return [KeyCopy(access, path, lines) for (access, path), lines in copies.items()]


def _report(problems: list[str], what: str) -> int:
    print(f"{what}; nothing was started:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return 1


def start(cfg: Config, opts: FrontendOptions, workers: list[WorkerSpec], plan: Plan) -> int:
    checks = preflight_checks(plan, opts, workers)
    if checks:
        print(f"checking {len(checks)} remote host(s) over ssh ...", flush=True)
    problems = preflight(checks)
    if problems:
        return _report(problems, "preflight failed")
    if cfg.auth == "curve":
        copies = key_copies(cfg, opts, workers)
        problems = copy_keys(plan.run_dir, copies)
        if problems:
            return _report(problems, "the run's keys could not be copied")
        print(f"run keys: {auth.keys_path(plan.run_dir)} (mode 0600)"
              + (f", copied to {len(copies)} remote host(s)" if copies else ""), flush=True)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    (plan.run_dir / "pids").mkdir(exist_ok=True)
    learners, actors = plan.processes[0], plan.processes[1:]
    try:
        panes = tmux.start_panes(
            opts.tmux_sess,
            tmux.PaneSpec(learners.title, shlex.join(learners.command), learners.workdir),
            [tmux.PaneSpec(p.title, shlex.join(p.command), str(PROJECT_ROOT)) for p in actors],
            force=opts.force)
    except tmux.TmuxSessionExists as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    record = {"tmux_session": opts.tmux_sess, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "workers_csv_path": str(Path(opts.workers_csv_path).resolve()),
              "ssh_config": opts.ssh_config, "ssh_options": opts.ssh_options,
              "panes": panes, "processes": [asdict(p) for p in plan.processes]}
    (plan.run_dir / "cluster.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"started {len(plan.groups)} learner(s) and {len(actors)} actor(s) in tmux session "
          f"{opts.tmux_sess!r}; run directory {plan.run_dir}", flush=True)
    print(f"  attach: tmux attach -t {opts.tmux_sess}    (Ctrl-b n / Ctrl-b p: next/previous "
          "window, Ctrl-b o: next pane, Ctrl-b d: detach)", flush=True)
    stop_hint = shlex.join([sys.executable, "run_experiment_mm_raw.py", *sys.argv[1:], "--stop"])
    print(f"  stop:   {stop_hint}", flush=True)
    if opts.detach:
        return 0
    return follow(cfg, opts, plan)


def _read_summary(plan: Plan) -> dict[str, str] | None:
    path = plan.run_dir / "logs.csv"
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 2:
        return None
    return next(csv.DictReader(io.StringIO(lines[0] + "\n" + lines[-1])))


def follow(cfg: Config, opts: FrontendOptions, plan: Plan) -> int:
    """Print a summary line until the learners exit; Ctrl-C stops the whole run."""
    interrupted = threading.Event()

    def on_signal(signum: int, _frame) -> None:
        interrupted.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    learners = plan.processes[0]
    actors = plan.processes[1:]
    time.sleep(2)
    while not interrupted.wait(opts.summary_interval_s):
        alive = sum(logged.is_running(Path(p.pidfile)) for p in actors)
        row = _read_summary(plan)
        if row:
            mean_return = row.get("mean_episode_return") or "n/a"
            frames = int(float(row["frames"]))
            print(f"frames {frames:,}/{cfg.total_environment_frames:,} "
                  f"({100 * frames / cfg.total_environment_frames:.1f}%) | "
                  f"SPS {float(row['sps']):,.0f} | return {mean_return} | "
                  f"actors alive {alive}/{len(actors)}", flush=True)
        else:
            print(f"waiting for the learners' first log row | actors alive "
                  f"{alive}/{len(actors)}", flush=True)
        if not logged.is_running(Path(learners.pidfile)):
            status = logged.last_line(Path(learners.log))
            print(f"learners ended ({status}); stopping the actors", flush=True)
            _end_run(plan, opts)
            return 0 if status.endswith("exited with status 0") else 1
    print("interrupted: stopping the whole run", flush=True)
    _end_run(plan, opts)
    return 0


def _end_run(plan: Plan, opts: FrontendOptions) -> None:
    stop_processes(plan.processes, opts, csv_path=opts.workers_csv_path)
    tmux.kill_session(opts.tmux_sess)


# ------------------------------------------------------------------------ stop, status
def _recorded_access(process: Process, opts: FrontendOptions, csv_path: str) -> HostAccess:
    """The login recorded at start; its password, if it had one, from the CSV row with the
    same host and user (not the same line: the file may have been edited since)."""
    if not process.ssh:  # recorded by a version that kept only the CSV line
        return host_access(_workers_by_line(csv_path)[process.csv_line], _ssh_settings(opts))
    access = HostAccess(**process.ssh)
    if not process.ssh_password_in_csv:
        return access
    settings = _ssh_settings(opts)
    for worker in _workers_by_line(csv_path).values():
        if worker.ip == process.host and worker.ssh_password \
                and host_access(worker, settings).username == access.username:
            return dataclasses.replace(access, password=worker.ssh_password)
    raise KeyError(f"{csv_path} no longer has a password for {access.label}")


def _remote_logged(process: Process, opts: FrontendOptions, csv_path: str,
                   arguments: list[str], timeout: float = 60.0) -> tuple[int, str]:
    """Run `python -m impala.launcher.logged ARGUMENTS` in the process's checkout on its
    host, over the login recorded at start; raises ConnectionError or KeyError."""
    access = _recorded_access(process, opts, csv_path)
    command = shlex.join([process.remote_python, "-m", "impala.launcher.logged", *arguments])
    return run_remote(access, f"cd {shlex.quote(process.workdir)} && {command}", timeout)


def _stop_one(process: Process, opts: FrontendOptions, csv_path: str) -> str:
    grace = LEARNER_STOP_GRACE_S if process.role == "learners" else ACTOR_STOP_GRACE_S
    results = []
    if process.remote_pidfile:
        try:
            code, output = _remote_logged(
                process, opts, csv_path,
                ["--stop", process.remote_pidfile, "--grace_s", str(grace)], grace + 30)
            results.append(f"remote: {output.strip() or code}")
        except (ConnectionError, KeyError) as exc:
            results.append(f"remote: could not stop ({exc})")
    # mpirun forwards SIGUSR1 to every rank at once; on SIGTERM it would wait, then kill
    # them (impala/launcher/mpi.py). Ranks take either as a stop request.
    first = signal.SIGUSR1 if process.role == "learners" else signal.SIGTERM
    results.append(logged.stop(Path(process.pidfile), grace, first_signal=first))
    return "; ".join(results)


def stop_processes(processes: list[Process], opts: FrontendOptions, csv_path: str) -> bool:
    """Stop every recorded process in parallel; True if none had to be given up on."""
    with ThreadPoolExecutor(max_workers=max(1, len(processes))) as pool:
        results = list(pool.map(lambda p: _stop_one(p, opts, csv_path), processes))
    ok = True
    for process, result in zip(processes, results, strict=True):
        print(f"  {process.name} on {process.host}: {result}", flush=True)
        ok = ok and "could not" not in result
    return ok


def _workers_by_line(csv_path: str) -> dict[int, WorkerSpec]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {w.line: w for w in read_cluster_csv(csv_path)}
    except ClusterFileError:
        return {}


def _load_record(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return None


def stop_run(opts: FrontendOptions, run_dir: Path) -> int:
    record = _load_record(run_dir)
    if record is None:
        print(f"error: no cluster.json in {run_dir}: nothing recorded to stop (pass the same "
              "--logdir/--run_name/training flags as the start)", file=sys.stderr)
        return 1
    processes = [Process(**p) for p in record["processes"]]
    print(f"stopping {len(processes)} process group(s) of {run_dir} ...", flush=True)
    ok = stop_processes(processes, opts, record["workers_csv_path"])
    if tmux.kill_session(record["tmux_session"]):
        print(f"  tmux session {record['tmux_session']!r} killed", flush=True)
    return 0 if ok else 1


def status_run(opts: FrontendOptions, run_dir: Path) -> int:
    record = _load_record(run_dir)
    if record is None:
        print(f"error: no cluster.json in {run_dir}", file=sys.stderr)
        return 1
    for p in (Process(**p) for p in record["processes"]):
        alive = logged.is_running(Path(p.pidfile))
        if p.remote_pidfile:
            try:
                _, output = _remote_logged(p, opts, record["workers_csv_path"],
                                           ["--status", p.remote_pidfile])
                alive = output.startswith("alive")
            except (ConnectionError, KeyError) as exc:
                print(f"{p.name:10s} {p.host:15s} unknown ({exc})")
                continue
        print(f"{p.name:10s} {p.host:15s} {'alive' if alive else 'dead ':5s} "
              f"{logged.last_line(Path(p.log))}")
    return 0


# ------------------------------------------------------------------------------- main
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
    run_dir = Path(_resolve(str(PROJECT_ROOT), cfg.logdir, cfg.resolved_run_name))
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
        problems = _local_workdir_problems(workers)
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
