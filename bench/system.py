"""A real training run on one host for a fixed frame budget (experiment.py --job_name=local)
and how close it comes to the machine's ceiling.

  C = cores / (env + inference + learner core-milliseconds per agent step) * 1000

with each term from bench/results (env.py, inference.py, learner.py) at the run's settings,
measured now if missing. Reports the learner's agent steps/s (median and 10th-90th
percentile over the steady part: the first quarter of log rows is dropped), its ratio to C,
bytes sent from actors to the learner per agent step, policy lag, and CPU time per process.

  .venv/bin/python bench/system.py --num_actors=2 --num_envs=8 --learner_threads=1 \
      --batch_size=32 --unroll_length=20 --frames=400000 [--replay_ratio=1]

With `--replay_ratio` > 0 the run uses LASER replay (prioritized, alpha 0.6, trust region
0.3); steps/s are fresh agent steps, and C counts the learner's (1 + r) samples per fresh
step.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
import pandas as pd
import psutil

FRAME_BYTES = 84 * 84


def latest(name: str, **match: object) -> pd.Series | None:
    path = common.RESULTS / f"{name}.csv"
    if not path.exists():
        return None
    table = pd.read_csv(path)
    table = table[table["cores"] == os.cpu_count()]
    for key, value in match.items():
        table = table[table[key].astype(str) == str(value)]
    return table.iloc[-1] if len(table) else None


def ceiling_terms(args) -> dict[str, float]:
    """Core-ms per agent step of each part, from the component benchmarks."""
    import env as env_bench
    import inference as inference_bench
    import learner as learner_bench

    env = latest("env", level=args.level_name, processes=1)
    env_ms = (float(env["core_ms_per_step"]) if env is not None else
              env_bench.measure(args.level_name, 1, 5)["core_ms_per_step"])
    batch = min((1, 8, 32), key=lambda b: abs(b - args.num_envs))
    inf = latest("inference", agent=args.agent_name, batch=batch)
    inference_ms = (float(inf["core_ms_per_observation"]) if inf is not None else
                    inference_bench.measure(args.agent_name, batch, 3)[
                        "core_ms_per_observation"])
    lrn = latest("learner", agent=args.agent_name, T=args.unroll_length, B=args.batch_size,
                 threads=args.learner_threads)
    learner_ms = (float(lrn["core_ms_per_sample"]) if lrn is not None else
                  learner_bench.measure(args.agent_name, args.unroll_length, args.batch_size,
                                        args.learner_threads, 5)["core_ms_per_sample"])
    return {"env_ms": env_ms, "inference_ms": inference_ms, "learner_ms": learner_ms}


def run_training(args, logdir: Path) -> dict[str, float]:
    """Run it; CPU seconds per process kind, sampled until each process ends."""
    command = [sys.executable, str(common.ROOT / "experiment.py"), "--job_name=local",
               f"--level_name={args.level_name}", f"--agent_name={args.agent_name}",
               f"--num_actors={args.num_actors}", f"--num_envs={args.num_envs}",
               f"--learner_threads={args.learner_threads}", f"--batch_size={args.batch_size}",
               f"--unroll_length={args.unroll_length}", f"--total_environment_frames={args.frames}",
               f"--logdir={logdir}", "--log_interval_s=2", f"--learner_host=127.0.0.1:{args.port}",
               "--allreduce_backend=none", f"--auth={args.auth}"]
    if args.replay_ratio > 0:
        command += [f"--replay_ratio={args.replay_ratio}", "--priority_exponent=0.6",
                    "--trust_region_threshold=0.3"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu: dict[int, tuple[str, float]] = {}
    learner = psutil.Process(proc.pid)
    try:
        while proc.poll() is None:
            try:
                for p in [learner, *learner.children(recursive=True)]:
                    kind = "learner" if p.pid == proc.pid else "actors"
                    times = p.cpu_times()
                    cpu[p.pid] = (kind, times.user + times.system)
            except psutil.Error:
                pass
            time.sleep(0.5)
    finally:  # interrupted (Ctrl-C, SIGTERM): the run ends with us, actors included
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"training run failed with status {proc.returncode}")
    totals: dict[str, float] = {"learner": 0.0, "actors": 0.0}
    for kind, seconds in cpu.values():
        totals[kind] += seconds
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--level_name", default="PongNoFrameskip-v4")
    parser.add_argument("--agent_name", default="SimpleConvNetAgent")
    parser.add_argument("--num_actors", type=int, default=2)
    parser.add_argument("--num_envs", type=int, default=8)
    parser.add_argument("--learner_threads", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--unroll_length", type=int, default=20)
    parser.add_argument("--frames", type=int, default=400_000)
    parser.add_argument("--port", type=int, default=18555)
    parser.add_argument("--auth", default="curve", choices=("curve", "none"),
                        help="the learner's --auth: compare CurveZMQ's cost with none")
    parser.add_argument("--replay_ratio", type=float, default=0.0,
                        help="LASER replay: replayed unrolls per fresh one (0: off)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # run `finally` on SIGTERM too

    terms = ceiling_terms(args)
    terms["learner_ms"] *= 1.0 + args.replay_ratio  # samples trained per fresh step
    cores = os.cpu_count() or 1
    ceiling = cores * 1000.0 / sum(terms.values())
    with tempfile.TemporaryDirectory() as logdir:
        started = time.time()
        cpu = run_training(args, Path(logdir))
        wall = time.time() - started
        run_dir = next(Path(logdir).iterdir())
        logs = pd.read_csv(run_dir / "logs.csv")
    steady = logs.iloc[len(logs) // 4:]
    steps = steady["frames"].diff().dropna() / 4  # agent steps per row (Atari: 4 frames)
    sps = steady["sps"]
    bytes_per_step = (steady["unroll_bytes"].iloc[-1] - steady["unroll_bytes"].iloc[0]) / \
        max(1.0, steps.sum())
    row = {
        "agent": args.agent_name, "actors": args.num_actors, "envs": args.num_envs,
        "learner_threads": args.learner_threads, "T": args.unroll_length,
        "B": args.batch_size, "replay_ratio": args.replay_ratio, "sps_median": float(sps.median()),
        "sps_p10": float(sps.quantile(0.1)), "sps_p90": float(sps.quantile(0.9)),
        "ceiling_C": ceiling, "ratio_to_C": float(sps.median()) / ceiling,
        "bytes_per_step": bytes_per_step, "frames_per_step_sent": bytes_per_step / FRAME_BYTES,
        "policy_lag": float(steady["policy_lag"].median()),
        "learner_cpu_share": cpu["learner"] / max(1e-9, cpu["learner"] + cpu["actors"]),
        "cpu_busy": (cpu["learner"] + cpu["actors"]) / (wall * cores),
        **terms,
    }
    print(f"--auth={args.auth}")
    common.report("system", [row], list(row))


if __name__ == "__main__":
    main()
