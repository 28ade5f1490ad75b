"""Checkpoints: model, optimizer, counters and flags in `<run_dir>/checkpoint.pt`.

Written atomically (temporary file, then rename), so a crash mid-write leaves the previous
checkpoint intact. Loaded with `torch.load(weights_only=True)`: a checkpoint is data, never
code. A checkpoint of another agent or game, or a corrupt file, is refused with a message
saying which.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT = "impala-mlma/1"
IDENTITY_FLAGS = ("agent_name", "level_name", "width", "height")


class CheckpointError(RuntimeError):
    pass


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None,
         counters: dict[str, int], flags: dict[str, Any]) -> None:
    state = {
        "format": FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "counters": {k: int(v) for k, v in counters.items()},
        "flags": {k: v for k, v in flags.items() if isinstance(v, str | int | float | bool)},
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load(path: Path, flags: dict[str, Any]) -> dict[str, Any]:
    """Read and check a checkpoint against this run's flags; raises CheckpointError."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}") from None
    except Exception as exc:  # torch raises many kinds for a damaged file
        raise CheckpointError(
            f"{path} is corrupt or not a checkpoint of this toolkit ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); move it away to start afresh"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint of this toolkit (format "
                              f"{state.get('format') if isinstance(state, dict) else None!r})")
    saved = state.get("flags", {})
    mismatched = [f"{name}: checkpoint has {saved.get(name)!r}, this run {flags.get(name)!r}"
                  for name in IDENTITY_FLAGS if saved.get(name) != flags.get(name)]
    if mismatched:
        raise CheckpointError(
            f"{path} belongs to another run ({'; '.join(mismatched)}); use another "
            "--run_name or --logdir, or the same agent and game")
    return state


def restore_model(model: nn.Module, state: dict[str, Any], path: Path) -> None:
    try:
        model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as exc:
        raise CheckpointError(f"{path}: model weights do not fit this agent: {exc}") from None
