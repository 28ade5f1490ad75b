"""What an algorithm is to the shared runtime: the interface each algorithm module implements,
and the small records it declares itself with.

An algorithm is one module, `impala/algorithms/<name>.py` (found by the registry, so adding
the file is all it takes) or any module named by `--algorithm=package.module:Class`. It
defines one `Algorithm` subclass that declares, in one place:
- `name`, and `flags_class`: a frozen dataclass of its own flags, each made with `flag`;
- `presets`: its defaults per environment family, each with a one-line rule and its record
  (the rows of results/runs.csv or the tests behind it);
- `heads`: the agent's output heads, under the algorithm's own names, and `recorded`, the
  name of what the actor records beside each action (the unroll carries it);
- `log_scalars`, `panels` and `status`: what logs.csv, curve.png and the status line show;
- `episode_tags`: names of per-environment values its exploration reports (an exploration
  rate, say), which travel with every finished episode and become columns of its log;
and implements its behaviour:
- `exploration()`: the actor-side object that picks actions from the heads;
- `learning(model)`: the learner-side object that computes the loss of a batch;
- `evaluation_action(heads)`: what `--mode=test` and `--mode=video` play.

The shared code (config, logs, curves, actor, learner, update) loops over these and names no
algorithm. Declarations are read by processes that never train (`--help`, the frontend's
`--stop`), so an algorithm module imports its tensor code inside the methods that act or
learn, and this module imports no torch at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:  # annotations only
    import numpy as np
    import torch

    from impala.config import Config
    from impala.nets import Agent
    from impala.unroll import RecordedSteps


def flag(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field that is also a command-line flag `--<field name>`."""
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass(frozen=True)
class NoFlags:
    """For an algorithm without flags of its own."""


@dataclass(frozen=True)
class Head:
    """One output head of the agent, on the core's output."""

    name: str
    per_action: bool  # one output per action ([T, B, A]), else one per step ([T, B])
    init_gain: float = 1.0  # orthogonal gain, where the agent initialises its heads


@dataclass(frozen=True)
class Preset:
    """Defaults that `--preset=<name>` (or `auto`, for these families) gives the flags a user
    does not set."""

    name: str
    families: tuple[str, ...]  # environment families (envs.env_family) auto picks it for
    values: Mapping[str, Any]  # flag name -> value: shared flags and the algorithm's own
    rule: str  # one line: what the values are for
    # The evidence behind the values: ids of rows of results/runs.csv, or learning tests as
    # "tests/<path>.py::<test>". Empty only where the rule says the values are unmeasured.
    record: tuple[str, ...]


@dataclass(frozen=True)
class Panel:
    """One panel of curve.png: logs.csv `columns` against frames, or, with
    `tag_at_most=(tag, limit)`, the running mean return of the episodes whose episode tag
    was at most `limit`."""

    title: str
    columns: tuple[str, ...] = ()
    symlog: bool = False
    tag_at_most: tuple[str, float] | None = None


@dataclass(frozen=True)
class StatusItem:
    """One `label value` part of the learner's status line, from a logs.csv column."""

    label: str
    column: str
    format: str = ".3g"


class LossResult(NamedTuple):
    total_loss: torch.Tensor  # scalar, with gradient
    # The algorithm's `log_scalars`, for logs.csv: 0-dim tensors (or floats), read to the host
    # once per update with everything else the update reports, never inside the loss.
    scalars: dict[str, torch.Tensor | float]
    column_errors: torch.Tensor  # [B] each unroll's error: its replay priority
    features: torch.Tensor  # [T', B, F] the torso's output (detached), for its health


class Exploration:
    """The actor's side: how its N environments choose actions from one forward pass."""

    def episode_tags(self) -> dict[str, np.ndarray]:
        """Each of the algorithm's `episode_tags` as [N] values, one per environment, for
        the episodes they finish now (shared code carries and logs them by name)."""
        return {}

    def act(self, heads: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        """(actions [N], the recorded head [N, A]) from heads of shape [1, N, ...]."""
        raise NotImplementedError

    def at_frames(self, frames: int) -> None:
        """The run's frames (over all learners) when the actor's newest weights were made:
        for exploration that follows a schedule. Called before each unroll."""

    def priorities(self, steps: RecordedSteps) -> np.ndarray | None:
        """Each environment's replay priority for the unroll just recorded, or None (replay
        then gives new unrolls the largest priority so far)."""
        return None

    def describe(self) -> str:
        """A line for the actor's log, or ''."""
        return ""


class Learning:
    """The learner's side: the loss of one batch, and any state of its own (a target
    network) kept in step with the updates."""

    def loss(self, model: Agent, batch: dict[str, torch.Tensor],
             core_state: tuple[torch.Tensor, ...]) -> LossResult:
        """`batch`: `[T+1, B, ...]` tensors as rollout.Batch holds them (with replay also
        `importance_weight` and `replayed`, [B])."""
        raise NotImplementedError

    def after_update(self, model: Agent, frames_before: int, frames_after: int) -> None:
        """Called on every rank after each update, with the run's frames (over all ranks,
        so every rank sees the same numbers) before and after it."""


class Algorithm:
    """The interface; see the module docstring. One instance per process, made from the
    run's Config by `registry.build_algorithm`."""

    name: ClassVar[str] = ""
    is_default: ClassVar[bool] = False  # the one --algorithm means when it is not given
    flags_class: ClassVar[type] = NoFlags
    presets: ClassVar[tuple[Preset, ...]] = ()
    heads: ClassVar[tuple[Head, ...]] = ()
    recorded: ClassVar[str] = ""  # the [A] floats the actor records beside each action
    # Whether the agent's core also sees the last action and reward beside the frames.
    action_reward_inputs: ClassVar[bool] = True
    log_scalars: ClassVar[tuple[str, ...]] = ()
    episode_tags: ClassVar[tuple[str, ...]] = ()  # per-episode values its exploration reports
    panels: ClassVar[tuple[Panel, ...]] = ()
    status: ClassVar[tuple[StatusItem, ...]] = ()
    # Checkpoints written before heads were named by algorithms held a `policy` and a
    # `baseline` head: which of this algorithm's heads each one is.
    old_head_names: ClassVar[Mapping[str, str]] = {}

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.flags = cfg.algorithm_flags

    @classmethod
    def problems(cls, cfg: Config) -> Iterator[str]:
        """What is wrong with the run's flags for this algorithm (each a message)."""
        return iter(())

    @property
    def overlap(self) -> int:
        """Steps an unroll shares with the previous one of its environment (>= 1)."""
        return 1

    def exploration(self, first_env: int, count: int, total: int) -> Exploration:
        """The actor-side object for environments first..first+count-1 of the run's
        `total`."""
        raise NotImplementedError

    def learning(self, model: Agent) -> Learning:
        raise NotImplementedError

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        """The action played by --mode=test/video: [T, B]."""
        raise NotImplementedError
