"""The actor's batched forward pass on 1 thread: core-milliseconds per observation at
batch 1, 8 and 32.

  .venv/bin/python bench/inference.py [--agent_name=SimpleConvNetAgent] [--seconds=5]
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: F401 - puts the project on sys.path
import torch

from impala.algorithms.impala import Impala, SampleFromPolicy
from impala.nets import create_agent

ATARI = (4, 84, 84)


@torch.no_grad()
def measure(agent_name: str, batch: int, seconds: float) -> dict[str, object]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    agent = create_agent(agent_name, ATARI, 6, Impala.heads).eval()
    exploration = SampleFromPolicy()  # the actor's choice of actions, as it runs it
    observation = torch.randint(0, 255, (1, batch, *ATARI), dtype=torch.uint8)
    last_action = torch.zeros(1, batch, dtype=torch.long)
    reward = torch.zeros(1, batch)
    done = torch.zeros(1, batch, dtype=torch.bool)
    core = agent.initial_state(batch)
    for _ in range(3):
        agent(observation, last_action, reward, done, core)
    calls, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        output, core = agent(observation, last_action, reward, done, core)
        exploration.act(output.heads)
        calls += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"agent": agent_name, "batch": batch, "threads": 1,
            "observations_per_s": calls * batch / wall,
            "core_ms_per_observation": 1000.0 * cpu / (calls * batch)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent_name", default="SimpleConvNetAgent")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 8, 32])
    args = parser.parse_args()
    rows = [measure(args.agent_name, b, args.seconds) for b in args.batches]
    common.report("inference", rows, ["agent", "batch", "threads", "observations_per_s",
                                      "core_ms_per_observation"])


if __name__ == "__main__":
    main()
