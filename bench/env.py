"""Environment throughput: the full Atari pipeline with random actions, in 1 process and in
N processes at once (agent steps/s, frames/s, core-milliseconds per agent step).

  .venv/bin/python bench/env.py [--level_name=PongNoFrameskip-v4] [--seconds=10]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import common  # noqa: F401 - puts the project on sys.path

from impala.envs import EnvConfig, create_env, describe_env


def _worker(level: str, seconds: float, seed: int, out: mp.Queue) -> None:
    env = create_env(EnvConfig(level), seed=seed)
    env.reset()
    steps, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    out.put((steps, time.perf_counter() - t0, time.process_time() - cpu0))


def measure(level: str, processes: int, seconds: float) -> dict[str, object]:
    out: mp.Queue = mp.Queue()
    workers = [mp.Process(target=_worker, args=(level, seconds, i, out))
               for i in range(processes)]
    for w in workers:
        w.start()
    results = [out.get() for _ in workers]
    for w in workers:
        w.join()
    steps = sum(r[0] for r in results)
    wall = max(r[1] for r in results)
    cpu = sum(r[2] for r in results)
    frames_per_step = describe_env(EnvConfig(level)).frames_per_step
    return {"level": level, "processes": processes, "steps_per_s": steps / wall,
            "frames_per_s": steps * frames_per_step / wall,
            "core_ms_per_step": 1000.0 * cpu / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--level_name", default="PongNoFrameskip-v4")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--processes", type=int, nargs="*",
                        default=sorted({1, os.cpu_count() or 1}))
    args = parser.parse_args()
    rows = [measure(args.level_name, n, args.seconds) for n in args.processes]
    common.report("env", rows, ["level", "processes", "steps_per_s", "frames_per_s",
                                "core_ms_per_step"])


if __name__ == "__main__":
    main()
