"""One full learner update on synthetic batches of the real shape: forward over (T+1) x B
observations, V-trace, losses, backward, clipping, RMSProp step, weight publishing (copy
and encode). Samples/s (agent steps) and core-milliseconds per sample.

  .venv/bin/python bench/learner.py [--agent_name=SimpleConvNetAgent] [--seconds=10]
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: F401 - puts the project on sys.path
import torch

from impala.distributed import SingleLearner
from impala.losses import LossSettings
from impala.nets import create_agent
from impala.optim import RMSpropTF
from impala.process import keep_freed_memory
from impala.step import learn_step
from impala.transport import encode
from impala.weights import weights_arrays

ATARI = (4, 84, 84)
ACTIONS = 6


def synthetic_batch(T: int, B: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "observation": torch.randint(0, 255, (T + 1, B, *ATARI), dtype=torch.uint8,
                                     generator=g),
        "reward": torch.randn(T + 1, B, generator=g),
        "done": torch.rand(T + 1, B, generator=g) < 0.01,
        "last_action": torch.randint(0, ACTIONS, (T + 1, B), generator=g),
        "action": torch.randint(0, ACTIONS, (T + 1, B), generator=g),
        "policy_logits": torch.randn(T + 1, B, ACTIONS, generator=g),
    }


def measure(agent_name: str, T: int, B: int, threads: int, seconds: float,
            keep_memory: bool = True) -> dict[str, object]:
    """`keep_memory=False` (in a fresh process: the setting is process-wide) measures with
    glibc's default malloc, for comparison; the learner keeps its freed memory."""
    torch.set_num_threads(threads)
    if keep_memory:
        keep_freed_memory()
    torch.manual_seed(0)
    model = create_agent(agent_name, ATARI, ACTIONS)
    optimizer = RMSpropTF(model.parameters(), lr=6e-4)
    batch = synthetic_batch(T, B)
    core = model.initial_state(B)
    backend = SingleLearner()

    def update() -> None:
        learn_step(model, optimizer, backend, batch, core, LossSettings(), 40.0)
        encode("weights", "learner-0", weights_arrays(model), version=1)

    update()  # warm-up
    updates, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        update()
        updates += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    samples = updates * T * B
    return {"agent": agent_name, "T": T, "B": B, "threads": threads,
            "updates_per_s": updates / wall, "samples_per_s": samples / wall,
            "core_ms_per_sample": 1000.0 * cpu / samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent_name", default="SimpleConvNetAgent")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--shapes", nargs="*", default=["20x32", "80x8"],
                        help="TxB batch shapes")
    args = parser.parse_args()
    rows = []
    for shape in args.shapes:
        T, B = (int(x) for x in shape.split("x"))
        for threads in args.threads:
            rows.append(measure(args.agent_name, T, B, threads, args.seconds))
    common.report("learner", rows, ["agent", "T", "B", "threads", "updates_per_s",
                                    "samples_per_s", "core_ms_per_sample"])


if __name__ == "__main__":
    main()
