"""One rank of `test_multilearner.py`'s sync check, under a real mpirun: every rank starts
from its own random weights and computes its own gradient; after the start-up broadcast and
one update it writes its parameters (its own at first, after the broadcast, after the
update) and the gradients' norm to OUT_DIR/rank-<r>.npz.

    python -m tests.rank_sync OUT_DIR horovod|horovod_through_host|torch

Rank r's gradient is known in closed form: a Linear(3, 2) summed over 4 inputs that are
all r + 1 has dW = 4 (r + 1) and db = 4, so the test can check the step against the mean.
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from torch import nn

from impala.cli import SHUTDOWN_BOUND_S, exit_now
from impala.distributed import HorovodBackend, TorchDistributedBackend

LEARNING_RATE = 0.5
BATCH = 4


def main(out_dir: str, mode: str) -> None:
    cpu = torch.device("cpu")
    backend = (TorchDistributedBackend(cpu) if mode == "torch"
               else HorovodBackend(cpu, through_host=mode == "horovod_through_host"))
    torch.manual_seed(100 + backend.rank)  # different weights: the broadcast must equalise
    model = nn.Linear(3, 2)
    init = {f"init.{n}": p.detach().numpy().copy() for n, p in model.named_parameters()}
    optimizer = backend.prepare(model, torch.optim.SGD(model.parameters(), lr=LEARNING_RATE))
    start = {f"start.{n}": p.detach().numpy().copy() for n, p in model.named_parameters()}
    model(torch.full((BATCH, 3), float(backend.rank + 1))).sum().backward()
    norm = backend.apply_gradients(model, optimizer, max_norm=0.0)
    end = {f"end.{n}": p.detach().numpy().copy() for n, p in model.named_parameters()}
    np.savez(f"{out_dir}/rank-{backend.rank}.npz", norm=np.float64(norm), **init, **start,
             **end)
    if not backend.shutdown(SHUTDOWN_BOUND_S):  # as the learner's clean stop ends
        exit_now()


if __name__ == "__main__":
    main(*sys.argv[1:3])
