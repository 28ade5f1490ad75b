"""Stopping and inspecting a run that was started: `--stop` and `--status`.

Everything comes from `<run_dir>/cluster.json` (what was started, where, and the login
used; never a password): remote processes are reached over that login, local ones by
their pidfiles (impala.launcher.logged).
"""

from __future__ import annotations

import dataclasses
import shlex
import signal
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from impala.launcher import processes, tmux
from impala.launcher.cluster import ClusterFileError, WorkerSpec, read_cluster_csv
from impala.launcher.options import FrontendOptions
from impala.launcher.plan import ClusterRecord, Process, ssh_options_of
from impala.launcher.ssh import HostAccess, host_access, run_remote

LEARNER_STOP_GRACE_S = 90.0  # learners save a checkpoint on SIGTERM
ACTOR_STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class StopResult:
    ok: bool  # False: some part could not be stopped (or reached)
    detail: str


def _recorded_access(process: Process, opts: FrontendOptions, csv_path: str) -> HostAccess:
    """The login recorded at start; its password, if it had one, from the CSV row with the
    same host and user (not the same line: the file may have been edited since)."""
    if not process.ssh:  # recorded by a version that kept only the CSV line
        return host_access(_workers_by_line(csv_path)[process.csv_line], ssh_options_of(opts))
    access = HostAccess(**process.ssh)
    if not process.ssh_password_in_csv:
        return access
    options = ssh_options_of(opts)
    for worker in _workers_by_line(csv_path).values():
        if worker.ip == process.host and worker.ssh_password \
                and host_access(worker, options).username == access.username:
            return dataclasses.replace(access, password=worker.ssh_password)
    raise KeyError(f"{csv_path} no longer has a password for {access.label}")


def _remote_logged(process: Process, opts: FrontendOptions, csv_path: str,
                   arguments: list[str], timeout: float = 60.0) -> tuple[int, str]:
    """Run `python -m impala.launcher.logged ARGUMENTS` in the process's checkout on its
    host, over the login recorded at start; raises ConnectionError or KeyError."""
    access = _recorded_access(process, opts, csv_path)
    command = shlex.join([process.remote_python, "-m", "impala.launcher.logged", *arguments])
    return run_remote(access, f"cd {shlex.quote(process.workdir)} && {command}", timeout)


def _stop_one(process: Process, opts: FrontendOptions, csv_path: str) -> StopResult:
    grace = LEARNER_STOP_GRACE_S if process.role == "learners" else ACTOR_STOP_GRACE_S
    results, ok = [], True
    if process.remote_pidfile:
        try:
            code, output = _remote_logged(
                process, opts, csv_path,
                ["--stop", process.remote_pidfile, "--grace_s", str(grace)], grace + 30)
            results.append(f"remote: {output.strip() or code}")
            ok = code == 0
        except (ConnectionError, KeyError) as exc:
            results.append(f"remote: could not stop ({exc})")
            ok = False
    # mpirun forwards SIGUSR1 to every rank at once; on SIGTERM it would wait, then kill
    # them (impala/launcher/mpi.py). Ranks take either as a stop request.
    first = signal.SIGUSR1 if process.role == "learners" else signal.SIGTERM
    results.append(processes.stop(Path(process.pidfile), grace, first_signal=first))
    return StopResult(ok, "; ".join(results))


def stop_processes(processes: list[Process], opts: FrontendOptions, csv_path: str) -> bool:
    """Stop every recorded process in parallel; True if none had to be given up on."""
    with ThreadPoolExecutor(max_workers=max(1, len(processes))) as pool:
        results = list(pool.map(lambda p: _stop_one(p, opts, csv_path), processes))
    for process, result in zip(processes, results, strict=True):
        print(f"  {process.name} on {process.host}: {result.detail}", flush=True)
    return all(result.ok for result in results)


def _workers_by_line(csv_path: str) -> dict[int, WorkerSpec]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {w.line: w for w in read_cluster_csv(csv_path)}
    except ClusterFileError:
        return {}


def stop_run(opts: FrontendOptions, run_dir: Path) -> int:
    record = ClusterRecord.load(run_dir)
    if record is None:
        print(f"error: no readable {ClusterRecord.FILE} in {run_dir}: nothing recorded to stop "
              "(pass the same --logdir/--run_name/training flags as the start)", file=sys.stderr)
        return 1
    print(f"stopping {len(record.processes)} process group(s) of {run_dir} ...", flush=True)
    ok = stop_processes(record.processes, opts, record.workers_csv_path)
    if tmux.kill_session(record.tmux_session):
        print(f"  tmux session {record.tmux_session!r} killed", flush=True)
    return 0 if ok else 1


def end_actors(run_dir: Path) -> int:
    """After the learners ended by themselves (their budget, or left down): stop the run's
    actors on every host and its tmux session, as a foreground frontend would, so a
    detached run ends whole. The learners' supervisor runs this."""
    record = ClusterRecord.load(run_dir)
    if record is None:
        print(f"error: no readable {ClusterRecord.FILE} in {run_dir}", file=sys.stderr)
        return 1
    opts = FrontendOptions(workers_csv_path=record.workers_csv_path,
                           slurm=not record.workers_csv_path, ssh_config=record.ssh_config,
                           ssh_options=record.ssh_options)
    print("the learners ended: stopping the actors", flush=True)
    ok = stop_processes([p for p in record.processes if p.role != "learners"], opts,
                        record.workers_csv_path)
    tmux.kill_session(record.tmux_session)  # the learners' pane too: its last act
    return 0 if ok else 1



def status_run(opts: FrontendOptions, run_dir: Path) -> int:
    record = ClusterRecord.load(run_dir)
    if record is None:
        print(f"error: no readable {ClusterRecord.FILE} in {run_dir}", file=sys.stderr)
        return 1
    for p in record.processes:
        state = processes.describe(Path(p.pidfile))
        if p.remote_pidfile:
            try:
                _, output = _remote_logged(p, opts, record.workers_csv_path,
                                           ["--status", p.remote_pidfile])
                remote = output.split("\t", 1)[0].strip()
                # The actor's own state is its host's; a session that is itself
                # restarting says so.
                state = remote if state.startswith("alive") else f"{remote}; ssh {state}"
            except (ConnectionError, KeyError) as exc:
                print(f"{p.name:10s} {p.host:15s} unknown ({exc})")
                continue
        print(f"{p.name:10s} {p.host:15s} {state}  {processes.last_line(Path(p.log))}")
    return 0


if __name__ == "__main__":
    # python -m impala.launcher.control --end_actors RUN_DIR
    if len(sys.argv) != 3 or sys.argv[1] != "--end_actors":
        sys.exit("usage: python -m impala.launcher.control --end_actors RUN_DIR")
    sys.exit(end_actors(Path(sys.argv[2])))
