"""A model's weights on the wire: the schema both sides check, the arrays a learner sends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from impala.transport import FieldSpec


def weights_schema(model: nn.Module) -> dict[str, FieldSpec]:
    return {name: FieldSpec(str(t.dtype).removeprefix("torch."), tuple(t.shape))
            for name, t in model.state_dict().items()}


def weights_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """A copy of the weights as numpy arrays (the optimizer changes the originals in place)."""
    return {name: t.detach().to("cpu", copy=True).numpy()
            for name, t in model.state_dict().items()}


def finite_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """`weights_arrays`, refusing to hand NaN or infinite weights to any actor."""
    return refuse_non_finite(weights_arrays(model))


def refuse_non_finite(arrays: dict[str, np.ndarray], when: str = "") -> dict[str, np.ndarray]:
    """`arrays`, if every one is finite; else FloatingPointError naming the bad ones and
    `when` they went bad (e.g. "by update 7"): such weights are never published."""
    bad = non_finite(arrays)
    if bad:
        raise FloatingPointError(f"parameters became non-finite ({', '.join(bad[:5])})"
                                 f"{' ' + when if when else ''}; not publishing them")
    return arrays


def non_finite(values: Mapping[Any, Any]) -> list[str]:
    """Names of the floating-point tensors or arrays that hold a NaN or an infinity (the
    one scan behind publishing weights and saving and loading checkpoints)."""
    bad = []
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            finite = not value.is_floating_point() or bool(torch.isfinite(value).all())
        elif isinstance(value, np.ndarray):
            finite = value.dtype.kind != "f" or bool(np.isfinite(value).all())
        else:
            continue
        if not finite:
            bad.append(str(name))
    return bad
