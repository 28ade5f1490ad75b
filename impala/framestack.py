"""Send each new Atari frame once and rebuild the frame stacks on the learner.

An unroll of T+1 stacked observations `[T+1, S, H, W]` (S = 4) shares all but one frame
between neighbouring steps. On the wire it becomes `frames [T+S, H, W]`: the first S-1
frames of step 0's stack, then the newest frame of every step. With `episode_start [T+1]`
(True where the environment was reset, so its stack was padded with copies of the reset
frame, as Gymnasium's FrameStackObservation does) the stacks are rebuilt exactly:

  stack_t[k] = frames[max(t + k, S - 1 + r_t)],  r_t = the last reset step <= t (if any)

Bytes per agent step: (T + S) / T frames, instead of S.
"""

from __future__ import annotations

import numpy as np


def split_stacks(observations: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """[T+1, S, H, W] stacked observations -> [T+S, H, W] frames, each sent once."""
    stack = observations.shape[1]
    if out is None:
        out = np.empty((observations.shape[0] + stack - 1, *observations.shape[2:]),
                       observations.dtype)
    out[: stack - 1] = observations[0, : stack - 1]
    out[stack - 1:] = observations[:, stack - 1]
    return out


def stack_indices(episode_start: np.ndarray, stack: int) -> np.ndarray:
    """[T+1] reset flags -> [T+1, S] indices into the frames array."""
    steps = np.arange(len(episode_start))
    last_reset = np.maximum.accumulate(np.where(episode_start, steps, -stack))
    window = steps[:, None] + np.arange(stack)[None, :]
    return np.maximum(window, (stack - 1 + last_reset)[:, None])


def rebuild_stacks(frames: np.ndarray, episode_start: np.ndarray, out: np.ndarray) -> None:
    """Write the [T+1, S, H, W] stacks of `frames` [T+S, H, W] into `out` (may be a view)."""
    out[:] = frames[stack_indices(episode_start, out.shape[1])]
