"""Every flag of `experiment.py` in one frozen dataclass; every default lives here.

Flag names keep those of scalable_agent and its multi-learner tweak, so their command
lines (`--level_name=... --agent_name=... --batch_size=...`) work unchanged.

Presets: the field defaults below are the IMPALA paper's Atari settings. On the command
line, `--preset` (default `auto`: chosen by the environment's family, see envs.py) then
replaces the defaults of the flags the user did not set with settings that learn on that
family (PRESETS; why each value, in the README's "Presets"). A resolved Config names its
preset, and `to_argv` passes it on, so child processes resolve the same values.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: reading flags imports neither torch nor gymnasium
    import torch

    from impala.envs import EnvSettings

from impala.settings import (
    ALGORITHMS,
    REWARD_CLIPPING_MODES,
    LossSettings,
    ReplaySchedule,
    ValueSettings,
)


def _flag(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices})


# Per environment family (envs.env_family), the defaults that replace the paper's for the
# flags a user does not set. `image` environments share Atari's.
PRESETS: dict[str, dict[str, Any]] = {
    # 4x the paper's updates per frame at 2x its rate: Pong rises from ~4M frames instead of
    # ~6M, and 4x the rate kills the conv torso. Held for 80% of the budget, then annealed:
    # a high rate lifts a late-rising seed, a low one settles a risen policy.
    # Record: sandbox/pong_curve.md ("Step sizes", "Dead torso", "Pong with the defaults").
    # LASER replay from the last ~375 updates (3,000 unrolls), 4 replayed per fresh one for
    # the first 2M frames (the policy is poor and moves little), then 3: a constant 4 or 5
    # slows the end. Pong's +18 at 3.83M frames on seed 2 (4.97M at a constant 3, never by
    # 5.79M with 5-then-3), 4.93M on seed 3 (4.96M) and 3.66M and 5.43M on seed 1 in two
    # runs of one command (~5.4M); within 5M in 5 runs of 9 in all (one run of two on each
    # seed with today's loss). Record: sandbox/replay.md ("4 then 3", "The preset repeated").
    "atari": {
        "batch_size": 8,
        "learning_rate": 0.0012,
        "lr_hold_fraction": 0.8,
        "total_environment_frames": 20_000_000,
        "initial_replay_ratio": 4.0,
        "initial_replay_frames": 2_000_000,
        "replay_ratio": 3.0,
        "replay_size": 3000,
        "priority_exponent": 0.6,
        "trust_region_threshold": 0.3,
    },
    # CartPole-v1 reaches a mean of 475 over 100 episodes at ~180-250K frames; about 1 run
    # in 10 misses within 300K. Record: sandbox/pong_curve.md ("CartPole").
    "classic": {
        "agent_name": "MLPAgent",
        "num_envs": 16,
        "batch_size": 16,
        "learning_rate": 0.005,
        "baseline_cost": 0.25,
        "discounting": 0.98,
        "total_environment_frames": 300_000,
    },
    # Ape-X and R2D2 (impala/algorithms/; sandbox/value.md has the runs behind these).
    # CartPole: many small updates (B x (1 + r) x 8 = 160 transitions each; 16x fewer
    # updates per frame learned nothing in 300K frames) at lr 1e-3 with the default
    # RMSProp: greedy 500 over 100 episodes at 500K frames on 3 of 3 seeds, where lr 3e-4
    # with R2D2's RMSProp gave 480, 322 and 189 (sandbox/value.md).
    "apex_classic": {
        "algorithm": "apex",
        "agent_name": "MLPAgent",
        "num_envs": 16,
        "batch_size": 4,
        "unroll_length": 10,
        "learning_rate": 0.001,
        "replay_ratio": 4.0,
        "replay_size": 4000,
        "priority_exponent": 0.6,
        "importance_sampling_exponent": 0.4,
        "target_update_frames": 1_600,
        "reward_clipping": "none",
        "total_environment_frames": 500_000,
    },
    # The paper's settings where they fit one learner: B x (1 + r) x 18 = 576 transitions
    # per update (the paper: 512), a target copy every 2500 updates, rewards clipped.
    "apex_atari": {
        "algorithm": "apex",
        "batch_size": 4,
        "learning_rate": 0.00025,
        "decay": 0.95,
        "epsilon": 1e-6,
        "replay_ratio": 3.0,
        "replay_size": 10_000,
        "priority_exponent": 0.6,
        "importance_sampling_exponent": 0.4,
        "target_update_frames": 32_000,
        "lr_hold_fraction": 1.0,
        "total_environment_frames": 10_000_000,
    },
    "apex_image": {
        "algorithm": "apex",
        "batch_size": 4,
        "learning_rate": 0.00025,
        "decay": 0.95,
        "epsilon": 1e-6,
        "replay_ratio": 3.0,
        "replay_size": 10_000,
        "priority_exponent": 0.6,
        "importance_sampling_exponent": 0.4,
        "target_update_frames": 2_880,
        "lr_hold_fraction": 1.0,
        "total_environment_frames": 500_000,
    },
    # R2D2: 80-step sequences (40 burn-in, 40 trained, the next starting 40 steps later),
    # n = 5, gamma 0.997, value rescaling instead of clipping, alpha 0.9, beta 0.6. RMSProp
    # with a small epsilon: at the default 0.01 the mean TD loss's small gradients moved
    # the weights ~30x too little and Recall was not learned in 200K frames; with 1e-6 it
    # is learned by ~35K (sandbox/value.md).
    **{f"r2d2_{family}": {
        "algorithm": "r2d2",
        "agent_name": agent,
        "num_envs": 16,
        "batch_size": 2,
        "unroll_length": 80,
        "burn_in": 40,
        "n_step": 5,
        "discounting": 0.997,
        "learning_rate": 0.0003,
        "decay": 0.95,
        "epsilon": 1e-6,
        "replay_ratio": 3.0,
        "replay_size": 1000,
        "priority_exponent": 0.9,
        "importance_sampling_exponent": 0.6,
        "target_update_frames": target_frames,
        "reward_clipping": "none",
        "total_environment_frames": frames,
    } for family, agent, frames, target_frames in (("classic", "MLPLSTMAgent", 500_000, 4_000),
                                    ("image", "MLPLSTMAgent", 500_000, 4_000),
                                    ("atari", "ResNetLSTMAgent", 10_000_000, 16_000))},
    "none": {},
}
# The preset `--preset=auto` picks, by algorithm and environment family (envs.env_family).
PRESET_OF = {
    ("impala", "atari"): "atari", ("impala", "image"): "atari",
    ("impala", "classic"): "classic",
    ("apex", "atari"): "apex_atari", ("apex", "image"): "apex_image",
    ("apex", "classic"): "apex_classic",
    ("r2d2", "atari"): "r2d2_atari", ("r2d2", "image"): "r2d2_image",
    ("r2d2", "classic"): "r2d2_classic",
}


@dataclass(frozen=True)
class Config:
    # --- what runs -------------------------------------------------------------------
    mode: str = _flag("train", "train, test (play episodes from the checkpoint) or video",
                      ("train", "test", "video"))
    job_name: str = _flag("local", "learner, actor, or local (one learner + --num_actors "
                          "actor processes on this host)", ("learner", "actor", "local"))
    task: int = _flag(0, "actor index (actors) or learner index (learners)")
    preset: str = _flag("none", "defaults for the flags you do not set: auto (by the "
                        "environment: atari for Atari and other image environments, classic "
                        "for vector observations), atari, classic, or none (the IMPALA "
                        "paper's settings)", ("auto", *PRESETS))
    logdir: str = _flag("runs", "parent of run directories")
    run_name: str = _flag("", "run directory under --logdir; default <level>_<agent>, so "
                          "the same command resumes the same run")
    # --- environment -----------------------------------------------------------------
    level_name: str = _flag("PongNoFrameskip-v4", "Gymnasium id (Atari ids get the DeepMind "
                            "pipeline)")
    num_action_repeats: int = _flag(4, "frames per agent step (Atari)")
    width: int = _flag(84, "observation width (Atari)")
    height: int = _flag(84, "observation height (Atari)")
    seed: int = _flag(1, "seed for nets and environments (actors add their task)")
    # --- agent and algorithm ---------------------------------------------------------
    algorithm: str = _flag("impala", "impala (V-trace actor-critic, LASER replay with "
                           "--replay_ratio > 0), apex (distributed prioritized n-step "
                           "dueling double DQN) or r2d2 (recurrent replay, burn-in, value "
                           "rescaling); --preset=auto picks each one's settings", ALGORITHMS)
    agent_name: str = _flag("SimpleConvNetAgent", "SimpleConvNetAgent, ResNetAgent, "
                            "ResNetLSTMAgent or MLPAgent (case-insensitive)")
    batch_size: int = _flag(32, "unrolls per learner update (per learner)")
    unroll_length: int = _flag(20, "agent steps per unroll (T)")
    total_environment_frames: int = _flag(200_000_000, "stop after this many frames over all "
                                          "learners (frames = agent steps x action repeats)")
    target_return: float = _flag(math.inf, "also stop, as finished, once the mean raw return "
                                 "of the last --target_return_episodes episodes (all actors) "
                                 "reaches this")
    target_return_episodes: int = _flag(100, "episodes in --target_return's mean")
    entropy_cost: float = _flag(0.01, "weight of the entropy bonus")
    baseline_cost: float = _flag(0.5, "weight of the baseline loss")
    discounting: float = _flag(0.99, "discount factor gamma")
    reward_clipping: str = _flag("abs_one", "reward clipping for the loss",
                                 REWARD_CLIPPING_MODES)
    passes: int = _flag(1, "optimizer steps per batch, each with V-trace recomputed under the "
                        "current weights (more learning per frame, more learner time)")
    gradients_clipping: float = _flag(40.0, "clip gradients to this global norm after the "
                                      "allreduce; <= 0 disables")
    learning_rate: float = _flag(0.0006, "RMSProp learning rate, annealed linearly to 0 "
                                 "(from where --lr_hold_fraction says)")
    lr_hold_fraction: float = _flag(0.0, "share of --total_environment_frames trained at the "
                                    "full --learning_rate before it anneals linearly to 0 at "
                                    "the end of the budget (0: anneal from the start, as the "
                                    "paper; 1: never anneal)")
    replay_ratio: float = _flag(0.0, "replayed unrolls per fresh one in each update (LASER): an "
                                "update trains on the B fresh unrolls plus replay_ratio x B "
                                "from the learner's replay (fractional values alternate "
                                "between the two nearest counts); 0 turns replay off. Set without "
                                "--initial_replay_*, it holds from the first frame")
    initial_replay_ratio: float = _flag(0.0, "--replay_ratio for the run's first "
                                        "--initial_replay_frames fresh frames (more updates "
                                        "per frame while the policy is poor)")
    initial_replay_frames: int = _flag(0, "fresh frames trained at --initial_replay_ratio "
                                       "before --replay_ratio takes over (0: none)")
    replay_size: int = _flag(10_000, "unrolls each learner's replay holds (the oldest leave "
                             "first); its memory is logged at start")
    priority_exponent: float = _flag(0.0, "alpha of prioritized replay: unrolls are sampled "
                                     "with probability ~ priority^alpha (0: uniform)")
    importance_sampling_exponent: float = _flag(0.4, "beta of prioritized replay: replayed "
                                                "unrolls are weighted by (N P(i))^-beta, "
                                                "normalised by the largest weight")
    trust_region_threshold: float = _flag(0.0, "LASER's trust region: replayed steps whose "
                                          "KL(learner policy || behaviour policy) exceeds "
                                          "this many nats are left out of the loss (0: off)")
    n_step: int = _flag(3, "apex/r2d2: steps of reward before the bootstrap value")
    burn_in: int = _flag(0, "apex/r2d2: steps at the start of each unroll that only warm the "
                         "recurrent state up (no gradient); unrolls then overlap by "
                         "max(burn_in + 1, n_step) steps")
    target_update_frames: int = _flag(32_000, "apex/r2d2: frames (over all learners) between "
                                      "copies of the online network into the target "
                                      "network; every rank copies on the same update")
    actor_epsilon: float = _flag(0.4, "apex/r2d2: environment i of N explores with epsilon "
                                 "actor_epsilon^(1 + actor_epsilon_alpha i / (N - 1))")
    actor_epsilon_alpha: float = _flag(7.0, "apex/r2d2: see --actor_epsilon")
    first_env: int = _flag(-1, "apex/r2d2: index of this actor's first environment among "
                           "the run's (-1: task x num_envs; the frontend sets it)")
    total_envs: int = _flag(0, "apex/r2d2: environments of the whole run (0: num_actors x "
                            "num_envs; the frontend sets it)")
    decay: float = _flag(0.99, "RMSProp decay (alpha)")
    momentum: float = _flag(0.0, "RMSProp momentum")
    epsilon: float = _flag(0.01, "RMSProp epsilon")
    # --- processes and transport -----------------------------------------------------
    learner_host: str = _flag("127.0.0.1:8001", "ip:port the learner binds and its actors "
                              "connect to")
    actor_hosts: str = _flag("", "comma-separated actor ip:ports (informational; kept so "
                             "the original command lines parse)")
    num_actors: int = _flag(2, "actor processes started by --job_name=local")
    num_envs: int = _flag(8, "environments per actor, stepped with one batched forward pass")
    queue_capacity: int = _flag(2, "batches the learner may hold ready; beyond it actors are "
                                "pushed back")
    max_message_mb: float = _flag(64.0, "largest network message accepted, in MiB")
    auth: str = _flag("curve", "curve: CurveZMQ encryption, and a learner admits only holders "
                      "of the run's key file <run_dir>/keys/run.keys; none: anyone who reaches "
                      "a learner's port can feed it and read its weights (trusted networks "
                      "only)", ("curve", "none"))
    learner_device: str = _flag("cpu", "device of the learner", ("cpu", "cuda"))
    learner_threads: int = _flag(2, "torch threads of the learner")
    actor_nice: int = _flag(10, "scheduling niceness of actor processes (0-19): where actors "
                            "share a host with a learner, the learner gets the CPU first")
    allreduce_backend: str = _flag("horovod", "gradient allreduce between learners",
                                   ("horovod", "torch", "none"))
    # --- logs and checkpoints --------------------------------------------------------
    log_interval_s: float = _flag(5.0, "seconds between logs.csv rows and status lines")
    checkpoint_interval_s: float = _flag(600.0, "seconds between checkpoints (and one at exit)")
    test_num_episodes: int = _flag(10, "episodes played by --mode=test")

    def __post_init__(self) -> None:
        if self.preset == "auto":
            raise ValueError("a Config holds a resolved preset; use Config.from_flags for auto")
        problems = [message for message in self._problems() if message]
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
        yield from self._replay_problems()
        yield from self._value_problems()
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
        if not self.trust_region_threshold >= 0:
            yield f"--trust_region_threshold must be >= 0, got {self.trust_region_threshold}"

    def _value_problems(self):
        if self.n_step < 1:
            yield f"--n_step must be >= 1, got {self.n_step}"
        if self.burn_in < 0:
            yield f"--burn_in must be >= 0, got {self.burn_in}"
        if self.target_update_frames < 1:
            yield f"--target_update_frames must be >= 1, got {self.target_update_frames}"
        if not 0.0 <= self.actor_epsilon <= 1.0:
            yield f"--actor_epsilon must be in [0, 1], got {self.actor_epsilon}"
        if self.algorithm != "impala" and self.n_step >= 1 and self.burn_in >= 0:
            overlap = self.value_settings.overlap
            if self.unroll_length + 1 - overlap < 1:
                yield (f"--unroll_length={self.unroll_length} leaves no step to train: "
                       f"unrolls overlap by max(--burn_in + 1, --n_step) = {overlap} steps, "
                       f"so it must be >= {overlap}")

    @property
    def value_settings(self) -> ValueSettings:
        """Ape-X's and R2D2's settings from the flags; each algorithm's module sets its own
        rescaling and priority mix (algorithms/apex.py, r2d2.py)."""
        return ValueSettings(discounting=self.discounting, n_step=self.n_step,
                             burn_in=self.burn_in, reward_clipping=self.reward_clipping,
                             target_update_frames=self.target_update_frames)

    def exploring_envs(self) -> tuple[int, int]:
        """(first, total): this actor's first environment among the run's, and how many
        the run has, for the per-environment epsilons."""
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
    def env_settings(self) -> EnvSettings:
        """How every process of the run creates its environments."""
        from impala.envs import EnvSettings  # gymnasium only where environments are made

        return EnvSettings(self.level_name, self.num_action_repeats, self.width, self.height)

    @property
    def loss_settings(self) -> LossSettings:
        return LossSettings(self.discounting, self.baseline_cost, self.entropy_cost,
                            self.reward_clipping, self.trust_region_threshold)

    def device_for(self, local_rank: int = 0) -> torch.device:
        """The learner's device: `cuda:<local rank>` (one GPU per rank on a host) or cpu."""
        import torch

        return torch.device(f"cuda:{local_rank}" if self.learner_device == "cuda" else "cpu")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_flags(cls, flags: dict[str, Any]) -> Config:
        """The Config of a command line: `flags` are those the user set (name -> value);
        every other flag takes its preset's value, else its default."""
        preset = flags.get("preset", "auto")
        if preset == "auto":
            from impala.envs import env_family  # gymnasium: only when a level is resolved

            level = flags.get("level_name", cls.__dataclass_fields__["level_name"].default)
            algorithm = flags.get("algorithm", cls.__dataclass_fields__["algorithm"].default)
            preset = PRESET_OF[(algorithm, env_family(level))]
        defaults = preset_defaults(preset)
        if "replay_ratio" in flags and not INITIAL_REPLAY_FLAGS & flags.keys():
            # A ratio the user sets holds from the first frame: `--replay_ratio=0` must turn
            # replay off, not leave the preset's initial phase running.
            defaults.update(initial_replay_ratio=0.0, initial_replay_frames=0)
        return cls(**{**defaults, **flags, "preset": preset})

    def to_argv(self, **overrides: Any) -> list[str]:
        """The flags of this Config as `--name=value` for a child process's command line:
        its preset, and every flag whose value differs from that preset's default."""
        values = {**self.to_dict(), **overrides}
        defaults = preset_defaults(values["preset"])
        return [f"--preset={values['preset']}"] + [
            f"--{name}={value}" for name, value in values.items()
            if name != "preset" and value != defaults[name]]


