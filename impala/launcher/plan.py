"""The plan of a run: from the CSV's workers and the flags, what runs where, computed once.

Pure: nothing here starts, checks or touches a host. `build_plan` returns the learners'
mpirun and one process per actor (local, over OpenSSH, or through the password relay),
with every path, pidfile and log, and where each CSV row runs (`Placement`: this host or
a login, checkout, interpreter and run directory there). `--dry_run` prints it; the
preflight and the key copies read the plan's placements.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from impala import auth
from impala.config import Config
from impala.launcher.cluster import LearnerGroup, WorkerSpec, learner_groups
from impala.launcher.keys import KeyCopy
from impala.launcher.mpi import LearnerLaunch, MpiOptions, mpirun_command
from impala.launcher.ssh import (
    HostAccess,
    PreflightCheck,
    SshOptions,
    host_access,
    is_local,
    local_addresses,
    mpirun_ssh_agent,
    openssh_argv,
)
from impala.presets import to_argv

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
# Flags that the frontend sets per process instead of passing through.
PER_PROCESS_FLAGS = ("job_name", "task", "learner_host", "num_actors", "num_envs", "mode",
                     "actor_hosts", "run_name", "logdir", "first_env", "total_envs")


def _option(help: str, default: Any = dataclasses.MISSING) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class FrontendOptions:
    """The frontend's own flags (frontend.py makes one `--name` per field from this)."""

    workers_csv_path: str = _option("CSV: job,ip,tf_port,cuda_visible_devices,ssh_port,"
                                    "ssh_username,ssh_password[,num_envs,python,workdir,"
                                    "ssh_key]")
    tmux_sess: str = _option("tmux session name", "impala")
    dry_run: bool = _option("print the plan and every command, start nothing", False)
    force: bool = _option("replace an existing tmux session of that name", False)
    detach: bool = _option("return right after starting", False)
    stop: bool = _option("stop exactly the processes of this run on every host", False)
    status: bool = _option("show each process of this run alive or dead with its last line",
                           False)
    mpi_iface: str = _option("network (CIDR) or interface for MPI traffic, e.g. 10.0.0.0/24",
                             "")
    ssh_config: str = _option("ssh_config file for ssh and mpirun", "")
    ssh_options: str = _option("extra OpenSSH options for ssh and mpirun, e.g. "
                               "'-o ConnectTimeout=5'", "")
    remote_workdir: str = _option("project checkout on remote hosts (default: this "
                                  "checkout's path)", "")
    remote_python: str = _option("interpreter on remote hosts (default: "
                                 "<workdir>/.venv/bin/python)", "")
    master_port: int = _option("torch.distributed rendezvous port (--allreduce_backend=torch)",
                               29500)
    horovod_cycle_time_ms: float = _option("ms between Horovod's coordination rounds "
                                           "(HOROVOD_CYCLE_TIME; lower: less latency per "
                                           "update, more CPU while waiting)", 5.0)
    summary_interval_s: float = _option("seconds between the live summary's lines", 10.0)

    def __post_init__(self) -> None:
        if not 1 <= self.master_port <= 65535:
            raise ValueError(f"--master_port must be a port (1-65535), got {self.master_port}")
        for name in ("horovod_cycle_time_ms", "summary_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name} must be a number > 0, got {value}")


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
class ClusterRecord:
    """What the frontend started: written to `<run_dir>/cluster.json` at start, read back
    by `--stop` and `--status`, so they reach exactly those processes."""

    FILE = "cluster.json"

    tmux_session: str
    started: str
    workers_csv_path: str  # absolute: a password login reads its row again
    ssh_config: str
    ssh_options: str
    panes: list[Any]
    processes: list[Process]

    def save(self, run_dir: Path) -> None:
        (run_dir / self.FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, run_dir: Path) -> ClusterRecord | None:
        """The record in `run_dir`; None if there is none or it cannot be read."""
        try:
            data = json.loads((run_dir / cls.FILE).read_text())
            return cls(**{**data, "processes": [Process(**p) for p in data["processes"]]})
        except (OSError, ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class Placement:
    """Where one CSV row's process runs: this host, or a remote one reached by `access`."""

    line: int  # CSV line of the row
    local: bool
    workdir: str  # the project checkout on that host
    python: str  # the interpreter there
    run_dir: str  # the run directory there
    access: HostAccess | None  # the row's login; None on this host
    learner_host: bool  # the host runs a learner (needs mpirun's daemon and Horovod)


@dataclass
class Plan:
    run_dir: Path
    groups: list[LearnerGroup]
    learners: Process  # the one mpirun of every learner
    actors: list[Process]
    placements: list[Placement]  # one per CSV row, in file order

    @property
    def processes(self) -> list[Process]:
        return [self.learners, *self.actors]


def _training_flags(cfg: Config) -> list[str]:
    return [flag for flag in to_argv(cfg)
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


def local_workdir_problems(workers: list[WorkerSpec]) -> list[str]:
    """A workdir on a row of this host would be silently ignored: refuse it instead."""
    addresses = local_addresses()
    return [f"line {w.line}, column workdir: {w.ip} is this host, whose processes run in "
            f"this checkout ({PROJECT_ROOT}); leave workdir empty for local rows"
            for w in workers
            if w.workdir and is_local(w.ip, addresses)
            and Path(w.workdir).resolve() != PROJECT_ROOT]


def place_workers(cfg: Config, opts: FrontendOptions,
                  workers: list[WorkerSpec]) -> dict[int, Placement]:
    """Each row's placement, by CSV line."""
    addresses = local_addresses()
    options = ssh_options_of(opts)
    learner_ips = {w.ip for w in workers if w.job == "learner"}
    placements = {}
    for worker in workers:
        local = is_local(worker.ip, addresses)
        workdir = workdir_of(worker, local, opts)
        placements[worker.line] = Placement(
            line=worker.line, local=local, workdir=workdir,
            python=python_of(worker, local, workdir, opts),
            run_dir=str(cfg.run_dir_on(workdir)),
            access=None if local else host_access(worker, options),
            learner_host=worker.ip in learner_ips)
    return placements


def build_plan(cfg: Config, opts: FrontendOptions, workers: list[WorkerSpec]) -> Plan:
    placements = place_workers(cfg, opts, workers)
    run_dir = cfg.run_dir_on(PROJECT_ROOT)
    common = (_training_flags(cfg)
              + [f"--logdir={cfg.logdir}", f"--run_name={cfg.resolved_run_name}"])
    groups = learner_groups(workers)
    launches = []
    for group in groups:
        place = placements[group.learner.line]
        launches.append(LearnerLaunch(group.learner.ip, group.learner.port, place.python,
                                      place.workdir, group.learner.cuda_visible_devices))
    mpi = mpirun_command(launches, common, MpiOptions(
        iface=opts.mpi_iface or None, ssh_command=mpirun_ssh_agent(ssh_options_of(opts)),
        master_port=opts.master_port, horovod_cycle_time_ms=opts.horovod_cycle_time_ms))
    pidfile, log = str(run_dir / "pids" / "learners.pid"), str(run_dir / "mpirun.log")
    learners = Process(
        name="learners", role="learners",
        host=", ".join(sorted({g.learner.ip for g in groups})), local=True,
        title=f"learners x{len(groups)} (mpirun)", workdir=str(PROJECT_ROOT),
        command=logged_argv(mpi, pidfile, log), pidfile=pidfile, log=log)

    # Actor i is the i-th actor of the file and serves learner i mod L; its environments
    # follow those of the actors before it (exploration that differs per environment).
    actor_workers = [w for w in workers if w.job == "actor"]
    env_counts = [w.num_envs or cfg.num_envs for w in actor_workers]
    first_envs = [sum(env_counts[:i]) for i in range(len(env_counts))]
    actors = [_actor_process(cfg, opts, worker, placements[worker.line],
                             groups[task % len(groups)], task, common, run_dir,
                             (first_envs[task], sum(env_counts)))
              for task, worker in enumerate(actor_workers)]
    return Plan(run_dir=run_dir, groups=groups, learners=learners, actors=actors,
                placements=list(placements.values()))


def _actor_process(cfg: Config, opts: FrontendOptions, worker: WorkerSpec, place: Placement,
                   group: LearnerGroup, task: int, common: list[str], run_dir: Path,
                   envs: tuple[int, int]) -> Process:
    """`envs`: (the actor's first environment among the run's, the run's environments)."""
    name = f"actor-{task}"
    actor = ["env", f"CUDA_VISIBLE_DEVICES={worker.cuda_visible_devices}", place.python,
             "experiment.py", "--job_name=actor", f"--task={task}",
             f"--learner_host={group.learner.address}",
             f"--num_envs={worker.num_envs or cfg.num_envs}",
             f"--first_env={envs[0]}", f"--total_envs={envs[1]}", *common]
    pidfile = str(run_dir / "pids" / f"{name}.pid")
    log = str(run_dir / f"{name}.log")
    title = f"{name} {worker.ip}:{worker.port} -> learner {group.rank}"
    if place.access is None:
        return Process(name, "actor", worker.ip, True, title, place.workdir,
                       logged_argv(actor, pidfile, log), pidfile, log, csv_line=worker.line)
    remote_pidfile = f"{place.run_dir}/pids/{name}.pid"
    remote_line = (f"cd {shlex.quote(place.workdir)} && exec "
                   + shlex.join(logged_argv(actor, remote_pidfile, python=place.python)))
    if worker.ssh_password:
        # OpenSSH cannot take a password non-interactively: a paramiko relay reads it from
        # the CSV itself, so it is on no command line.
        transport = [sys.executable, "-m", "impala.launcher.relay", "--csv",
                     str(Path(opts.workers_csv_path).resolve()), "--line", str(worker.line)]
        if opts.ssh_config:
            transport += ["--ssh_config", opts.ssh_config]
        transport += ["--", "sh", "-c", remote_line]
    else:
        transport = [*openssh_argv(place.access, ssh_options_of(opts), tty=True), remote_line]
    local_pidfile = str(run_dir / "pids" / f"{name}.ssh.pid")
    login = {k: v for k, v in asdict(place.access).items() if k != "password"}
    return Process(name, "actor", worker.ip, False, title, place.workdir,
                   logged_argv(transport, local_pidfile, log), local_pidfile, log,
                   remote_pidfile=remote_pidfile, remote_python=place.python,
                   csv_line=worker.line, ssh=login,
                   ssh_password_in_csv=bool(worker.ssh_password))


def logged_argv(command: list[str], pidfile: str, log: str | None = None,
                python: str = sys.executable) -> list[str]:
    """`command` run under impala.launcher.logged: its own process group, a pidfile, and
    (given `log`) its output copied to a log file."""
    return [python, "-m", "impala.launcher.logged", "--pidfile", pidfile,
            *(["--log", log] if log else []), "--", *command]


def ssh_options_of(opts: FrontendOptions) -> SshOptions:
    return SshOptions(config_file=opts.ssh_config, options=tuple(shlex.split(opts.ssh_options)))


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


def preflight_checks(plan: Plan) -> list[PreflightCheck]:
    """One check per distinct login (host, port, user, key, password), interpreter and
    checkout: every row's own credentials are tried, rows that share them once."""
    checks: dict[tuple[HostAccess, str, str], PreflightCheck] = {}
    for place in plan.placements:
        if place.access is None:  # this host: nothing to check over ssh
            continue
        key = (place.access, place.python, place.workdir)
        previous = checks.get(key)
        lines = (previous.lines if previous else ()) + (place.line,)
        checks[key] = PreflightCheck(place.access, place.python, place.workdir,
                                     needs_mpi=place.learner_host, lines=lines)
    return list(checks.values())


def key_copies(plan: Plan) -> list[KeyCopy]:
    """Where each remote host's processes look for the run's key file: <run_dir>/keys."""
    copies: dict[tuple[HostAccess, str], tuple[int, ...]] = {}
    for place in plan.placements:
        if place.access is not None:
            key = (place.access, f"{place.run_dir}/{auth.KEYS_FILE}")
            copies[key] = copies.get(key, ()) + (place.line,)
    return [KeyCopy(access, path, lines) for (access, path), lines in copies.items()]
