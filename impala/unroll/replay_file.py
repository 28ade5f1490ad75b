"""Each learner's replay on disk beside the checkpoint, so a resumed run trains on the
experience it had instead of refilling from nothing (10,000 unrolls of 18 new steps are
~720K frames of play; until they are back, every replayed unroll is one of the few newest).

`<run_dir>/replay-<rank>.npz`: the memory's items oldest first, their priorities and the
counters (frames, updates) of the checkpoint written with it. Written atomically
(temporary file, then rename) at every checkpoint; read with `allow_pickle=False`: data,
never code. A file that is damaged or does not fit the run is refused with a message
naming it; one left by an earlier checkpoint (a crash between the two writes) is set
aside and the replay starts empty. Every rank must start with the same fill, or their
replayed counts would differ and the allreduces would not pair up: if the ranks' fills
differ, all of them start empty.
"""

from __future__ import annotations

import logging
import os
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from impala.checkpoint import CheckpointError
from impala.unroll.replay_memory import ReplayMemory

FORMAT = "impala-mlma-replay/1"
log = logging.getLogger("learner")


class ReplayFileError(CheckpointError):
    pass


def replay_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"replay-{rank}.npz"


def save(path: Path, memory: ReplayMemory, frames: int, updates: int) -> None:
    """Write the memory and the counters it goes with, atomically; logs size and time."""
    started = time.monotonic()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as file:  # a file object: np.savez would add .npz to a name
        np.savez(file, format=np.array(FORMAT), frames=np.int64(frames),
                 updates=np.int64(updates), **memory.state())
    os.replace(tmp, path)
    log.info("replay saved: %d unrolls, %.2f GiB in %.1f s: %s", len(memory),
             path.stat().st_size / 2**30, time.monotonic() - started, path)


def restore(path: Path, memory: ReplayMemory, frames: int, updates: int) -> str:
    """Refill the empty `memory` from `path` if it was written with the checkpoint at
    (frames, updates); returns what happened, for the log. ReplayFileError if damaged."""
    if not path.exists():
        return f"no {path.name}: the replay starts empty"
    try:
        with np.load(path, allow_pickle=False) as file:
            if "format" not in file.files or str(file["format"]) != FORMAT:
                raise ReplayFileError(f"{path} is not a replay of this toolkit; move it away "
                                      "to resume with an empty replay")
            saved = int(file["frames"]), int(file["updates"])
            if saved != (frames, updates):
                return (f"{path.name} was written at {saved[0]} frames, {saved[1]} updates, "
                        f"the checkpoint at {frames}, {updates}: the replay starts empty")
            count = memory.load_state({key: file[key] for key in file.files})
    except ReplayFileError:
        raise
    except ValueError as exc:
        raise ReplayFileError(f"{path} does not fit this run ({exc}); move it away to resume "
                              "with an empty replay") from None
    except (OSError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise ReplayFileError(f"{path} is damaged ({type(exc).__name__}: {exc}); move it "
                              "away to resume with an empty replay") from None
    return f"restored {count} unrolls from {path}"


def agree_on_fill(memory: ReplayMemory, allreduce_sum: Callable[[np.ndarray], np.ndarray]
                  ) -> bool:
    """Whether every rank holds as many items as this one (collective: every rank calls
    it); if not, every rank empties its memory, so all replay the same counts."""
    count = float(len(memory))
    total, squares, ranks = allreduce_sum(np.array([count, count * count, 1.0]))
    # n * sum(c^2) == (sum c)^2 only when all c are equal.
    if ranks * squares == total * total:
        return True
    memory.clear()
    return False
