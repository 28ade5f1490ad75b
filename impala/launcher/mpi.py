"""The one MPMD `mpirun` command line that starts every learner as a Horovod rank.

  mpirun [--allow-run-as-root] -H a:2,b:1 -bind-to none -map-by slot -mca mpi_yield_when_idle 1
         -mca odls_base_sigkill_timeout 10
         [-mca plm_rsh_agent "ssh ..."] [-mca oob_tcp_if_include X -mca btl_tcp_if_include X]
         -np 1 -host a:2 -wdir D -x PYTHONUNBUFFERED=1 -x MASTER_ADDR=a -x MASTER_PORT=p
             -x CUDA_VISIBLE_DEVICES=0 -x HOROVOD_CYCLE_TIME=5 python experiment.py
             --job_name=learner --task=0 --learner_host=a:8001 ... :
         -np 1 -host a:2 ... --task=1 --learner_host=a:8002 ... :
         -np 1 -host b:1 ... --task=2 --learner_host=b:8001 ...

Block i is rank i and serves the actors assigned to learner i.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class LearnerLaunch:
    host: str  # address mpirun reaches the host at (the CSV's ip)
    port: int  # the port its actors connect to
    python: str  # interpreter on that host
    workdir: str  # project checkout on that host
    cuda_visible_devices: str = ""
    node: str = ""  # the name mpirun launches on, where it differs from `host` (Slurm's)

    @property
    def launch_host(self) -> str:
        return self.node or self.host


@dataclass(frozen=True)
class MpiOptions:
    as_root: bool = os.geteuid() == 0 if hasattr(os, "geteuid") else False
    iface: str | None = None  # network (CIDR) or interface name for MPI's TCP traffic
    ssh_command: str | None = None  # how mpirun reaches remote hosts, e.g. "ssh -F cfg"
    slurm: bool = False  # inside a Slurm allocation: mpirun launches through srun
    master_port: int = 29500  # torch.distributed rendezvous on the first learner's host
    # Milliseconds between Horovod's coordination rounds, which also run while ranks wait
    # for data and take CPU from actors sharing the cores: 5 ms against Horovod's own
    # setting gained 3-82% with 2 learners and 2 actors on 2 cores, and cost 3% with a core
    # per rank.
    horovod_cycle_time_ms: float | None = 5.0  # None: Horovod's own setting
    # Seconds a rank has to checkpoint and exit after mpirun's SIGTERM (see below).
    stop_grace_s: int = 10
    mpirun: str = "mpirun"


def host_slots(learners: list[LearnerLaunch]) -> str:
    """`a:2,b:1`: each host once, in first-seen order, with its number of learners."""
    counts: dict[str, int] = {}
    for learner in learners:
        counts[learner.launch_host] = counts.get(learner.launch_host, 0) + 1
    return ",".join(f"{host}:{n}" for host, n in counts.items())


def mpirun_command(learners: list[LearnerLaunch], learner_flags: list[str],
                   options: MpiOptions) -> list[str]:
    """The argv of the mpirun that starts `learners`, each with `learner_flags` plus its own
    --task and --learner_host."""
    if not learners:
        raise ValueError("at least one learner is needed")
    command = [options.mpirun]
    if options.as_root:
        command.append("--allow-run-as-root")
    command += ["-H", host_slots(learners), "-bind-to", "none", "-map-by", "slot"]
    # Learners share hosts with actors: a rank waiting in a collective must yield its core
    # instead of busy-polling (measured: 150 ms -> a few ms per update on 2 shared cores).
    command += ["-mca", "mpi_yield_when_idle", "1"]
    # On SIGTERM or SIGINT mpirun sends the ranks SIGCONT, SIGTERM after this many seconds
    # and SIGKILL after as many again (measured). The default, 1 s, often killed a rank
    # before its final checkpoint. The frontend stops ranks with SIGUSR1, which mpirun
    # forwards at once; this covers a Ctrl-C in the learners' pane.
    command += ["-mca", "odls_base_sigkill_timeout", str(options.stop_grace_s)]
    if options.ssh_command:
        command += ["-mca", "plm_rsh_agent", options.ssh_command]
    if options.slurm:
        # mpirun's daemons are a job step: let it share the nodes' CPUs with the actors'
        # steps, or whichever starts second waits for the other to end.
        command += ["-mca", "plm_slurm_args", "--overlap"]
    if options.iface:
        command += ["-mca", "oob_tcp_if_include", options.iface,
                    "-mca", "btl_tcp_if_include", options.iface]
    slots = host_slots(learners).split(",")
    slot_of = {entry.rpartition(":")[0]: entry for entry in slots}
    for rank, learner in enumerate(learners):
        if rank:
            command.append(":")
        # Pin the block to its host; naming the host's full slot count lets several
        # blocks share one host.
        command += ["-np", "1", "-host", slot_of[learner.launch_host], "-wdir",
                    learner.workdir]
        # In an MPMD command line, -x before the first block reaches only the first
        # block's rank (measured with OpenMPI 4.1), so every block gets its own.
        variables = ["PYTHONUNBUFFERED=1", f"MASTER_ADDR={learners[0].host}",
                     f"MASTER_PORT={options.master_port}",
                     f"CUDA_VISIBLE_DEVICES={learner.cuda_visible_devices}"]
        if options.horovod_cycle_time_ms is not None:
            variables.append(f"HOROVOD_CYCLE_TIME={options.horovod_cycle_time_ms:g}")
        for variable in variables:
            command += ["-x", variable]
        command += [learner.python, "experiment.py", "--job_name=learner", f"--task={rank}",
                    f"--learner_host={learner.host}:{learner.port}", *learner_flags]
    return command

