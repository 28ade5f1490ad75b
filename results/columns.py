"""The computed columns of `results/runs.csv`: the frames a run's episodes show, written
by whoever records the run (`bench/suite.py`) and checked against the episodes by
`redraw.py`, so that a number in the table cannot drift from its run.

A threshold column is the first frame at which the mean return of the last RETURN_WINDOW
episodes reached the threshold; the thresholds are Pong's, empty for every other game.
"""

from __future__ import annotations

import pandas as pd

from impala.algorithms.value import LEAST_EXPLORING_EPSILON
from impala.curves import RETURN_WINDOW
from results.scores import game_of

THRESHOLDS = {"frames_to_minus15": -15.0, "frames_to_plus18": 18.0}
COMPUTED = ("last_episode_frames", *THRESHOLDS, "least_exploring_to_plus18")


def first_frame_at(episodes: pd.DataFrame, threshold: float) -> int | None:
    """The frame of the first episode at which the mean of the last RETURN_WINDOW returns
    reached `threshold`; None if it never did."""
    mean = episodes["episode_return"].rolling(RETURN_WINDOW).mean()
    reached = episodes["frames"][mean >= threshold]
    return int(reached.iloc[0]) if len(reached) else None


def frame_columns(episodes: pd.DataFrame, level: str) -> dict[str, int | None]:
    """Each computed column from a run's episodes (a row per episode: frames,
    episode_return, and epsilon for the value-based agents) on `level`."""
    episodes = episodes.sort_values("frames", kind="stable").reset_index(drop=True)
    values: dict[str, int | None] = {"last_episode_frames": int(episodes["frames"].iloc[-1])}
    pong = game_of(level) == "Pong"
    for column, threshold in THRESHOLDS.items():
        values[column] = first_frame_at(episodes, threshold) if pong else None
    values["least_exploring_to_plus18"] = None
    if "epsilon" in episodes and pong:
        least = episodes[episodes["epsilon"] <= LEAST_EXPLORING_EPSILON]
        values["least_exploring_to_plus18"] = first_frame_at(least.reset_index(drop=True),
                                                           THRESHOLDS["frames_to_plus18"])
    return values
