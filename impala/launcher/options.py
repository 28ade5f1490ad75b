"""The cluster frontend's own flags (run_experiment_mm_raw.py makes one `--name` per field)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from impala.supervision import ACTOR_RESTART_LIMIT, ACTOR_RESTART_WINDOW_S


def _option(help: str, default: Any = dataclasses.MISSING) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class FrontendOptions:
    """The frontend's own flags (frontend.py makes one `--name` per field from this)."""

    workers_csv_path: str = _option("CSV: job,ip,tf_port,cuda_visible_devices,ssh_port,"
                                    "ssh_username,ssh_password[,num_envs,python,workdir,"
                                    "ssh_key] (or --slurm)", "")
    slurm: bool = _option("take the hosts from the Slurm allocation this runs in (sbatch or "
                          "salloc) instead of a CSV", False)
    num_learners: int = _option("with --slurm: learners, one on each of the first nodes", 1)
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
    max_restarts: int = _option("times the learner group is started again from its last "
                                "checkpoint after a rank dies (0: never)", 3)
    actor_restart_limit: int = _option("restarts an actor gets within "
                                       "--actor_restart_window_s before it is left down",
                                       ACTOR_RESTART_LIMIT)
    actor_restart_window_s: float = _option("seconds over which an actor's restarts are "
                                            "counted", ACTOR_RESTART_WINDOW_S)

    def __post_init__(self) -> None:
        if bool(self.workers_csv_path) == self.slurm:
            raise ValueError("give the hosts one way: --workers_csv_path=FILE or --slurm")
        if self.num_learners < 1:
            raise ValueError(f"--num_learners must be >= 1, got {self.num_learners}")
        if not 1 <= self.master_port <= 65535:
            raise ValueError(f"--master_port must be a port (1-65535), got {self.master_port}")
        for name in ("max_restarts", "actor_restart_limit"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
        for name in ("horovod_cycle_time_ms", "summary_interval_s", "actor_restart_window_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name} must be a number > 0, got {value}")
