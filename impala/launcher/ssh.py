"""SSH to the cluster's hosts: paramiko for checks and remote commands, and the OpenSSH
command line for tmux panes and mpirun, both from the same options.

Passwords come from the CSV only. They are handed to paramiko and are never printed,
logged or put on a command line. OpenSSH (panes, mpirun) is used with keys only.
"""

from __future__ import annotations

import getpass
import ipaddress
import shlex
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import paramiko
import psutil

from impala.launcher.cluster import WorkerSpec

CONNECT_TIMEOUT_S = 10.0
T = TypeVar("T")


@dataclass(frozen=True)
class SshOptions:
    config_file: str = ""  # -F for OpenSSH; read by paramiko too
    options: tuple[str, ...] = ()  # extra OpenSSH options, e.g. ("-o", "BatchMode=yes")


@dataclass(frozen=True)
class HostAccess:
    """How to reach one host: from the CSV, filled in from ssh_config."""

    host: str
    port: int
    username: str
    key_file: str = ""
    password: str = field(default="", repr=False)
    accept_unknown_host_keys: bool = False
    known_hosts_file: str = ""

    @property
    def label(self) -> str:
        return f"{self.username}@{self.host}:{self.port}"


def local_addresses() -> set[str]:
    addresses = {"localhost", socket.gethostname()}
    for entries in psutil.net_if_addrs().values():
        addresses.update(entry.address.split("%")[0] for entry in entries
                         if entry.family in (socket.AF_INET, socket.AF_INET6))
    return addresses


def is_local(ip: str, addresses: set[str] | None = None) -> bool:
    try:
        if ipaddress.ip_address(ip).is_loopback:
            return True
    except ValueError:
        pass
    return ip in (addresses if addresses is not None else local_addresses())


def host_access(worker: WorkerSpec, options: SshOptions) -> HostAccess:
    """CSV values first, then ssh_config (User, Port, IdentityFile, StrictHostKeyChecking)."""
    config = paramiko.SSHConfig()
    if options.config_file:
        config = paramiko.SSHConfig.from_path(options.config_file)
    else:
        default = Path.home() / ".ssh" / "config"
        if default.exists():
            config = paramiko.SSHConfig.from_path(str(default))
    entry = config.lookup(worker.ip)
    identity = entry.get("identityfile", [""])[0]
    return HostAccess(
        host=entry.get("hostname", worker.ip),
        port=worker.ssh_port if worker.ssh_port != 22 else int(entry.get("port", 22)),
        username=worker.ssh_username or entry.get("user", getpass.getuser()),
        key_file=worker.ssh_key or identity,
        password=worker.ssh_password,
        accept_unknown_host_keys=entry.get("stricthostkeychecking", "yes") in ("no",
                                                                               "accept-new"),
        known_hosts_file=entry.get("userknownhostsfile", "").split()[0]
        if entry.get("userknownhostsfile") else "",
    )


def connect(access: HostAccess, timeout: float = CONNECT_TIMEOUT_S) -> paramiko.SSHClient:
    """An open paramiko client; raises ConnectionError with a message fit to show."""
    client = paramiko.SSHClient()
    client.load_system_host_keys()
    if access.known_hosts_file and access.known_hosts_file != "/dev/null" \
            and Path(access.known_hosts_file).exists():
        client.load_host_keys(access.known_hosts_file)
    client.set_missing_host_key_policy(
        paramiko.AutoAddPolicy() if access.accept_unknown_host_keys else paramiko.RejectPolicy())
    try:
        client.connect(
            access.host, port=access.port, username=access.username,
            # A password in the CSV is the login asked for: keys are not tried then.
            password=access.password or None,
            key_filename=(access.key_file or None) if not access.password else None,
            timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
            allow_agent=not access.password, look_for_keys=not access.password,
        )
    except paramiko.AuthenticationException:
        how = "password" if access.password else "keys"
        raise ConnectionError(f"{access.label}: authentication with {how} failed") from None
    except paramiko.SSHException as exc:
        raise ConnectionError(f"{access.label}: ssh error: {exc}") from None
    except OSError as exc:
        raise ConnectionError(f"{access.label}: unreachable: {exc.strerror or exc}") from None
    return client