INITIAL_REPLAY_FLAGS = {"initial_replay_ratio", "initial_replay_frames"}

# Flags that are gone, each with what replaced it: an old command line fails with this
# message rather than argparse's bare "unrecognized arguments".
RETIRED_FLAGS = {
    "target_update_interval": (
        "--target_update_interval (updates between target copies) was replaced by "
        "--target_update_frames (frames over all learners between copies), so that the "
        "period does not change with --batch_size, --unroll_length or the number of "
        "learners; one learner's update brings batch_size x (unroll_length + 1 - overlap) "
        "x num_action_repeats frames"),
}


def parse_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected ip:port, got {text!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r} in {text!r}")
    return host, int(port)


def preset_defaults(preset: str) -> dict[str, Any]:
    """Every flag's default under `preset` (atari, classic or none)."""
    base = {f.name: f.default for f in dataclasses.fields(Config)}
    return {**base, **PRESETS[preset], "preset": preset}


def _default_help(name: str, default: Any) -> str:
    by_preset = [f"{preset}: {values[name]}" for preset, values in PRESETS.items()
                 if name in values]
    return f"default: {default}" + (f"; preset {', '.join(by_preset)}" if by_preset else "")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add one `--name` option per Config field, typed, with its help and its default under
    each preset. Unset flags stay None, so presets know which flags the user set."""
    for f in dataclasses.fields(Config):
        kind = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str)
                                                          else f.type.__name__]
        default = "auto" if f.name == "preset" else f.default
        parser.add_argument(
            f"--{f.name}", type=kind, default=None, choices=f.metadata["choices"],
            help=f"{f.metadata['help']} ({_default_help(f.name, default)})",
        )
    for name in RETIRED_FLAGS:
        parser.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)


def config_from_namespace(namespace: argparse.Namespace) -> Config:
    retired = [message for name, message in RETIRED_FLAGS.items()
               if getattr(namespace, name, None) is not None]
    if retired:
        raise ValueError("\n  ".join(retired))
    names = {f.name for f in dataclasses.fields(Config)}
    return Config.from_flags({k: v for k, v in vars(namespace).items()
                              if k in names and v is not None})


def parse_config(argv: list[str] | None = None) -> Config:
    parser = argparse.ArgumentParser(
        prog="experiment.py",
        description="IMPALA learner, actor, or a whole local run (see README).",
    )
    add_config_flags(parser)
    namespace = parser.parse_args(argv)
    try:
        return config_from_namespace(namespace)
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits
