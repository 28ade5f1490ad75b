"""The plan of a run: from the CSV's workers and the flags, what runs where, computed once.

Pure: nothing here starts, checks or touches a host. `build_plan` returns the learners'
mpirun and one process per actor (local, over OpenSSH, or through the password relay),
with every path, pidfile and log, and where each CSV row runs (`Placement`: this host or
a login, checkout, interpreter and run directory there). `--dry_run` prints it; the
preflight and the key copies read the plan's placements.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from impala import auth
from impala.config import Config
from impala.launcher.cluster import LearnerGroup, WorkerSpec, learner_groups
from impala.launcher.keys import KeyCopy
from impala.launcher.mpi import LearnerLaunch, MpiOptions, mpirun_command
from impala.launcher.options import FrontendOptions
from impala.launcher.slurm import SlurmNode, slurm_env, srun_argv
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
    via: str = ""  # "srun" for a process this host starts on a Slurm node


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
    """Where one worker's process runs: this host, a remote one reached by `access`, or
    (with --slurm) a node of the allocation reached by srun."""

    line: int  # CSV line of the row
    local: bool
    workdir: str  # the project checkout on that host
    python: str  # the interpreter there
    run_dir: str  # the run directory there
    access: HostAccess | None  # the row's login; None on this host
    learner_host: bool  # the host runs a learner (needs mpirun's daemon and Horovod)
    slurm_node: SlurmNode | None = None


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


def place_workers(cfg: Config, opts: FrontendOptions, workers: list[WorkerSpec],
                  node_of: Mapping[int, SlurmNode] | None = None) -> dict[int, Placement]:
    """Each row's placement, by CSV line. With `node_of` (--slurm), every worker is started
    by srun on its node, in the checkout and interpreter at this checkout's paths (a
    cluster's shared filesystem) unless --remote_workdir/--remote_python say otherwise."""
    addresses = local_addresses()
    options = ssh_options_of(opts)
    learner_ips = {w.ip for w in workers if w.job == "learner"}
    placements = {}
    for worker in workers:
        node = node_of[worker.line] if node_of else None
        local = node is None and is_local(worker.ip, addresses)
        workdir = workdir_of(worker, local, opts)
        placements[worker.line] = Placement(
            line=worker.line, local=local, workdir=workdir,
            python=python_of(worker, local, workdir, opts),
            run_dir=str(cfg.run_dir_on(workdir)),
            access=None if local or node else host_access(worker, options),
            learner_host=worker.ip in learner_ips, slurm_node=node)
    return placements


def build_plan(cfg: Config, opts: FrontendOptions, workers: list[WorkerSpec],
               node_of: Mapping[int, SlurmNode] | None = None) -> Plan:
    """The run's processes; `node_of` gives each worker's Slurm node, by line (--slurm)."""
    placements = place_workers(cfg, opts, workers, node_of)
    run_dir = cfg.run_dir_on(PROJECT_ROOT)
    common = (_training_flags(cfg)
              + [f"--logdir={cfg.logdir}", f"--run_name={cfg.resolved_run_name}"])
    groups = learner_groups(workers)
    launches = []
    for group in groups:
        place = placements[group.learner.line]
        launches.append(LearnerLaunch(
            group.learner.ip, group.learner.port, place.python, place.workdir,
            group.learner.cuda_visible_devices,
            node=place.slurm_node.name if place.slurm_node else ""))
    mpi = mpirun_command(launches, common, MpiOptions(
        iface=opts.mpi_iface or None,
        ssh_command=None if node_of else mpirun_ssh_agent(ssh_options_of(opts)),
        slurm=bool(node_of), master_port=opts.master_port,
        horovod_cycle_time_ms=opts.horovod_cycle_time_ms))
    if node_of:
        mpi = ["env", *slurm_env(), *mpi]
    pidfile, log = str(run_dir / "pids" / "learners.pid"), str(run_dir / "mpirun.log")
    learners = Process(
        name="learners", role="learners",
        host=", ".join(sorted({g.learner.ip for g in groups})), local=True,
        title=f"learners x{len(groups)} (mpirun)", workdir=str(PROJECT_ROOT),
        command=logged_argv(mpi, pidfile, log,
                            supervision=[*learner_supervision(opts), "--end_run", str(run_dir)]),
        pidfile=pidfile, log=log)

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
    # Restarted where it runs: the supervisor beside the actor, on its host, restarts it and
    # tells its learner when it leaves it down. The local end of an ssh session starts the
    # session again when it fails (cut off, or its host's processes gone), not when the
    # supervisor there ended it (a stop, status 0).
    beside = [*actor_supervision(opts, "always"), "--report_down"]
    session = actor_supervision(opts, "on-failure")
    if place.slurm_node:
        # srun runs here and the actor on its node: stopping srun stops the actor.
        srun = ["env", *slurm_env(), *srun_argv(place.slurm_node, place.workdir, name)]
        return Process(name, "actor", place.slurm_node.name, True, title, place.workdir,
                       logged_argv([*srun, *actor], pidfile, log, supervision=beside),
                       pidfile, log, csv_line=worker.line, via="srun")
    if place.access is None:
        return Process(name, "actor", worker.ip, True, title, place.workdir,
                       logged_argv(actor, pidfile, log, supervision=beside), pidfile, log,
                       csv_line=worker.line)
    remote_pidfile = f"{place.run_dir}/pids/{name}.pid"
    remote_line = (f"cd {shlex.quote(place.workdir)} && exec "
                   + shlex.join(logged_argv(actor, remote_pidfile, python=place.python,
                                            supervision=beside)))
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
                   logged_argv(transport, local_pidfile, log, supervision=session),
                   local_pidfile, log,
                   remote_pidfile=remote_pidfile, remote_python=place.python,
                   csv_line=worker.line, ssh=login,
                   ssh_password_in_csv=bool(worker.ssh_password))


def logged_argv(command: list[str], pidfile: str, log: str | None = None,
                python: str = sys.executable, supervision: list[str] | None = None
                ) -> list[str]:
    """`command` run under impala.launcher.logged: its own process group, a pidfile,
    (given `log`) its output copied to a log file, and `supervision`: its restart flags."""
    return [python, "-m", "impala.launcher.logged", "--pidfile", pidfile,
            *(["--log", log] if log else []), *(supervision or []), "--", *command]


def actor_supervision(opts: FrontendOptions, when: str) -> list[str]:
    """An actor is started again when it exits (`when`: always, or on-failure), until it
    exits too often."""
    return [f"--restart={when}", f"--restart_limit={opts.actor_restart_limit}",
            f"--restart_window_s={opts.actor_restart_window_s:g}"]


def learner_supervision(opts: FrontendOptions) -> list[str]:
    """The learner group (its mpirun) is started again, from the last checkpoint, when it
    fails, up to --max_restarts times in the whole run."""
    return ["--restart=on-failure", f"--restart_limit={opts.max_restarts}",
            "--restart_window_s=0"]


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
        where = (f"{process.host} via {process.via or 'ssh'}"
                 if process.via or not process.local else "this host")
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
    copies: dict[tuple[HostAccess | SlurmNode, str], tuple[int, ...]] = {}
    for place in plan.placements:
        where = place.access or place.slurm_node
        if where is not None:
            key = (where, f"{place.run_dir}/{auth.KEYS_FILE}")
            copies[key] = copies.get(key, ()) + (place.line,)
    return [KeyCopy(where, path, lines) for (where, path), lines in copies.items()]
