"""What a learner keeps across a restart, and getting it back: the checkpoint (weights,
optimizer state, counters: rank 0 writes it, and the others get it by broadcast) and, with
`--checkpoint_replay=on`, each rank's replay file beside it (impala/unroll/replay_file.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from impala import checkpoint
from impala.config import Config
from impala.counters import Counters
from impala.distributed import Backend
from impala.unroll import replay_file
from impala.unroll.replay import UnrollReplay

log = logging.getLogger("learner")


class LearnerState:
    """One rank's checkpoint and replay file, in `cfg.run_dir`."""

    def __init__(self, cfg: Config, backend: Backend, replay: UnrollReplay | None) -> None:
        self.cfg = cfg
        self.backend = backend
        self.rank = backend.rank
        self.is_chief = backend.rank == 0
        self.checkpoint_path = cfg.run_dir / checkpoint.CHECKPOINT_NAME
        self.replay = replay
        self.replay_path: Path | None = (
            replay_file.replay_path(cfg.run_dir, self.rank)
            if replay is not None and cfg.checkpoint_replay == "on" else None)

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                old_head_names: dict[str, str]) -> Counters:
        """Rank 0 reads the checkpoint into `model` and `optimizer`; the counters reach
        every rank by broadcast (the weights and optimizer state do by `backend.prepare`).
        Then each rank refills its replay from its file, where one goes with the run."""
        counters = Counters()
        if self.is_chief and self.checkpoint_path.exists():
            counters = Counters(**checkpoint.resume(self.checkpoint_path, model, optimizer,
                                                    self.cfg.to_dict(), old_head_names))
            log.info("resumed from %s at %d frames, %d updates", self.checkpoint_path,
                     counters.frames, counters.updates)
        values = self.backend.broadcast_counters(
            np.array([counters.frames, counters.updates], dtype=np.float64))
        counters = Counters(*(int(v) for v in values))
        if self.replay_path is not None:
            self._restore_replay(counters)
        return counters

    def _restore_replay(self, counters: Counters) -> None:
        log.info("rank %d: %s", self.rank, replay_file.restore(
            self.replay_path, self.replay.memory, counters.frames, counters.updates))
        if not replay_file.agree_on_fill(self.replay.memory, self.backend.allreduce_sum):
            log.warning("the ranks' restored replays hold different numbers of unrolls: "
                        "every rank starts with an empty replay")

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             counters: Counters) -> None:
        """Every rank writes its replay file; rank 0 then the checkpoint (both atomically)."""
        if self.replay_path is not None:
            replay_file.save(self.replay_path, self.replay.memory, counters.frames,
                             counters.updates)
        if not self.is_chief:
            return
        checkpoint.save(self.checkpoint_path, model, optimizer, counters.as_dict(),
                        self.cfg.to_dict())
        log.info("checkpoint saved at %d frames: %s", counters.frames, self.checkpoint_path)
