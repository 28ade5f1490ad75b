"""The actor's batched forward pass on 1 thread, with its choice of actions: core-
milliseconds per observation at batch 1, 8 and 32, on the CPU or (as `--actor_device=cuda`
runs it) on a GPU, the frames copied there and the heads back every step.

  .venv/bin/python bench/inference.py [--agent_name=SimpleConvNetAgent] [--seconds=5]
      [--device=cpu|cuda] [--batches 1 8 32] [--channels_last auto on off]

`--channels_last` takes the actor's choices (auto: as an actor on that device would run
this agent) and measures each.
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: F401 - puts the project on sys.path
import torch

from impala.algorithms.impala import Impala
from impala.algorithms.impala.behaviour import SampleFromPolicy
from impala.config import Config
from impala.devices import resolve_device
from impala.nets import create_agent

ATARI = (4, 84, 84)


@torch.no_grad()
def measure(agent_name: str, batch: int, seconds: float, device: str = "cpu",
            channels_last: str = "auto") -> dict[str, object]:
    """As an actor steps: frames from the CPU to `device`, the forward pass there, the
    heads back, the actions chosen."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    on = resolve_device(device, flag="--device")
    agent = create_agent(agent_name, ATARI, 6, Impala.heads).eval().to(on)
    agent.channels_last = Config(channels_last=channels_last).uses_channels_last(
        on, agent, training=False)
    exploration = SampleFromPolicy()  # the actor's choice of actions, as it runs it
    observation = torch.randint(0, 255, (1, batch, *ATARI), dtype=torch.uint8)
    last_action = torch.zeros(1, batch, dtype=torch.long)
    reward = torch.zeros(1, batch)
    done = torch.zeros(1, batch, dtype=torch.bool)
    core = tuple(t.to(on) for t in agent.initial_state(batch))

    def step(core):
        inputs = (x.to(on) for x in (observation, last_action, reward, done))
        output, core = agent(*inputs, core)
        exploration.act({name: head.cpu() for name, head in output.heads.items()})
        return core

    for _ in range(3):
        core = step(core)
    calls, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        core = step(core)
        calls += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"agent": agent_name, "batch": batch, "threads": 1, "device": device,
            "channels_last": agent.channels_last,
            "observations_per_s": calls * batch / wall,
            "core_ms_per_observation": 1000.0 * cpu / (calls * batch)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent_name", default="SimpleConvNetAgent")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 8, 32])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--channels_last", nargs="*", default=["auto"],
                        choices=("auto", "on", "off"))
    args = parser.parse_args()
    rows = [measure(args.agent_name, b, args.seconds, args.device, layout)
            for layout in args.channels_last for b in args.batches]
    common.report("inference", rows, ["agent", "batch", "threads", "device", "channels_last",
                                      "observations_per_s", "core_ms_per_observation"])


if __name__ == "__main__":
    main()
