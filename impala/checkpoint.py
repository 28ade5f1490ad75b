"""Checkpoints: model, optimizer, counters and flags in `<run_dir>/checkpoint.pt`.

Written atomically (temporary file, then rename), so a crash mid-write leaves the previous
checkpoint intact. Loaded with `torch.load(weights_only=True)`: a checkpoint is data, never
code. A checkpoint of another agent or game, or a corrupt file, is refused with a message
saying which.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from impala.popart import ScaledHead
from impala.weights import non_finite

log = logging.getLogger("checkpoint")

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT = "impala-mlma/1"
IDENTITY_FLAGS = ("agent_name", "level_name", "width", "height")
# Checked where the checkpoint names it (older checkpoints may not).
IDENTITY_FLAGS_IF_SAVED = ("algorithm",)
COUNTERS = ("frames", "updates")
# Written by older versions (always equal to "updates"); accepted on load, then ignored.
OLD_COUNTERS = ("version",)


class CheckpointError(RuntimeError):
    pass


def save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer | None,
         counters: dict[str, int], flags: dict[str, Any]) -> None:
    """Write atomically; refuses (CheckpointError) to replace a checkpoint with NaN weights."""
    bad = non_finite(model.state_dict())
    if bad:
        raise CheckpointError(f"not saving {path}: non-finite values in {', '.join(bad[:5])}")
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
    _check_structure(state, path)
    saved = state["flags"]
    checked = [*IDENTITY_FLAGS, *(name for name in IDENTITY_FLAGS_IF_SAVED if name in saved)]
    mismatched = [f"{name}: checkpoint has {saved.get(name)!r}, this run {flags.get(name)!r}"
                  for name in checked if saved.get(name) != flags.get(name)]
    if mismatched:
        raise CheckpointError(
            f"{path} belongs to another run ({'; '.join(mismatched)}); use another "
            "--run_name or --logdir, or the same agent and game")
    return state


def renamed_old_heads(state: Mapping[str, torch.Tensor], names: Mapping[str, str]
                      ) -> dict[str, torch.Tensor]:
    """A state dict written before heads were named by algorithms (`policy.weight`, ...),
    with each old head renamed as `names` says (`heads.<new>.weight`); others unchanged."""
    renamed = {}
    for key, value in state.items():
        module, _, rest = key.partition(".")
        renamed[f"heads.{names[module]}.{rest}" if module in names else key] = value
    return renamed


def restore_model(model: nn.Module, state: dict[str, Any], path: Path,
                  old_head_names: Mapping[str, str] | None = None) -> None:
    """Load the checkpoint's weights; one written before heads were named by algorithms has
    its `policy` and `baseline` heads renamed as the algorithm says (`old_head_names`)."""
    weights = state["model"]
    if old_head_names and not any(key.startswith("heads.") for key in weights):
        weights = renamed_old_heads(weights, old_head_names)
    weights = with_fresh_statistics(model, weights, path)
    try:
        model.load_state_dict(weights)
    except (RuntimeError, KeyError) as exc:
        raise CheckpointError(f"{path}: model weights do not fit this agent: {exc}") from None


def with_fresh_statistics(model: nn.Module, weights: dict[str, torch.Tensor], path: Path
                          ) -> dict[str, torch.Tensor]:
    """Weights saved without PopArt loaded into a model with it: each scaled head gets
    statistics of sigma 1 and mu 0, under which its values are the saved head's (the run
    goes on from the checkpoint with normalization from there on). The other way round is
    refused by name: a scaled head's outputs mean nothing without its statistics."""
    weights = dict(weights)
    for name, module in model.named_modules():
        if isinstance(module, ScaledHead) and f"{name}.mean_square" not in weights:
            log.info("%s: no PopArt statistics for %s; starting them at mu 0, sigma 1",
                     path, name)
            weights[f"{name}.mean"] = torch.zeros(())
            weights[f"{name}.mean_square"] = torch.ones(())
        elif not isinstance(module, ScaledHead) and isinstance(module, nn.Linear) and (
                f"{name}.mean_square" in weights):
            raise CheckpointError(f"{path} was trained with --value_normalization=popart (its "
                                  f"head {name} holds normalized values): resume it with that "
                                  "flag")
    return weights


def resume(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
           flags: dict[str, Any], old_head_names: Mapping[str, str] | None = None
           ) -> dict[str, int]:
    """Load `path` into the model and the optimizer; returns its counters (frames, updates).
    CheckpointError, naming the file, if it is another run's or does not fit."""
    state = load(path, flags)
    restore_model(model, state, path, old_head_names)
    saved_optimizer = state["flags"].get("optimizer", "rmsprop")
    if state.get("optimizer") and saved_optimizer != flags.get("optimizer", "rmsprop"):
        log.warning("%s holds --optimizer=%s's state; --optimizer=%s starts from a fresh state",
                 path, saved_optimizer, flags.get("optimizer"))
    elif state.get("optimizer"):
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: optimizer state does not fit this agent ({exc})"
                                  ) from None
    return {name: state["counters"][name] for name in COUNTERS}


def _check_structure(state: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint whose parts have the wrong types or hold NaN/inf tensors."""
    problems = []
    model = state.get("model")
    if not isinstance(model, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in model.items()):
        problems.append("'model' must map names to tensors")
    optimizer = state.get("optimizer")
    if optimizer is not None and not (isinstance(optimizer, dict)
                                      and isinstance(optimizer.get("state"), dict)
                                      and isinstance(optimizer.get("param_groups"), list)):
        problems.append("'optimizer' must be an optimizer state dict or None")
    counters = state.get("counters")
    if not (isinstance(counters, dict)
            and set(COUNTERS) <= set(counters) <= {*COUNTERS, *OLD_COUNTERS}
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    for v in counters.values())):
        problems.append(f"'counters' must hold the integers {', '.join(COUNTERS)} (>= 0)")
    if not isinstance(state.get("flags"), dict):
        problems.append("'flags' must be a dict")
    if problems:
        raise CheckpointError(f"{path} is damaged: {'; '.join(problems)}; move it away to "
                              "start afresh")
    bad = non_finite(model)
    if isinstance(optimizer, dict):
        bad += non_finite({f"optimizer {i}.{name}": value
                            for i, entry in optimizer["state"].items() if isinstance(entry, dict)
                            for name, value in entry.items()})
    if bad:
        raise CheckpointError(f"{path} holds NaN or infinite values in {', '.join(bad[:5])}"
                              f"{' ...' if len(bad) > 5 else ''}; resume from an earlier "
                              "copy or move it away to start afresh")
