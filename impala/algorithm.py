"""What an algorithm is to the shared runtime: the interface each algorithm implements, the
small records it declares itself with, and the names of the batch fields its loss reads.

An algorithm is a package, `impala/algorithms/<name>/` (found by the registry, so adding the
package is all it takes), or any class named by `--algorithm=package.module:Class`. It comes
in two halves, so that processes that never train (`--help`, the frontend's `--stop`) read
the first without loading torch:
- **Its declaration**, an `Algorithm` subclass in the package's `__init__.py`, torch-free:
  - `name`, and `flags_class`: a frozen dataclass of its own flags, each made with `flag`;
  - `presets`: its defaults per environment family, each with a one-line rule and its
    record (the rows of results/runs.csv or the tests behind it);
  - `heads`: the agent's output heads, under the algorithm's own names, and `recorded`, the
    name of what the actor records beside each action (the unroll carries it);
  - `log_scalars`, `panels` and `status`: what logs.csv, curve.png and the status line show;
  - `episode_tags`: names of per-environment values its exploration reports (an exploration
    rate, say), which travel with every finished episode and become columns of its log;
  - `problems(cfg)` and `overlap`: what is wrong with a run's flags, and the steps
    consecutive unrolls share;
  - `behaviour`: the import path of its `Behaviour` class.
- **Its behaviour**, a `Behaviour` subclass in a module of its own with its tensor code:
  - `exploration()`: the actor-side object that picks actions from the heads;
  - `learning(model)`: the learner-side object that computes the loss of a batch;
  - `evaluation_action(heads)`: what `--mode=test` and `--mode=video` play.
  The registry loads it with the declaration where a process acts or learns
  (`registry.build_algorithm`), and the algorithm's own calls reach it.

The shared code (config, logs, curves, actor, learner, update) loops over these and names no
algorithm. This module imports no torch at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:  # annotations only
    import numpy as np
    import torch

    from impala.config import Config
    from impala.nets import Agent
    from impala.unroll.layout import RecordedSteps


# The batch a loss reads (`Learning.loss`): [T+1, B, ...] tensors under these names and
# under the algorithm's `recorded` name, and with replay also [B] tensors, the importance
# weight of each column and whether it was replayed (1.0) or fresh (0.0).
OBSERVATION = "observation"
LAST_ACTION = "last_action"  # the action that led to each step (0 at an episode's start)
REWARD = "reward"  # the reward that arrived with each step
DONE = "done"  # an episode starts at this step (a lost life counts)
ACTION = "action"  # the action taken on each step
IMPORTANCE_WEIGHT = "importance_weight"
REPLAYED = "replayed"


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
    # PopArt (impala/popart.py): a one-output head of normalized values with the statistics
    # of their targets
    normalized: bool = False


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
        """`batch`: the fields named at the top of this module."""
        raise NotImplementedError

    def before_update(self, frames_before: int) -> None:
        """Called on every rank before each update's loss, with the run's frames over all
        ranks: for what a loss schedules on frames (after a resume as well)."""

    def after_update(self, model: Agent, frames_before: int, frames_after: int,
                     allreduce_sum: Callable[[np.ndarray], np.ndarray]) -> None:
        """Called on every rank after each update, with the run's frames (over all ranks,
        so every rank sees the same numbers) before and after it. `allreduce_sum` sums an
        array over the ranks, for statistics every rank must then hold alike."""

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Tensors of its own that every rank must hold identically (a target network):
        the ranks' sync digest covers them (distributed.state_digest)."""
        return {}


class Algorithm:
    """The declaration; see the module docstring. One instance per process, made from the
    run's Config by `registry.build_algorithm`, which also gives it its behaviour."""

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
    behaviour: ClassVar[str] = ""  # "package.module:Class" of its Behaviour

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.flags = cfg.algorithm_flags
        self.acting: Behaviour | None = None  # set by registry.build_algorithm

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
        return self._behaviour().exploration(first_env, count, total)

    def learning(self, model: Agent) -> Learning:
        return self._behaviour().learning(model)

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        """The action played by --mode=test/video: [T, B]."""
        return self._behaviour().evaluation_action(heads)

    def _behaviour(self) -> Behaviour:
        if self.acting is None:
            raise RuntimeError(f"algorithm {self.name!r} was made without its behaviour: "
                               "make it with registry.build_algorithm")
        return self.acting


class Behaviour:
    """How an algorithm acts and learns, with its declaration (`algorithm`: its flags,
    `algorithm.cfg` the run's) at hand."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm
        self.cfg = algorithm.cfg
        self.flags = algorithm.flags

    def exploration(self, first_env: int, count: int, total: int) -> Exploration:
        raise NotImplementedError

    def learning(self, model: Agent) -> Learning:
        raise NotImplementedError

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError
