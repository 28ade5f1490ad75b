"""Hosts from a Slurm allocation (`--slurm`): the job's nodes, each node's address, and the
CPUs and GPUs the job holds there, all read from `scontrol` (not DNS), turned into the same
workers a CSV gives. Learners go on the first `--num_learners` nodes; every node's cores
left over run one actor each.

Inside the allocation, processes start through Slurm: each actor by `srun` onto its node
(from its tmux pane, as an ssh would), the learners by one `mpirun`, which launches its
daemons through Slurm itself. Both need the job's SLURM_* variables, which a tmux server
started before the job would not pass on, so each command carries them (`slurm_env`).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from impala.launcher.cluster import WorkerSpec

# Cores a learner node keeps for its learner (the learner's threads and the rest of the
# host), as a single host's default actor count does (cores.default_actor_count).
LEARNER_CORES = 2
ACTOR_PORT = 9001  # informational, as in the CSV: actors connect out, they bind nothing
# scontrol's one-line records: `Key=value` pairs, where a value may hold spaces (OS=...).
FIELD = re.compile(r"(\S+?)=(.*?)(?=\s+[A-Za-z/:_]+=|\s*$)")


class SlurmError(RuntimeError):
    """The allocation cannot be read or cannot hold the run; the message says why."""


@dataclass(frozen=True)
class SlurmNode:
    name: str  # Slurm's node name: what srun -w and mpirun -H take
    address: str  # NodeAddr: where learners listen and actors connect
    cpus: int  # the job's CPUs on this node
    gpus: tuple[str, ...] = ()  # the job's GPU indices on this node


def fields(record: str) -> dict[str, str]:
    """One `scontrol -o` record as {key: value}; a key seen twice keeps its first value."""
    found: dict[str, str] = {}
    for match in FIELD.finditer(record):
        found.setdefault(match.group(1), match.group(2).strip())
    return found


def expand_ids(ids: str) -> list[int]:
    """The ids a Slurm id list names: "0-2,8" -> [0, 1, 2, 8]."""
    expanded: list[int] = []
    for part in filter(None, ids.split(",")):
        low, _, high = part.partition("-")
        expanded += range(int(low), int(high or low) + 1)
    return expanded


def count_ids(ids: str) -> int:
    """How many ids a Slurm id list names: "0-3,8,10-11" -> 7."""
    return len(expand_ids(ids))


def gpu_indices(gres: str) -> tuple[str, ...]:
    """The GPU indices in a job's per-node GRES: "gpu:a100:2(IDX:0-1)" -> ("0", "1")."""
    return tuple(str(i) for entry in re.finditer(r"gpu(?::[^:(,]+)*:\d+\(IDX:([^)]*)\)", gres)
                 for i in expand_ids(entry.group(1)))


def job_resources(job_detail: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """(node list, CPUs per node, GPU indices per node) of each `Nodes=` group in the output
    of `scontrol -o show job -d`."""
    groups = []
    for match in re.finditer(r"\sNodes=(\S+) CPU_IDs=(\S+) Mem=\S+ GRES=(\S*)", job_detail):
        groups.append((match.group(1), count_ids(match.group(2)), gpu_indices(match.group(3))))
    return groups


def scontrol(*args: str, env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                              timeout=60, env=dict(env) if env is not None else None)
    except FileNotFoundError:
        raise SlurmError("scontrol is not installed on this host") from None
    if done.returncode != 0:
        raise SlurmError(f"scontrol {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def allocation_nodes(env: Mapping[str, str] = os.environ) -> list[SlurmNode]:
    """The nodes of the job this process runs in, in Slurm's order."""
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        raise SlurmError("--slurm runs inside a Slurm allocation (sbatch or salloc), but "
                         "SLURM_JOB_ID is not set here")
    resources = job_resources(scontrol("-o", "show", "job", "-d", job_id, env=env))
    if not resources:
        raise SlurmError(f"scontrol lists no nodes with CPUs for job {job_id}")
    held: dict[str, tuple[int, tuple[str, ...]]] = {}
    for hostlist, cpus, gpus in resources:
        for name in scontrol("show", "hostnames", hostlist, env=env).split():
            held[name] = (cpus, gpus)
    records = scontrol("-o", "show", "node", ",".join(held), env=env).splitlines()
    address = {f["NodeName"]: f.get("NodeAddr") or f["NodeName"]
               for f in map(fields, records) if "NodeName" in f}
    missing = [name for name in held if name not in address]
    if missing:
        raise SlurmError(f"scontrol show node does not list {', '.join(missing)}")
    return [SlurmNode(name, address[name], cpus, gpus) for name, (cpus, gpus) in held.items()]


def slurm_workers(nodes: list[SlurmNode], num_learners: int,
                  learner_port: int = 8001) -> tuple[list[WorkerSpec], dict[int, SlurmNode]]:
    """The workers of the run, as a CSV would list them (learners first), and the node of
    each by its `line`. A learner on a node with GPUs gets them as CUDA_VISIBLE_DEVICES."""
    if not 1 <= num_learners <= len(nodes):
        raise SlurmError(f"--num_learners={num_learners}, but the allocation has "
                         f"{len(nodes)} node(s): each learner needs a node of its own")
    workers: list[WorkerSpec] = []
    node_of: dict[int, SlurmNode] = {}

    def add(node: SlurmNode, **spec) -> None:
        line = len(workers) + 1
        workers.append(WorkerSpec(ip=node.address, line=line, **spec))
        node_of[line] = node

    for node in nodes[:num_learners]:
        add(node, job="learner", port=learner_port, cuda_visible_devices=",".join(node.gpus))
    for index, node in enumerate(nodes):
        reserved = LEARNER_CORES if index < num_learners else 0
        for slot in range(max(0, node.cpus - reserved)):
            add(node, job="actor", port=ACTOR_PORT + slot)
    if len(workers) == num_learners:
        cores = ", ".join(f"{n.name}: {n.cpus}" for n in nodes)
        raise SlurmError(f"no cores left for actors (CPUs per node: {cores}; a learner node "
                         f"keeps {LEARNER_CORES}): ask for more nodes, or for whole nodes "
                         "with --exclusive")
    return workers, node_of


def slurm_env(env: Mapping[str, str] = os.environ) -> list[str]:
    """`NAME=value` for each SLURM_* variable of this process: what srun and mpirun read to
    act inside the allocation."""
    return [f"{name}={value}" for name, value in sorted(env.items())
            if name.startswith("SLURM_")]


def srun_argv(node: SlurmNode, workdir: str, name: str) -> list[str]:
    """One task on `node`, sharing the job's CPUs with the other steps (--overlap), so
    that actors and the learners' daemons never wait for one another."""
    return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node.name}", "--overlap",
            f"--chdir={workdir}", f"--job-name={name}", "--kill-on-bad-exit=1"]


def put_private_file(node: SlurmNode, path: str, content: bytes) -> None:
    """Write `content` to `path` on `node` (mode 0600, its directory made), through srun;
    ConnectionError if that fails. Written to a temporary name first, so that nodes
    sharing a filesystem never see a half-written file."""
    script = 'umask 077 && mkdir -p "$(dirname "$1")" && cat > "$1.$2" && mv "$1.$2" "$1"'
    argv = [*srun_argv(node, "/", "impala-keys"), "sh", "-c", script, "sh", path, node.name]
    try:
        done = subprocess.run(argv, input=content, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConnectionError(f"srun to {node.name}: {exc}") from None
    if done.returncode != 0:
        raise ConnectionError(f"srun to {node.name} failed: "
                              f"{done.stderr.decode(errors='replace').strip()[-500:]}")
