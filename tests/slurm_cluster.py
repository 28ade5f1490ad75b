"""A real Slurm cluster for the tests: a munged with a key of its own, a slurmctld on the
bridge's address, and one slurmd per network-namespace host (node1, node2, ... at
SUBNET.1, .2, ...). Everything lives in a work directory: the key, the sockets, the
configuration (SLURM_CONF), the spool, state, pid and log files, so this machine's own
munge and Slurm settings are neither used nor changed, and exit stops exactly what was
started here."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.netns import BRIDGE_ADDRESS, NamespaceNetwork

CTLD_PORT = 16817  # ports of this test cluster only, away from Slurm's 6817/6818
SLURMD_PORT = 16818
# A requeued job waits cred_expire + 1 s before it may start again (121 s by default): the
# test cluster's shorter wait keeps the requeue tests to their point, the resume, while a
# job step's credential still lasts long enough for a loaded machine to launch it.
CRED_EXPIRE_S = 30


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "slurmd and network namespaces need root"
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "ip"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh --test-engines installs it)"
    return None


class SlurmCluster:
    """`nodes` Slurm nodes with `cpus` CPUs each, one per namespace host, in partition
    `test`. `env` is what a client command (sbatch, scontrol, scancel) needs."""

    def __init__(self, workdir: Path, nodes: int = 3, cpus: int = 2):
        self.workdir, self.nodes, self.cpus = workdir, nodes, cpus
        self.network = NamespaceNetwork(workdir / "net", nodes, sshd=False)
        self.daemons: list[subprocess.Popen] = []
        self.conf = workdir / "slurm.conf"
        self.munge_socket = workdir / "munge" / "munge.socket"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def node_names(self) -> list[str]:
        return [f"node{i + 1}" for i in range(self.nodes)]

    def __enter__(self) -> SlurmCluster:
        try:
            self.network.__enter__()
            self._start_munged()
            self._write_conf()
            self._start(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
            for name, host in zip(self.node_names(), self.network.hosts, strict=True):
                self._start(["ip", "netns", "exec", host.name, "slurmd", "-D", "-N", name,
                             "-f", str(self.conf)], f"slurmd-{name}")
            self._wait_until_idle()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start_munged(self) -> None:
        munge = self.munge_socket.parent
        munge.mkdir(parents=True, mode=0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        subprocess.run(["munged", "--force", f"--socket={self.munge_socket}",
                        f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}",
                        f"--log-file={munge / 'munged.log'}",
                        f"--seed-file={munge / 'munged.seed'}"], check=True, timeout=30,
                       capture_output=True)

    def _write_conf(self) -> None:
        state = self.workdir / "state"
        state.mkdir()
        for name in self.node_names():
            (self.workdir / f"spool-{name}").mkdir()
        nodes = "\n".join(
            f"NodeName={name} NodeAddr={host.address} CPUs={self.cpus} State=UNKNOWN"
            for name, host in zip(self.node_names(), self.network.hosts, strict=True))
        self.conf.write_text(f"""\
ClusterName=impalatest
SlurmctldHost={socket.gethostname()}({BRIDGE_ADDRESS})
MailProg=/bin/true
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket},cred_expire={CRED_EXPIRE_S}
CredType=cred/munge
StateSaveLocation={state}
SlurmdSpoolDir={self.workdir}/spool-%n
SlurmctldPidFile={self.workdir}/slurmctld.pid
SlurmdPidFile={self.workdir}/slurmd-%n.pid
SlurmctldLogFile={self.workdir}/slurmctld.log
SlurmdLogFile={self.workdir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=60
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

        # Beside slurm.conf: slurmd reads it at start even with proctrack/linuxproc, and
        # this machine's cgroups are the v1 hierarchy under a tmpfs.
        (self.workdir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")

    def _start(self, argv: list[str], name: str) -> None:
        with open(self.workdir / f"{name}.out", "w") as log:  # the daemon keeps its own copy
            self.daemons.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                 env=self.env, start_new_session=True))

    def scontrol(self, *args: str) -> str:
        return subprocess.run(["scontrol", *args], capture_output=True, text=True,
                              check=True, timeout=30, env=self.env).stdout

    def _wait_until_idle(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                states = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"],
                                        capture_output=True, text=True, timeout=10,
                                        env=self.env).stdout.split("\n")
                idle = [line for line in states if line.endswith(" idle")]
                if len(idle) == self.nodes:
                    return
            except subprocess.TimeoutExpired:
                states = ["sinfo timed out"]
            if time.time() > deadline:
                logs = "".join(p.read_text()[-1500:] for p in self.workdir.glob("*.log"))
                raise RuntimeError(f"Slurm nodes did not come up: {states}\n{logs}")
            time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        if self.munge_socket.exists():
            subprocess.run(["munged", "--stop", f"--socket={self.munge_socket}"],
                           capture_output=True, timeout=30, check=False)
        self.network.__exit__(None, None, None)
