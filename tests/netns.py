"""Test hosts in network namespaces: a bridge on a private test subnet, and per host a
namespace with its own address and its own sshd (key login; optionally password login).

Only addresses inside namespaces made here (and the bridge's own) are ever used. A password
host's sshd sees, in a mount namespace of its own, a copy of /etc/shadow in which root has
a random test password: this machine's own passwords are neither used nor changed.

With `private_dir`, every host also sees a directory of its own at that path (bind-mounted in
its sshd's mount namespace, which everything started over SSH inherits), as separate machines
would: a file written there on one host is not on another, nor here. `host.local_path(path)`
is where this machine sees a host's copy.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.213.77"  # private test subnet, only inside the namespaces made here
BRIDGE = "impbr0"
BRIDGE_ADDRESS = f"{SUBNET}.254"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=60)


def forward_rule(action: str) -> None:
    """Insert (-I) or delete (-D) the rule that lets the hosts reach each other: where Docker
    has run, bridged traffic passes iptables' FORWARD chain, whose policy Docker sets to
    DROP (and leaves so after it stops)."""
    if shutil.which("iptables"):
        sh("iptables", action, "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT",
           check=False)


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "ssh", "ssh-keygen", "/usr/sbin/sshd", "mpirun"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    probe = sh("ip", "netns", "add", "impprobe", check=False)
    if probe.returncode != 0:
        return f"cannot make network namespaces here: {probe.stderr.strip()}"
    sh("ip", "netns", "del", "impprobe", check=False)
    return None


@dataclass
class NamespaceHost:
    name: str  # namespace
    address: str
    sshd_pidfile: Path
    private_dir: Path | None = None  # the path where this host sees its own directory
    private_copy: Path | None = None  # that directory, as this machine sees it

    def local_path(self, path: Path) -> Path:
        """Where this machine sees the host's file at `path` (under `private_dir`)."""
        assert self.private_dir is not None and self.private_copy is not None
        return self.private_copy / Path(path).relative_to(self.private_dir)

    def pids(self) -> set[int]:
        out = sh("ip", "netns", "pids", self.name, check=False).stdout.split()
        return {int(p) for p in out}

    def sshd_pid(self) -> int:
        return int(self.sshd_pidfile.read_text().split()[0])


class NamespaceNetwork:
    """`count` hosts at SUBNET.1 .. SUBNET.count; `ssh_config` logs in as root with a key."""

    def __init__(self, workdir: Path, count: int = 3, password_hosts: tuple[int, ...] = (),
                 private_dir: Path | None = None, sshd: bool = True):
        self.workdir = workdir
        self.sshd = sshd  # False: the hosts run no sshd (their daemons are the test's)
        self.private_dir = private_dir
        self.count = count
        self.password_hosts = password_hosts  # indices whose sshd takes passwords too
        self.password = secrets.token_urlsafe(12)  # root's, on the password hosts only
        self.hosts: list[NamespaceHost] = []
        self.key = workdir / "id_ed25519"
        self.ssh_config = workdir / "ssh_config"

    def __enter__(self) -> NamespaceNetwork:
        try:
            self._make_keys()
            self._make_bridge()
            for index in range(self.count):
                self.hosts.append(self._make_host(index))
            for host in self.hosts if self.sshd else ():
                self._wait_for_sshd(host)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _make_keys(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.workdir / "host_key"))
        (self.workdir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        hashed = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=self.password,
                                capture_output=True, text=True, check=True).stdout.strip()
        lines = Path("/etc/shadow").read_text().splitlines()
        (self.workdir / "shadow").write_text("".join(
            (f"root:{hashed}:{line.split(':', 2)[2]}" if line.startswith("root:") else line)
            + "\n" for line in lines))
        (self.workdir / "shadow").chmod(0o600)
        self.ssh_config.write_text(
            f"Host {SUBNET}.*\n  User root\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
            "  ConnectTimeout 10\n")

    def _make_bridge(self) -> None:
        forward_rule("-D")  # a leftover of an interrupted run
        sh("ip", "link", "del", BRIDGE, check=False)
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        forward_rule("-I")

    def _make_host(self, index: int) -> NamespaceHost:
        name = f"imphost{index}"
        address = f"{SUBNET}.{index + 1}"
        outside, inside = f"impv{index}", f"impv{index}p"
        sh("ip", "netns", "del", name, check=False)
        sh("ip", "link", "del", outside, check=False)
        sh("ip", "netns", "add", name)
        sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        sh("ip", "link", "set", inside, "netns", name)
        sh("ip", "link", "set", outside, "master", BRIDGE)
        sh("ip", "link", "set", outside, "up")
        for command in (["ip", "link", "set", "lo", "up"],
                        ["ip", "addr", "add", f"{address}/24", "dev", inside],
                        ["ip", "link", "set", inside, "up"]):
            sh("ip", "netns", "exec", name, *command)
        pidfile = self.workdir / f"sshd-{index}.pid"
        if not self.sshd:
            return NamespaceHost(name, address, pidfile)
        Path("/run/sshd").mkdir(exist_ok=True)
        options = [f"ListenAddress={address}", f"HostKey={self.workdir / 'host_key'}",
                   f"AuthorizedKeysFile={self.workdir / 'authorized_keys'}",
                   "StrictModes=no", f"PidFile={pidfile}", "UsePAM=no",
                   "PermitRootLogin=" + ("yes" if index in self.password_hosts
                                         else "prohibit-password"),
                   "PasswordAuthentication=" + ("yes" if index in self.password_hosts
                                                else "no")]
        binds = []  # (what, where) in the sshd's own mount namespace
        if index in self.password_hosts:  # sees the test /etc/shadow, nothing else does
            binds.append((self.workdir / "shadow", Path("/etc/shadow")))
        copy = None
        if self.private_dir is not None:
            copy = self.workdir / f"private-{index}"
            copy.mkdir()
            binds.append((copy, self.private_dir))
        argv = ["ip", "netns", "exec", name]
        if binds:
            mounts = " && ".join(f'mount --bind "${2 * k}" "${2 * k + 1}"'
                                 for k in range(len(binds)))
            argv += ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                     f'{mounts} && shift {2 * len(binds) - 1} && exec "$@"',
                     *(str(p) for pair in binds for p in pair)]
        argv += ["/usr/sbin/sshd"]
        for option in options:
            argv += ["-o", option]
        sh(*argv)
        return NamespaceHost(name, address, pidfile, self.private_dir, copy)

    def _wait_for_sshd(self, host: NamespaceHost) -> None:
        deadline = time.time() + 20
        while time.time() < deadline:
            probe = sh("ssh", "-F", str(self.ssh_config), host.address, "true", check=False)
            if probe.returncode == 0:
                return
            time.sleep(0.3)
        raise RuntimeError(f"sshd on {host.address} did not come up: {probe.stderr}")

    def set_link(self, index: int, up: bool) -> None:
        """Cut host `index` off the network (its link down), or join it again."""
        sh("ip", "link", "set", f"impv{index}", "up" if up else "down")

    def stray_pids(self) -> dict[str, set[int]]:
        """Processes in each namespace other than its sshd listener."""
        return {h.name: h.pids() - {h.sshd_pid()} for h in self.hosts}

    def __exit__(self, *exc) -> None:
        for host in self.hosts:
            for pid in host.pids():
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "del", host.name, check=False)
        for index in range(self.count):
            sh("ip", "link", "del", f"impv{index}", check=False)
        forward_rule("-D")
        sh("ip", "link", "del", BRIDGE, check=False)
