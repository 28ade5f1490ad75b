"""ale-py's own vector environment (`AtariVectorEnv`: C++ threads doing the DeepMind
preprocessing) behind the environment loop's interface, for an actor's Atari games
(`--env_backend`).

It follows the rules of impala/environment_loop.py and gives the agent what the Gymnasium
pipeline of impala/envs.py gives it, game for game:
- the ALE settings of the level's Gymnasium id (sticky actions, the action set, the frame
  limit of a game), the action repeat with a max over the last two frames, up to 30 no-op
  starts, FIRE on reset, grayscale frames of width x height;
- 4 stacked frames, padded with copies of the reset frame as Gymnasium's
  FrameStackObservation pads them (the stacks are built here, from single frames, so that
  they are exactly the stacks the learner rebuilds from the frames sent once each);
- a whole game (all lives) is an episode with its raw score and length in agent steps; a
  life lost while the game goes on sets `done` without a reset.

The single frames are pixel-identical with the Gymnasium pipeline's; the moment of the
FIRE press at reset differs (bench/ale_vector.py measures both, and what it saves).
"""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np

from impala import envs
from impala.environment_loop import EnvironmentLoop, EnvStep
from impala.envs import FRAME_STACK, EnvConfig, create_env, is_atari

# The Gymnasium id's ALE settings this backend can reproduce; an id with others (a game
# mode, a difficulty, RAM observations) is served by the Gymnasium pipeline.
SUPPORTED_SETTINGS = {"game", "obs_type", "repeat_action_probability", "full_action_space",
                      "frameskip", "max_num_frames_per_episode"}


def ale_settings(level_name: str) -> dict | None:
    """The ALE settings of an Atari id, or None where AtariVectorEnv cannot reproduce them."""
    if not is_atari(level_name):
        return None
    spec = gym.spec(level_name)
    settings = dict(spec.kwargs)
    if not set(settings) <= SUPPORTED_SETTINGS or settings.get("obs_type", "rgb") != "rgb":
        return None
    max_frames = settings.get("max_num_frames_per_episode", 108_000)
    if spec.max_episode_steps is not None:  # a TimeLimit over single frames (frameskip 1)
        max_frames = min(max_frames, spec.max_episode_steps)
    return {"game": settings["game"],  # the ROM's name already: battle_zone
            "repeat_action_probability": settings.get("repeat_action_probability", 0.0),
            "full_action_space": settings.get("full_action_space", False),
            "max_num_frames_per_episode": max_frames}


def rom_name(game: str) -> str:
    """ale-py's ROM name: `battle_zone` for Gymnasium's `BattleZone` (or `battle_zone`)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", game).lower()


def uses_ale_vector(backend: str, level_name: str) -> bool:
    """Whether `--env_backend` (auto, gymnasium, ale_vector) puts an actor's games of
    `level_name` on AtariVectorEnv; ValueError where ale_vector cannot serve the level."""
    if backend == "gymnasium":
        return False
    served = ale_settings(level_name) is not None
    if backend == "ale_vector" and not served:
        raise ValueError(f"--env_backend=ale_vector: {level_name!r} is not an Atari id that "
                         f"ale-py's vector environment can serve; use --env_backend=gymnasium")
    return served


class AtariVectorLoop:
    """N Atari games stepped together by one AtariVectorEnv (one C++ worker thread), with the
    interface of environment_loop.EnvironmentLoop: `finished[i]` lists environment i's
    finished games as (return, length in agent steps) until the caller takes them."""

    def __init__(self, config: EnvConfig, num_envs: int, seeds: list[int] | None = None
                 ) -> None:
        """`seeds[i]` seeds game i's sticky actions and no-op starts, as create_env's seed
        does for a Gymnasium environment."""
        from ale_py.vector_env import AtariVectorEnv

        settings = ale_settings(config.level_name)
        if settings is None:
            raise ValueError(f"{config.level_name!r}: not served by AtariVectorEnv")
        self.env = AtariVectorEnv(
            num_envs=num_envs, num_threads=1, batch_size=num_envs,
            autoreset_mode="SameStep",  # a finished game's step shows the next game's start
            img_height=config.height, img_width=config.width, grayscale=True, stack_num=1,
            frameskip=config.num_action_repeats, maxpool=True, noop_max=envs.NOOP_MAX,
            episodic_life=False, reward_clipping=False, use_fire_reset=True, **settings)
        self.finished: list[list[tuple[float, int]]] = [[] for _ in range(num_envs)]
        self.stacks = np.zeros((num_envs, FRAME_STACK, config.height, config.width), np.uint8)
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        self.lives = np.zeros(num_envs, np.int64)
        if seeds is not None:
            self.env.reset(seed=np.asarray(seeds))

    def __len__(self) -> int:
        return len(self.finished)

    @property
    def action_count(self) -> int:
        return int(self.env.single_action_space.n)

    def reset(self, seeds: list[int] | None = None) -> EnvStep:
        """Every game's first step (environment i seeded with `seeds[i]` where given)."""
        n = len(self)
        frames, info = self.env.reset(seed=None if seeds is None else np.asarray(seeds))
        self._push(frames, np.ones(n, bool))
        self.returns[:] = 0.0
        self.lengths[:] = 0
        self.lives[:] = info["lives"]
        return EnvStep(self.stacks.copy(), np.zeros(n, np.float32), np.ones(n, bool),
                       np.zeros(n, np.int64), np.ones(n, bool))

    def step(self, actions: np.ndarray, previous: EnvStep | None = None,
             playing: np.ndarray | None = None, on_step: object = None) -> EnvStep:
        """Step every game with its action [N]; a finished game is reset in the same step."""
        if playing is not None or on_step is not None:
            raise ValueError("AtariVectorLoop steps every game each step and renders none: "
                             "evaluation and video use the Gymnasium pipeline")
        actions = np.asarray(actions).astype(np.int64)
        frames, rewards, terminated, truncated, info = self.env.step(actions.astype(np.int32))
        ended = terminated | truncated
        self.returns += rewards
        self.lengths += 1
        for i in np.flatnonzero(ended):
            self.finished[i].append((float(self.returns[i]), int(self.lengths[i])))
        self.returns[ended] = 0.0
        self.lengths[ended] = 0
        lives = info["lives"].astype(np.int64)
        life_lost = lives < self.lives  # a new game has all its lives: never a loss
        self.lives[:] = lives
        self._push(frames, ended)
        return EnvStep(self.stacks.copy(), rewards.astype(np.float32), ended | life_lost,
                       actions, ended.copy())

    def _push(self, frames: np.ndarray, reset: np.ndarray) -> None:
        """Shift each stack by the new frames [N, 1, H, W]; a reset game's stack is filled
        with copies of its first frame."""
        self.stacks[:, :-1] = self.stacks[:, 1:]
        self.stacks[:, -1] = frames[:, 0]
        self.stacks[reset] = frames[reset]  # [R, 1, H, W] broadcast over the stack

    def close(self) -> None:
        self.env.close()


def actor_loop(config: EnvConfig, backend: str, seeds: list[int]
               ) -> EnvironmentLoop | AtariVectorLoop:
    """The loop that steps an actor's games, one per seed, on `--env_backend`."""
    if uses_ale_vector(backend, config.level_name):
        return AtariVectorLoop(config, len(seeds), seeds)
    return EnvironmentLoop([create_env(config, seed=seed) for seed in seeds])