def run_remote(access: HostAccess, command: str, timeout: float = 60.0) -> tuple[int, str]:
    """Run `command` through the remote shell; (exit status, stdout+stderr)."""
    client = connect(access)
    try:
        _, stdout, stderr = client.exec_command(command, timeout=timeout)
        output = stdout.read().decode(errors="replace") + stderr.read().decode(errors="replace")
        return stdout.channel.recv_exit_status(), output
    finally:
        client.close()


@dataclass(frozen=True)
class PreflightCheck:
    access: HostAccess
    python: str
    workdir: str
    needs_mpi: bool  # learner hosts need mpirun's remote daemon and Horovod
    lines: tuple[int, ...]  # CSV lines that use this host


def _check_host(check: PreflightCheck) -> str | None:
    imports = "import impala, torch, zmq" + (", horovod.torch" if check.needs_mpi else "")
    command = (f"cd {shlex.quote(check.workdir)} && {shlex.quote(check.python)} -c "
               f"{shlex.quote(imports)}")
    if check.needs_mpi:
        command += " && command -v orted >/dev/null"
    lines = ", ".join(str(n) for n in check.lines)
    try:
        status, output = run_remote(check.access, command, timeout=120)
    except ConnectionError as exc:
        return f"{exc} (CSV line {lines})"
    if status != 0:
        last = output.strip().splitlines()[-1] if output.strip() else f"exit status {status}"
        what = f"{check.python} in {check.workdir} cannot import the project ({imports})"
        if check.needs_mpi:
            what += " or OpenMPI's orted is missing"
        return f"{check.access.label} (CSV line {lines}): {what}: {last}"
    return None


def preflight(checks: list[PreflightCheck]) -> list[str]:
    """Check every host in parallel; the problems found, all of them."""
    return problems_in_parallel(_check_host, checks)


def problems_in_parallel(task: Callable[[T], str | None], items: list[T]) -> list[str]:
    """Run `task` on every item at once (up to 32 hosts at a time); the problems it
    reported, in the items' order."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(items))) as pool:
        return [problem for problem in pool.map(task, items) if problem]


def openssh_argv(access: HostAccess, options: SshOptions, tty: bool = False) -> list[str]:
    """`ssh [-F cfg] [options] -p PORT [-i KEY] user@host` (keys only, never a password)."""
    argv = ["ssh"]
    if options.config_file:
        argv += ["-F", options.config_file]
    argv += list(options.options)
    if tty:
        argv.append("-tt")  # the remote process gets SIGHUP when this ssh goes away
    argv += ["-o", "BatchMode=yes", "-p", str(access.port)]
    if access.key_file:
        argv += ["-i", access.key_file]
    argv.append(f"{access.username}@{access.host}")
    return argv


def mpirun_ssh_agent(options: SshOptions) -> str | None:
    """The plm_rsh_agent value: the same ssh options for mpirun as for our own ssh."""
    if not options.config_file and not options.options:
        return None
    parts = ["ssh"]
    if options.config_file:
        parts += ["-F", options.config_file]
    parts += list(options.options)
    return shlex.join(parts)


def put_private_file(access: HostAccess, path: str, content: bytes) -> None:
    """Write `content` to `path` on the host, readable by the login user only (0600, in a
    0700 folder); replaced atomically. Raises ConnectionError with a message fit to show."""
    folder = path.rsplit("/", 1)[0] or "/"
    client = connect(access)
    try:
        _, stdout, stderr = client.exec_command(
            f"umask 077 && mkdir -p {shlex.quote(folder)} && chmod 700 {shlex.quote(folder)}",
            timeout=60)
        if stdout.channel.recv_exit_status() != 0:
            reason = stderr.read().decode(errors="replace").strip().splitlines()
            raise ConnectionError(f"{access.label}: cannot create {folder}: "
                                  f"{reason[-1] if reason else 'mkdir failed'}")
        tmp = f"{path}.tmp"
        with client.open_sftp() as sftp:
            with sftp.open(tmp, "wb") as remote:
                remote.chmod(0o600)  # before the secret is in it
                remote.write(content)
            sftp.posix_rename(tmp, path)
    except (OSError, paramiko.SSHException) as exc:
        raise ConnectionError(f"{access.label}: cannot write {path}: {exc}") from None
    finally:
        client.close()
