"""Every flag of `experiment.py`: the schema, its checks, and the values derived from it.

- Schema: `Config`, one frozen dataclass of the flags every run has, and in `algorithm_flags` the
  algorithm's own flags (its `flags_class`, see impala/algorithm.py). Flag names keep
  those of scalable_agent and its multi-learner tweak, so their command lines work unchanged.
- Checks: every value is checked when a Config is made (the algorithm checks its own).
- Derived values: the run directory, the replay schedule, the environments' settings.
How flags become a Config, presets in between, is presets.py; the command line, flags.py.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from impala.algorithm import flag
from impala.cores import default_actor_count
from impala.registry import algorithm_class, default_algorithm
from impala.rewards import REWARD_CLIPPING_MODES
from impala.schedules import ReplaySchedule

if TYPE_CHECKING:  # annotations only: reading flags imports neither torch nor gymnasium
    import torch

    from impala.envs import EnvConfig
    from impala.nets import Agent

# --optimizer's choices (impala/optim.py): the paper's RMSProp, or Adam, whose step is set
# by each weight's own gradient scale, where RMSProp's epsilon of 0.01, larger than most
# weights' mean square, passes the clipped gradient's scale on to their steps.
OPTIMIZERS = ("rmsprop", "adam")


@dataclass(frozen=True)
class Config:
    # --- what runs -------------------------------------------------------------------
    mode: str = flag("train", "train, test (play episodes from the checkpoint) or video",
                     ("train", "test", "video"))
    job_name: str = flag("local", "learner, actor, or local (one learner + --num_actors "
                         "actor processes on this host)", ("learner", "actor", "local"))
    task: int = flag(0, "actor index (actors) or learner index (learners)")
    preset: str = flag("none", "defaults for the flags you do not set: auto (the "
                       "algorithm's preset for the environment's family: Atari, other image "
                       "environments, or vector observations), a preset's name, or none (the "
                       "IMPALA paper's settings)")
    logdir: str = flag("runs", "parent of run directories")
    run_name: str = flag("", "run directory under --logdir; default <level>_<agent>, so "
                         "the same command resumes the same run")
    # --- environment -----------------------------------------------------------------
    level_name: str = flag("PongNoFrameskip-v4", "Gymnasium id (Atari ids get the DeepMind "
                           "pipeline)")
    num_action_repeats: int = flag(4, "frames per agent step (Atari)")
    width: int = flag(84, "observation width (Atari)")
    height: int = flag(84, "observation height (Atari)")
    seed: int = flag(1, "seed for nets and environments (actors add their task)")
    # --- agent and algorithm ---------------------------------------------------------
    algorithm: str = flag("", "a built-in algorithm (impala/algorithms/), or "
                          "package.module:Class for one of your own; --preset=auto picks "
                          "its settings (empty: the built-in default)")
    agent_name: str = flag("SimpleConvNetAgent", "SimpleConvNetAgent, ResNetAgent, "
                           "ResNetLSTMAgent, SimpleConvNetLSTMAgent, MLPAgent or "
                           "MLPLSTMAgent (case-insensitive)")
    batch_size: int = flag(32, "unrolls per learner update (per learner)")
    unroll_length: int = flag(20, "agent steps per unroll (T)")
    total_environment_frames: int = flag(200_000_000, "stop after this many frames over all "
                                         "learners (frames = agent steps x action repeats)")
    target_return: float = flag(math.inf, "also stop, as finished, once the mean raw return "
                                "of the last --target_return_episodes episodes (all actors) "
                                "reaches this")
    target_return_episodes: int = flag(100, "episodes in --target_return's mean")
    discounting: float = flag(0.99, "discount factor gamma")
    reward_clipping: str = flag("abs_one", "reward clipping for the loss",
                                REWARD_CLIPPING_MODES)
    passes: int = flag(1, "optimizer steps per batch, each with the loss recomputed under "
                       "the current weights (more learning per frame, more learner time)")
    gradients_clipping: float = flag(40.0, "clip gradients to this global norm after the "
                                     "allreduce; <= 0 disables")
    learning_rate: float = flag(0.0006, "RMSProp learning rate, annealed linearly to 0 "
                                "(from where --lr_hold_fraction says)")
    lr_hold_fraction: float = flag(0.0, "share of --total_environment_frames trained at the "
                                   "full --learning_rate before it anneals linearly to 0 at "
                                   "the end of the budget (0: anneal from the start, as the "
                                   "paper; 1: never anneal)")
    redo_threshold: float = flag(0.0, "ReDo (impala/redo.py): recycle the torso's units whose "
                                 "mean |activation| is at most this share of their layer's "
                                 "mean (tau); 0: off")
    redo_interval_frames: int = flag(16_000, "with --redo_threshold: frames between two "
                                     "scorings of the units")
    replay_ratio: float = flag(0.0, "replayed unrolls per fresh one in each update (LASER): an "
                               "update trains on the B fresh unrolls plus replay_ratio x B "
                               "from the learner's replay (fractional values alternate "
                               "between the two nearest counts); 0 turns replay off. Set without "
                               "--initial_replay_*, it holds from the first frame")
    initial_replay_ratio: float = flag(0.0, "--replay_ratio for the run's first "
                                       "--initial_replay_frames fresh frames (more updates "
                                       "per frame while the policy is poor)")
    initial_replay_frames: int = flag(0, "fresh frames trained at --initial_replay_ratio "
                                      "before --replay_ratio takes over (0: none)")
    replay_size: int = flag(10_000, "unrolls each learner's replay holds (the oldest leave "
                            "first); its memory is logged at start")
    priority_exponent: float = flag(0.0, "alpha of prioritized replay: unrolls are sampled "
                                    "with probability ~ priority^alpha (0: uniform)")
    importance_sampling_exponent: float = flag(0.4, "beta of prioritized replay: replayed "
                                               "unrolls are weighted by (N P(i))^-beta, "
                                               "normalised by the largest weight")
    first_env: int = flag(-1, "index of this actor's first environment among the run's, "
                          "for exploration that differs per environment (-1: task x "
                          "num_envs; the frontend sets it)")
    total_envs: int = flag(0, "environments of the whole run (0: num_actors x num_envs; the "
                           "frontend sets it)")
    optimizer: str = flag("rmsprop", "the learner's optimizer: rmsprop (TensorFlow 1's, as "
                          "the paper) or adam (--learning_rate and --epsilon are its own)",
                          OPTIMIZERS)
    decay: float = flag(0.99, "RMSProp decay (alpha)")
    momentum: float = flag(0.0, "RMSProp momentum")
    epsilon: float = flag(0.01, "RMSProp's epsilon (inside the square root), or Adam's")
    # --- processes and transport -----------------------------------------------------
    learner_host: str = flag("127.0.0.1:8001", "ip:port the learner binds and its actors "
                             "connect to")
    actor_hosts: str = flag("", "comma-separated actor ip:ports (informational; kept so "
                            "the original command lines parse)")
    num_actors: int = flag(0, "actor processes started by --job_name=local (0: fill this "
                           "host's cores beside the learner: one per core but two, at least 2)")
    num_envs: int = flag(8, "environments per actor, stepped with one batched forward pass")
    env_backend: str = flag("gymnasium", "what steps an actor's Atari games: gymnasium (one "
                            "at a time through impala/envs.py's wrappers), ale_vector (ale-py's "
                            "AtariVectorEnv: the same frames, ~1.2x fewer actor core-ms per "
                            "step) or auto (ale_vector for the Atari ids it serves)",
                            ("auto", "gymnasium", "ale_vector"))
    queue_capacity: int = flag(2, "batches the learner may hold ready; beyond it actors are "
                               "pushed back")
    max_message_mb: float = flag(64.0, "largest network message accepted, in MiB")
    learner_io_threads: int = flag(0, "ZeroMQ I/O threads of a learner's socket, which "
                                   "encrypt the weights it serves and decrypt the unrolls it "
                                   "takes (0: one per 8 cores of its host, 1 to 4)")
    auth: str = flag("curve", "curve: CurveZMQ encryption, and a learner admits only holders "
                     "of the run's key file <run_dir>/keys/run.keys; none: anyone who reaches "
                     "a learner's port can feed it and read its weights (trusted networks "
                     "only)", ("curve", "none"))
    learner_device: str = flag("auto", "device of the learner: auto (a GPU where torch sees "
                               "one), cpu or cuda", ("auto", "cpu", "cuda"))
    actor_device: str = flag("cpu", "device of the actors' batched forward pass: cpu, cuda "
                             "(a GPU beside the environments, as rela's act device) or auto",
                             ("auto", "cpu", "cuda"))
    stack_frames: str = flag("auto", "where a learner rebuilds Atari frame stacks from the "
                             "frames sent once each: host (into the batch), device (the batch "
                             "carries the frames; the stacks are gathered where the update "
                             "runs, a GPU's copy 3.5x smaller) or auto (device on a GPU)",
                             ("auto", "host", "device"))
    channels_last: str = flag("auto", "memory layout of a convolutional torso's activations: "
                              "on (channels last: oneDNN's fast convolutions on a CPU), off, "
                              "or auto (on where measured faster: a CPU learner, and a CPU "
                              "actor's ResNet torso)", ("auto", "on", "off"))
    tf32: str = flag("off", "on a GPU, whether cuDNN's convolutions and LSTM may round "
                     "float32 to TensorFloat-32 on tensor cores: off (float32 throughout, as "
                     "on a CPU; no slower for these networks on an H100) or on (torch's "
                     "default)", ("on", "off"))
    bf16_torso: str = flag("off", "whether a learner runs its agent's torso under bfloat16 "
                           "autocast (core, heads and losses stay float32; actors act in "
                           "float32): off, on (an update ~1.5x faster on a CPU with "
                           "AVX512-BF16; unmeasured on a GPU), or auto (on for a CPU learner "
                           "with native bfloat16; a preset may set it)", ("auto", "on", "off"))
    learner_threads: int = flag(2, "torch threads of the learner")
    actor_nice: int = flag(10, "scheduling niceness of actor processes (0-19): where actors "
                           "share a host with a learner, the learner gets the CPU first")
    allreduce_backend: str = flag("horovod", "gradient allreduce between learners",
                                  ("horovod", "torch", "none"))
    # --- logs and checkpoints --------------------------------------------------------
    log_interval_s: float = flag(5.0, "seconds between logs.csv rows and status lines")
    checkpoint_interval_s: float = flag(600.0, "seconds between checkpoints (and one at exit)")
    checkpoint_replay: str = flag("on", "with each checkpoint, also write each learner's "
                                  "replay to <run_dir>/replay-<rank>.npz, so a resumed run "
                                  "trains on it (its size is logged at start); off: a "
                                  "resumed run refills its replay from new unrolls",
                                  ("on", "off"))
    test_num_episodes: int = flag(10, "episodes played by --mode=test")
    wandb_project: str = flag("", "also log to this Weights & Biases project (rank 0; "
                              "offline without an API key; needs the wandb extra)")
    wandb_entity: str = flag("", "W&B entity (user or team) of --wandb_project")
    wandb_group: str = flag("", "W&B group of the run (e.g. one per sweep)")

    # The algorithm's own flags (its flags_class), filled in from the flags.
    algorithm_flags: Any = field(default=None, metadata={"internal": True})

    def __post_init__(self) -> None:
        if self.preset == "auto":
            raise ValueError("a Config holds a resolved preset; use Config.from_flags for auto")
        if not self.algorithm:
            object.__setattr__(self, "algorithm", default_algorithm())
        if self.num_actors == 0:
            object.__setattr__(self, "num_actors", default_actor_count())
        cls = algorithm_class(self.algorithm)
        if self.algorithm_flags is None:
            object.__setattr__(self, "algorithm_flags", cls.flags_class())
        elif not isinstance(self.algorithm_flags, cls.flags_class):
            raise ValueError(f"--algorithm={self.algorithm} takes {cls.flags_class.__name__}"
                             f", got {type(self.algorithm_flags).__name__}")
        problems = [message for message in (*self._problems(), *cls.problems(self)) if message]
        if problems:
            raise ValueError("bad flags:\n  " + "\n  ".join(problems))

    def _problems(self):
        positive = ("num_action_repeats", "width", "height", "batch_size", "unroll_length",
                    "total_environment_frames", "num_envs", "queue_capacity",
                    "test_num_episodes", "learner_threads", "max_message_mb",
                    "log_interval_s", "checkpoint_interval_s", "passes", "replay_size",
                    "target_return_episodes")
        for name in positive:
            if getattr(self, name) <= 0:
                yield f"--{name} must be > 0, got {getattr(self, name)}"
        if self.num_actors < 0:
            yield f"--num_actors must be >= 0, got {self.num_actors}"
        if not 0 <= self.learner_io_threads <= 64:
            yield f"--learner_io_threads must be in 0..64, got {self.learner_io_threads}"
        if not 0 <= self.actor_nice <= 19:
            yield f"--actor_nice must be in 0..19, got {self.actor_nice}"
        if not 0.0 <= self.discounting <= 1.0:
            yield f"--discounting must be in [0, 1], got {self.discounting}"
        if math.isnan(self.target_return):
            yield "--target_return must be a number (inf, the default, never stops a run)"
        if self.learning_rate < 0:
            yield f"--learning_rate must be >= 0, got {self.learning_rate}"
        if not 0.0 <= self.lr_hold_fraction <= 1.0:
            yield f"--lr_hold_fraction must be in [0, 1], got {self.lr_hold_fraction}"
        if not 0 <= self.redo_threshold < 1 or self.redo_interval_frames <= 0:
            yield ("--redo_threshold must be in [0, 1) and --redo_interval_frames > 0, got "
                   f"{self.redo_threshold} and {self.redo_interval_frames}")
        yield from self._replay_problems()
        try:
            parse_host_port(self.learner_host)
        except ValueError as exc:
            yield f"--learner_host: {exc}"
        if self.run_name and not re.fullmatch(r"[A-Za-z0-9._-]+", self.run_name):
            yield ("--run_name may hold letters, digits, '.', '_' and '-' only, "
                   f"got {self.run_name!r}")

    def _replay_problems(self):
        ratios_ok = True
        for name in ("replay_ratio", "initial_replay_ratio"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                ratios_ok = False
                yield f"--{name} must be >= 0 (0 turns replay off), got {value}"
        if self.initial_replay_frames < 0:
            yield f"--initial_replay_frames must be >= 0, got {self.initial_replay_frames}"
        if ratios_ok and self.replay_size < max(self.batch_size, self.max_replayed_per_update):
            larger = ("--initial_replay_ratio"
                      if self.replay_schedule.largest > self.replay_ratio else "--replay_ratio")
            yield (f"--replay_size must hold at least one batch: >= max(--batch_size, "
                   f"ceil({larger} x --batch_size)) = "
                   f"{max(self.batch_size, self.max_replayed_per_update)}, "
                   f"got {self.replay_size}")
        for name in ("priority_exponent", "importance_sampling_exponent"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                yield f"--{name} must be in [0, 1], got {getattr(self, name)}"

    def exploring_envs(self) -> tuple[int, int]:
        """(first, total): this actor's first environment among the run's, and how many
        the run has, for exploration that differs per environment."""
        first = self.first_env if self.first_env >= 0 else self.task * self.num_envs
        total = self.total_envs if self.total_envs > 0 else self.num_actors * self.num_envs
        return first, max(total, first + self.num_envs)

    @property
    def max_replayed_per_update(self) -> int:
        """ceil(r x batch_size) for the larger ratio in use: the most replayed unrolls one
        update takes."""
        return math.ceil(self.replay_schedule.largest * self.batch_size)

    @property
    def replay_schedule(self) -> ReplaySchedule:
        return ReplaySchedule(self.initial_replay_ratio, self.initial_replay_frames,
                              self.replay_ratio)

    @property
    def resolved_run_name(self) -> str:
        if self.run_name:
            return self.run_name
        return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{self.level_name}_{self.agent_name}")

    @property
    def run_dir(self) -> Path:
        """Where this run's logs, checkpoint and keys live (relative to the working dir)."""
        return self.run_dir_on(None)

    def run_dir_on(self, workdir: str | Path | None) -> Path:
        """The run directory on a host whose checkout is `workdir`: `<logdir>/<run_name>`,
        a relative `--logdir` taken under `workdir` (None: the working directory)."""
        path = Path(self.logdir) / self.resolved_run_name
        return path if workdir is None or path.is_absolute() else Path(workdir) / path

    @property
    def env_config(self) -> EnvConfig:
        """How every process of the run creates its environments."""
        from impala.envs import EnvConfig  # gymnasium only where environments are made

        return EnvConfig(self.level_name, self.num_action_repeats, self.width, self.height)

    def device_for(self, local_rank: int = 0) -> torch.device:
        """The learner's device: `cuda:<local rank>` (one GPU per rank on a host) or cpu."""
        from impala.devices import resolve_device  # torch: only where a device is used

        return resolve_device(self.learner_device, local_rank, tf32=self.tf32_allowed)

    @property
    def tf32_allowed(self) -> bool:
        """Whether a GPU may round float32 to TensorFloat-32 (`--tf32`)."""
        return self.tf32 == "on"

    def stacks_on_device(self, device: torch.device) -> bool:
        """Whether a learner on `device` gathers frame stacks there (`--stack_frames`)."""
        return self.stack_frames == "device" or (self.stack_frames == "auto"
                                                  and device.type == "cuda")

    def uses_channels_last(self, device: torch.device, agent: Agent, training: bool) -> bool:
        """Whether `agent` on `device` runs its convolutions on channels-last activations
        (`--channels_last`); `training`: for a learner, else for acting."""
        if agent.channels_last_pays is None:  # no convolutions
            return False
        if self.channels_last != "auto":
            return self.channels_last == "on"
        # Measured faster on a CPU only; a GPU keeps the default layout until measured there.
        return device.type == "cpu" and agent.channels_last_pays[0 if training else 1]

    def to_dict(self) -> dict[str, Any]:
        """Every flag, the algorithm's own among them, by name."""
        return {**{f.name: getattr(self, f.name) for f in shared_fields()},
                **dataclasses.asdict(self.algorithm_flags)}


def shared_fields() -> list[dataclasses.Field]:
    """The flags every run has (Config's fields but `algorithm_flags`)."""
    return [f for f in dataclasses.fields(Config) if not f.metadata.get("internal")]


def parse_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected ip:port, got {text!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r} in {text!r}")
    return host, int(port)
