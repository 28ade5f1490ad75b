"""How learners stay in sync: the gradient allreduce and the start-up broadcasts.

Three backends with one interface, chosen by `--allreduce_backend`:
- `horovod` (default): Horovod ranks started by mpirun, `hvd.DistributedOptimizer`; a
  learner on a GPU with a Horovod built without CUDA (setup.sh's build) sends host copies.
- `torch`: torch.distributed (gloo for host tensors, nccl for a GPU's), initialised from
  mpirun's variables.
- `none`: a single learner.
A learner started outside mpirun (no rank variables) is a single learner whatever the flag.

Every update: average gradients across ranks, clip the *averaged* gradient by global
norm, step; when that norm is not finite, every rank skips the step (they all computed it
from the same averaged gradients). Nothing here is ever unpickled: counters travel as tensors.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import math
import os
import threading
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from impala import optim

RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK")
log = logging.getLogger("learner")
# How long a rank waits in a collective for a peer that is gone (torch backend).
COLLECTIVE_TIMEOUT_S = float(os.environ.get("IMPALA_COLLECTIVE_TIMEOUT_S", "120"))


def launched_by_mpi() -> bool:
    return any(name in os.environ for name in RANK_VARIABLES)


def clip_and_norm(model: nn.Module, max_norm: float) -> float:
    """The gradients' global norm; clip them to `max_norm` (<= 0: no clipping).

    A non-finite norm leaves the gradients alone: the caller skips that update. After the
    allreduce every rank computes this from the same averaged gradients, so all skip it.
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = nn.utils.get_total_norm(grads)
    norm = float(total)
    if max_norm > 0 and math.isfinite(norm):
        nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total)
    return norm


def clip_and_step(model: nn.Module, optimizer: torch.optim.Optimizer, max_norm: float
                  ) -> float:
    """Clip the (averaged) gradients and step, unless their norm is not finite; the norm."""
    norm = clip_and_norm(model, max_norm)
    if math.isfinite(norm):
        optimizer.step()
    return norm


def average_gradients(model: nn.Module, allreduce_mean: Callable[[torch.Tensor], torch.Tensor]
                      ) -> None:
    """Replace every gradient by its mean over the ranks, reduced as one flat buffer:
    `allreduce_mean` takes the flat [N] gradients and returns their mean (where it likes:
    they are copied back to each gradient's device)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = allreduce_mean(torch.cat([g.reshape(-1) for g in grads]))
    offset = 0
    for g in grads:
        g.copy_(flat[offset: offset + g.numel()].view_as(g))
        offset += g.numel()


def synced_tensors(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """What rank 0 broadcasts at the start: the model's state and the optimizer's state
    tensors (materialised first, so that every rank has the same tensors to receive into)."""
    optim.materialise_state(optimizer, model.parameters())
    state = [value for per_parameter in optimizer.state.values()
             for value in per_parameter.values() if torch.is_tensor(value)]
    return [*model.state_dict().values(), *state]


def parameter_checksum(model: nn.Module) -> float:
    """float64 sum of every parameter: equal across ranks iff they are (almost surely) in sync."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


def state_digest(model: nn.Module, optimizer: torch.optim.Optimizer,
                 extra: dict[str, torch.Tensor], counters: tuple[int, ...]) -> str:
    """A hash (16 hex digits) of everything the ranks must hold identically: the model's
    parameters and buffers, the optimizer's state and settings (each parameter's running
    averages, its step, the learning rate the schedule set), the algorithm's own tensors
    (`extra`: a target network) and the counters (frames, updates). Equal on two ranks iff
    all of it is equal to the last bit."""
    digest = hashlib.blake2b(digest_size=8)

    def add(name: str, value) -> None:
        digest.update(name.encode())
        if isinstance(value, torch.Tensor):
            digest.update(value.detach().cpu().reshape(-1).contiguous().view(torch.uint8)
                          .numpy().tobytes())
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                add(f"{name}.{key}", value[key])
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                add(f"{name}[{i}]", item)
        else:
            digest.update(repr(value).encode())

    with torch.no_grad():
        add("model", model.state_dict())
        add("optimizer", optimizer.state_dict())
        add("algorithm", extra)
    add("counters", counters)
    return digest.hexdigest()


class SingleLearner:
    """No peers: the allreduce is the identity."""

    name = "none"
    rank, size, local_rank = 0, 1, 0

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer
                ) -> torch.optim.Optimizer:
        return optimizer

    def apply_gradients(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                        max_norm: float) -> float:
        return clip_and_step(model, optimizer, max_norm)

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def broadcast_counters(self, values: np.ndarray) -> np.ndarray:
        return values

    def shutdown(self, bound_s: float | None = None) -> bool:
        return True


