"""Tiny replay items for the replay memory's tests and its file's: two fields, each item's
values derived from one number, so a test can tell which item came back."""

from __future__ import annotations

import numpy as np

from impala.transport import FieldSpec

FIELDS = {"x": FieldSpec("int64", (2,)), "y": FieldSpec("float32", ())}


def items(values) -> dict[str, np.ndarray]:
    """[len(values)] items: x = (v, -v), y = v."""
    values = np.asarray(values)
    return {"x": np.stack([values, -values], axis=1), "y": values.astype(np.float32)}
