"""The learner's side of the unroll: `UnrollReader` checks everything an unroll message
carries (it came from the network) and continues its frame stream; `Unroll` and
`EpisodeStats` are what it hands on. The layout and the field names are layout.py's.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from impala.transport import Message, WireError, meta_int
from impala.unroll.framestack import FrameStreams
from impala.unroll.layout import (
    ACTION,
    EPISODE_LENGTHS,
    EPISODE_RETURNS,
    EPISODE_START,
    FRAMES,
    LAST_ACTION,
    POLICY_VERSION,
    PRIORITY,
    SEQ,
    STREAM,
    TAGS,
    UNROLL,
    UNROLL_CONTINUED,
    UnrollLayout,
)

# Sane ranges for what an unroll's meta may carry: a policy version and a stream's sequence
# number stay exact as float64; an episode's length and |return| stay far from overflow.
MAX_COUNTER = (1 << 53) - 1
MAX_EPISODE_LENGTH = (1 << 31) - 1
MAX_ABS_RETURN = 1e12
MAX_STREAMS_PER_ACTOR = 1 << 16
MAX_PRIORITY = 1e9



@dataclass
class EpisodeStats:
    returns: list[float]
    lengths: list[int]
    tags: list[dict[str, float]]  # each episode's values of the algorithm's episode tags

    @classmethod
    def empty(cls) -> EpisodeStats:
        return cls([], [], [])

    def extend(self, other: EpisodeStats) -> None:
        self.returns.extend(other.returns)
        self.lengths.extend(other.lengths)
        self.tags.extend(other.tags)


@dataclass
class Unroll:
    """A checked unroll in its stored form (arrays are views of the message or of the
    reader's frame pool: copy them before the next `read`)."""

    arrays: dict[str, np.ndarray]
    sender: str
    policy_version: int
    episodes: EpisodeStats
    stream_key: Hashable | None = None
    seq: int = 0
    priority: float | None = None  # the actor's, where the algorithm has actors compute it


class UnrollReader:
    """Learner side: checks an unroll's meta and values and continues its frame stream.

    `read` returns the unroll in its stored form or raises WireError (malformed: drop and
    count) or StreamGap (the stream cannot go on: ask the actor to restart it). Once the
    unroll is kept, `kept` remembers its stream's last stack for the next one."""

    def __init__(self, layout: UnrollLayout, max_streams: int = 4096) -> None:
        self.layout = layout
        self.schemas = {UNROLL: layout.schema()}
        self.streams: FrameStreams | None = None
        if layout.frame_stack:
            self.schemas[UNROLL_CONTINUED] = layout.schema(continued=True)
            stack, *frame_shape = layout.observation_shape
            self.streams = FrameStreams(layout.unroll_length, stack, tuple(frame_shape),
                                        layout.observation_dtype, max_streams, layout.overlap)

    def read(self, peer: Hashable, message: Message) -> Unroll:
        """`peer`: who sent it, as the transport knows (not as the sender claims)."""
        version, episodes = parse_unroll_meta(message,
                                              max_episodes=self.layout.unroll_length + 1)
        episodes.tags = [parse_tags(message, self.layout.episode_tags)] * len(episodes.returns)
        check_unroll_values(message.arrays, self.layout.num_actions)
        unroll = Unroll(message.arrays, message.sender, version, episodes,
                        priority=parse_priority(message))
        if self.streams is not None:
            stream, unroll.seq = parse_stream_meta(message)
            unroll.stream_key = (peer, stream)
            if message.kind == UNROLL_CONTINUED:
                unroll.arrays[FRAMES] = self.streams.continued(
                    unroll.stream_key, unroll.seq, message.arrays[FRAMES])
        return unroll

    def kept(self, unroll: Unroll) -> None:
        if self.streams is not None:
            self.streams.remember(unroll.stream_key, unroll.seq, unroll.arrays[FRAMES],
                                  unroll.arrays[EPISODE_START])

    def forget(self, peer: Hashable) -> None:
        if self.streams is not None:
            self.streams.forget(peer)


def parse_unroll_meta(message: Message, max_episodes: int) -> tuple[int, EpisodeStats]:
    """(policy_version, finished-episode statistics) from an unroll's meta, validated."""
    meta = message.meta
    version = meta_int(meta, POLICY_VERSION, 0, MAX_COUNTER)
    returns = meta.get(EPISODE_RETURNS, [])
    lengths = meta.get(EPISODE_LENGTHS, [])
    if not (isinstance(returns, list) and isinstance(lengths, list)
            and len(returns) == len(lengths) <= max_episodes
            and all(_is_sane_number(r) for r in returns)
            and all(isinstance(n, int) and not isinstance(n, bool)
                    and 0 <= n <= MAX_EPISODE_LENGTH for n in lengths)):
        raise WireError(f"meta.{EPISODE_RETURNS}/{EPISODE_LENGTHS} must be equal-length "
                        f"lists of at most {max_episodes} returns (|r| <= {MAX_ABS_RETURN:g}) "
                        f"and lengths (0..{MAX_EPISODE_LENGTH})")
    return version, EpisodeStats([float(r) for r in returns], [int(n) for n in lengths], [])


def parse_tags(message: Message, names: tuple[str, ...]) -> dict[str, float]:
    """The sending environment's episode tags: only the algorithm's `names`, each a finite
    number of at most MAX_ABS_RETURN in size."""
    tags = message.meta.get(TAGS, {})
    if not isinstance(tags, dict) or not set(tags) <= set(names) or not all(
            _is_sane_number(value) for value in tags.values()):
        raise WireError(f"meta.{TAGS} must map some of {list(names)} to numbers "
                        f"(|x| <= {MAX_ABS_RETURN:g}), got {str(tags)[:80]}")
    return {name: float(value) for name, value in tags.items()}


def parse_priority(message: Message) -> float | None:
    """The actor's replay priority, if it sent one: a finite number in [0, MAX_PRIORITY]."""
    value = message.meta.get(PRIORITY)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 <= value <= MAX_PRIORITY):  # NaN fails the comparison too
        raise WireError(f"meta.{PRIORITY} must be a number in [0, {MAX_PRIORITY:g}], "
                        f"got {value!r}")
    return float(value)


def _is_sane_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    # Compared before any float conversion: float() of a 400-digit integer overflows.
    return -MAX_ABS_RETURN <= value <= MAX_ABS_RETURN


def parse_stream_meta(message: Message) -> tuple[int, int]:
    """(stream, seq) of a frame-stacked unroll: which env of its actor, which unroll of it."""
    return (meta_int(message.meta, STREAM, 0, MAX_STREAMS_PER_ACTOR - 1),
            meta_int(message.meta, SEQ, 0, MAX_COUNTER))


def check_unroll_values(arrays: dict[str, np.ndarray], num_actions: int) -> None:
    """Refuse values no environment or agent produces (WireError naming the field).

    The decoder has checked names, dtypes and shapes; these are the values the learner
    would index with (actions), do arithmetic on (floats) or branch on (flags). A NaN
    reward or an action out of range would crash or poison an update.
    """
    for name in (ACTION, LAST_ACTION):
        values = arrays[name]
        if values.min() < 0 or values.max() >= num_actions:
            raise WireError(f"field {name!r}: values must lie in [0, {num_actions}), got "
                            f"[{values.min()}, {values.max()}]")
    for name, values in arrays.items():
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise WireError(f"field {name!r}: NaN or infinite values")
        if values.dtype == np.bool_ and values.view(np.uint8).max(initial=0) > 1:
            raise WireError(f"field {name!r}: booleans must be bytes 0 or 1")