class HorovodBackend:
    """Horovod, in the order of its PyTorch examples; through host memory where this
    Horovod cannot reduce the model's tensors (`through_host`)."""

    name = "horovod"

    def __init__(self, device: torch.device | None = None, through_host: bool | None = None
                 ) -> None:
        import horovod.torch as hvd

        self.hvd = hvd
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.through_host = (reduces_through_host(device, hvd.cuda_built())
                             if through_host is None else through_host)

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer
                ) -> torch.optim.Optimizer:
        hvd = self.hvd
        if self.through_host:
            for index, tensor in enumerate(synced_tensors(model, optimizer)):
                tensor.copy_(hvd.broadcast(tensor.cpu(), root_rank=0, name=f"start.{index}"))
            return optimizer
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        # made here, else Horovod's broadcast makes it with a step that counts
        optim.materialise_state(optimizer, model.parameters())
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        distributed = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                               op=hvd.Average)
        # The wrapper is a new optimizer built from the param groups alone: without this
        # it starts with no state, and a resumed run would lose the checkpoint's.
        distributed.load_state_dict(optimizer.state_dict())
        return distributed

    def apply_gradients(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                        max_norm: float) -> float:
        if self.through_host:
            average_gradients(model, lambda flat: self.hvd.allreduce(
                flat.cpu(), op=self.hvd.Average, name="gradients"))
            return clip_and_step(model, optimizer, max_norm)
        optimizer.synchronize()  # wait for the averaged gradients...
        norm = clip_and_norm(model, max_norm)  # ...so the clip sees the global gradient
        if math.isfinite(norm):
            with optimizer.skip_synchronize():
                optimizer.step()
        return norm

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        summed = self.hvd.allreduce(torch.from_numpy(np.asarray(values, dtype=np.float64)),
                                    op=self.hvd.Sum, name="counters")
        return summed.numpy()

    def broadcast_counters(self, values: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(np.asarray(values, dtype=np.float64).copy())
        return self.hvd.broadcast(tensor, root_rank=0, name="resume_counters").numpy()

    def shutdown(self, bound_s: float | None = None) -> bool:
        """Horovod's shutdown. With `bound_s` (after a clean stop): first wait for every
        rank to come here, each with its files saved, then give the shutdown `bound_s`
        seconds and return False if it did not end. scancel and a Slurm time limit signal
        mpirun too, which then only ends the job: MPI's finalize waits for it and the
        shutdown would last until the SIGKILL. Without `bound_s` (an error: the other
        ranks may be inside another collective), only the shutdown, unbounded."""
        if bound_s is None:
            self.hvd.shutdown()
            return True
        self.hvd.allreduce(torch.zeros(1), name="every_rank_saved")
        ending = threading.Thread(target=self.hvd.shutdown, name="horovod-shutdown",
                                  daemon=True)
        ending.start()
        ending.join(bound_s)
        if ending.is_alive():
            log.warning("Horovod's shutdown did not end within %g s of every rank's save "
                        "(mpirun is ending the job): leaving without it", bound_s)
            return False
        return True


class TorchDistributedBackend:
    """torch.distributed with the same semantics, ranks taken from mpirun's variables."""

    name = "torch"

    def __init__(self, device: torch.device) -> None:
        import torch.distributed as dist

        self.dist = dist
        env = os.environ
        self.rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", "0")))
        self.size = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("PMI_SIZE", "1")))
        self.local_rank = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        env.setdefault("MASTER_ADDR", "127.0.0.1")
        env.setdefault("MASTER_PORT", "29500")
        dist.init_process_group(
            backend=process_group_backend(device),
            init_method="env://", rank=self.rank, world_size=self.size,
            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
        )

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer
                ) -> torch.optim.Optimizer:
        for tensor in synced_tensors(model, optimizer):
            self.dist.broadcast(tensor, src=0)
        return optimizer

    def apply_gradients(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                        max_norm: float) -> float:
        def allreduce_mean(flat: torch.Tensor) -> torch.Tensor:
            self.dist.all_reduce(flat, op=self.dist.ReduceOp.SUM)
            return flat.div_(self.size)

        average_gradients(model, allreduce_mean)
        return clip_and_step(model, optimizer, max_norm)

    def allreduce_sum(self, values: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(np.asarray(values, dtype=np.float64).copy())
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.SUM)
        return tensor.numpy()

    def broadcast_counters(self, values: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(np.asarray(values, dtype=np.float64).copy())
        self.dist.broadcast(tensor, src=0)
        return tensor.numpy()

    def shutdown(self, bound_s: float | None = None) -> bool:
        """With `bound_s` (a clean stop): meet every rank at a barrier, each with its files
        saved, and return False, leaving the group standing for the process's own end
        (cli.exit_now). A rank that tore its group down, or ran the interpreter's
        teardown, while a peer's gloo threads still talked to it aborted ("terminate
        called without an active exception", signal 6) in CI; no gloo or TCPStore thread
        is left after destroy_process_group, so the abort lies in that teardown, which a
        clean stop now skips. Without `bound_s` (an error: the other ranks may be inside
        another collective), the group is torn down and the error goes on."""
        if not self.dist.is_initialized():
            return True
        if bound_s is None:
            self.dist.destroy_process_group()
            return True
        try:  # a rank that is gone fails the barrier at once (its connections are closed)
            self.dist.barrier()
        except RuntimeError as error:
            log.warning("shutting down without the other ranks: %s", error)
        return False


def reduces_through_host(device: torch.device | None, horovod_cuda_built: bool) -> bool:
    """Whether Horovod must reduce host copies of a learner's tensors on `device`: a
    Horovod built without CUDA, as setup.sh builds it (CPU operations: MPI, Gloo), refuses a
    CUDA tensor ("Requested ReadyEvent with GPU device but not compiled with CUDA",
    horovod#2478)."""
    return device is not None and device.type == "cuda" and not horovod_cuda_built


def process_group_backend(device: torch.device) -> str:
    """torch.distributed's backend for a learner on `device`: gloo on the CPU; on a GPU,
    nccl for the gradients and gloo for the counters, which stay in host memory (an
    nccl-only group refuses a CPU tensor)."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"


Backend = SingleLearner | HorovodBackend | TorchDistributedBackend


def create_backend(name: str, device: torch.device) -> Backend:
    if name == "none" or not launched_by_mpi():
        return SingleLearner()
    if name == "horovod":
        return HorovodBackend(device)
    if name == "torch":
        return TorchDistributedBackend(device)
    raise ValueError(f"unknown allreduce_backend {name!r}; expected horovod, torch or none")
