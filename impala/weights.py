"""A model's weights on the wire: the schema both sides check, the arrays a learner sends."""

from __future__ import annotations

import numpy as np
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
    arrays = weights_arrays(model)
    bad = [name for name, a in arrays.items() if a.dtype.kind == "f" and not np.isfinite(a).all()]
    if bad:
        raise FloatingPointError(f"parameters became non-finite ({', '.join(bad[:5])}); "
                                 "not publishing them")
    return arrays
