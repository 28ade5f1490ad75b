"""A learner's replay written with its checkpoint and read back on resume
(impala/replay_file.py): seconds and GiB/s for each algorithm's full Pong replay at its
preset (`--replay_size`, the stored form of its unrolls), on this machine's disk.

The replay's items are filled with a constant (every page written, as a full replay's
are); the file is uncompressed, so the bytes, not their values, set the time.

  .venv/bin/python bench/replay_file.py [--algorithms apex r2d2 impala] [--dir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common
import numpy as np
from learner import learner_objects

from impala.flags import parse_config
from impala.unroll import replay_file
from impala.unroll.replay_memory import ReplayMemory


def round_trip(algorithm: str, directory: Path) -> dict[str, object]:
    cfg = parse_config([f"--algorithm={algorithm}", "--level_name=PongNoFrameskip-v4"])
    _, _, _, layout = learner_objects(cfg)
    fields = layout.schema()
    memory = ReplayMemory(fields, cfg.replay_size, priority_exponent=cfg.priority_exponent)
    chunk = 100
    for _ in range(0, cfg.replay_size, chunk):
        memory.add({name: np.full((chunk, *spec.shape), 7, spec.dtype)
                    for name, spec in fields.items()})
    path = directory / "replay-0.npz"
    started = time.perf_counter()
    replay_file.save(path, memory, frames=1, updates=1)
    written = time.perf_counter() - started
    size = path.stat().st_size / 2**30
    back = ReplayMemory(fields, cfg.replay_size, priority_exponent=cfg.priority_exponent)
    started = time.perf_counter()
    replay_file.restore(path, back, frames=1, updates=1)
    read = time.perf_counter() - started
    path.unlink()
    return {"algorithm": algorithm, "unrolls": cfg.replay_size, "gib": size,
            "write_s": written, "read_s": read, "write_gib_per_s": size / written,
            "read_gib_per_s": size / read}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=["apex", "r2d2", "impala"])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write (default: a temporary directory)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for algorithm in args.algorithms:
            row = round_trip(algorithm, Path(directory))
            print(f"{algorithm}: {row['unrolls']} unrolls, {row['gib']:.2f} GiB: written in "
                  f"{row['write_s']:.1f} s ({row['write_gib_per_s']:.2f} GiB/s), read in "
                  f"{row['read_s']:.1f} s ({row['read_gib_per_s']:.2f} GiB/s)", flush=True)
            rows.append(row)
    common.report("replay_file", rows, ["algorithm", "unrolls", "gib", "write_s", "read_s",
                                        "write_gib_per_s", "read_gib_per_s"])


if __name__ == "__main__":
    main()
