"""Learner scaling under Horovod: N learner ranks under one real `mpirun`, each training on
synthetic batches of the real shape (one thread each), against one rank alone.

Each rank runs the learner's own update (impala.update.Update: forward, V-trace, losses,
backward, the gradient allreduce, clipping after it, RMSProp), weight publishing, and the
learner's per-update control allreduce. Actors are left out on purpose: on a small machine they
would take the cores the ranks need, and this measures what the synchronisation costs.
At the end the ranks' parameter checksums are compared (they must be equal).

  .venv/bin/python bench/scaling.py [--ranks 1 2] [--updates=30] [--shapes 20x32 80x8]

Prints, per shape and rank count: samples/s per rank and summed, and the speed-up over one
rank. Needs as many free cores as ranks (x threads) to mean anything.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import subprocess
import sys
import time

import common
import numpy as np

RESULT_PREFIX = "SCALING_RESULT "


def worker(args) -> None:
    """One rank: `args.updates` timed updates after two warm-up ones."""
    import torch
    from learner import filled_batch, learner_objects

    from impala.assembly import build_optimizer
    from impala.distributed import HorovodBackend, parameter_checksum
    from impala.flags import parse_config
    from impala.transport import encode
    from impala.update import Update, UpdateConfig
    from impala.weights import weights_arrays

    torch.set_num_threads(args.threads)
    backend = HorovodBackend()
    torch.manual_seed(backend.rank)  # different on purpose: the broadcast must equalise
    T, B = (int(x) for x in args.shape.split("x"))
    cfg = parse_config(["--preset=none", "--level_name=PongNoFrameskip-v4",
                        f"--agent_name={args.agent_name}", f"--unroll_length={T}",
                        f"--batch_size={B}"])
    _, algorithm, model, layout = learner_objects(cfg)
    optimizer = backend.prepare(model, build_optimizer(cfg, model))
    batch = filled_batch(layout, B, None)
    run_update = Update(model, optimizer, backend, algorithm.learning(model), None,
                        torch.device("cpu"), UpdateConfig.of(cfg))

    def update() -> None:
        backend.allreduce_sum(np.zeros(7))  # the learner's control vector
        run_update(batch, 0, 0, 0)
        encode("weights", "learner", weights_arrays(model), version=1)

    for _ in range(2):
        update()
    backend.allreduce_sum(np.zeros(1))  # start the clock together
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(args.updates):
        update()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    checksum = parameter_checksum(model)
    checksums = backend.allreduce_sum(np.eye(backend.size)[backend.rank] * checksum)
    samples = args.updates * T * B
    if backend.rank == 0:
        print(RESULT_PREFIX + json.dumps({
            "ranks": backend.size, "per_rank_samples_per_s": samples / wall,
            "core_ms_per_sample": 1000.0 * cpu / samples,
            "in_sync": bool(np.all(checksums == checksums[0]))}), flush=True)
    backend.shutdown()


def launch(args, ranks: int, shape: str) -> dict[str, object]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("mpirun not found: run `make setup` first")
    command = [mpirun, "-np", str(ranks), "-bind-to", "none", "-mca",
               "mpi_yield_when_idle", "1", "-x", "PYTHONUNBUFFERED=1"]
    if getpass.getuser() == "root":
        command.append("--allow-run-as-root")
    command += [sys.executable, os.path.abspath(__file__), "--worker", f"--shape={shape}",
                f"--updates={args.updates}", f"--threads={args.threads}",
                f"--agent_name={args.agent_name}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    lines = [line for line in result.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"mpirun failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--shapes", nargs="*", default=["20x32", "80x8"], help="TxB")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--agent_name", default="SimpleConvNetAgent")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shape", default="20x32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    rows = []
    for shape in args.shapes:
        T, B = (int(x) for x in shape.split("x"))
        single = None
        for ranks in args.ranks:
            result = launch(args, ranks, shape)
            total = result["per_rank_samples_per_s"] * ranks
            single = total if ranks == 1 else single
            rows.append({"agent": args.agent_name, "T": T, "B": B, "threads": args.threads,
                         "ranks": ranks,
                         "samples_per_s_per_rank": result["per_rank_samples_per_s"],
                         "samples_per_s": total,
                         "speedup": total / single if single else None,
                         "core_ms_per_sample": result["core_ms_per_sample"],
                         "in_sync": result["in_sync"]})
    common.report("scaling", rows, ["agent", "T", "B", "threads", "ranks",
                                    "samples_per_s_per_rank", "samples_per_s", "speedup",
                                    "core_ms_per_sample", "in_sync"])


if __name__ == "__main__":
    main()
