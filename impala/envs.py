"""Environment creation: any Gymnasium id, with the DeepMind pipeline for Atari games.

Environments fall in three families, which also pick the training preset (config.py):
`atari` (ALE ids), `image` (any other environment whose observation is a 2-D uint8 frame,
such as the test environment `impala/DelayedCue-v0`: 4 stacked frames, sent once each
like Atari's) and `classic` (vector observations: CartPole and friends, as they are).

Atari pipeline (Gymnasium's own wrappers where they do the job):
  up to 30 no-op starts, action repeat with a max over the last two frames, grayscale
  resized to width x height (AtariPreprocessing) -> FIRE on reset for games that need it
  -> a life lost is flagged in `info["life_lost"]` (the learner treats it as an episode end;
  the game itself goes on) -> whole-game statistics in `info["episode"]` -> 4 stacked
  frames, channel-first uint8 `[4, height, width]`.

Episode statistics (`info["episode"]["r"]`, `["l"]`) are the raw, unclipped game score
and the number of agent steps over all lives, so they compare with published numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, RecordEpisodeStatistics

from impala import testenvs

FRAME_STACK = 4
NOOP_MAX = 30

_ale_registered = False


def _register_ale() -> None:
    global _ale_registered
    if not _ale_registered:
        import ale_py

        gym.register_envs(ale_py)
        testenvs.register()
        _ale_registered = True


def is_atari(level_name: str) -> bool:
    """True for ids served by ALE (PongNoFrameskip-v4, ALE/Pong-v5, ...)."""
    _register_ale()
    try:
        spec = gym.spec(level_name)
    except gym.error.Error as exc:
        raise ValueError(f"unknown level_name {level_name!r}: {exc}") from None
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    return entry.startswith("ale_py")


def _is_image(space: gym.Space) -> bool:
    return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
            and len(space.shape) == 2)


def env_family(level_name: str) -> str:
    """`atari`, `image` or `classic` (see the module docstring); ValueError if unknown."""
    if is_atari(level_name):
        return "atari"
    env = gym.make(level_name)
    try:
        return "image" if _is_image(env.observation_space) else "classic"
    finally:
        env.close()


class FireOnReset(gym.Wrapper):
    """Press FIRE after reset in games that stand still until it is pressed (Breakout...)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        self.fire_action = meanings.index("FIRE")

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(self.fire_action)
        if terminated or truncated:  # practically never, but never hand out a finished game
            obs, info = self.env.reset(**kwargs)
        return obs, info


class LifeLossSignal(gym.Wrapper):
    """Set `info["life_lost"]` on the step where a life is lost while the game goes on.

    The actor reports such a step as an episode end to the learner during training (the
    DeepMind "end of life as end of episode" heuristic) without resetting the game.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.lives = int(info.get("lives", 0))
        info["life_lost"] = False
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = int(info.get("lives", 0))
        info["life_lost"] = bool(lives < self.lives and not (terminated or truncated))
        self.lives = lives
        return obs, reward, terminated, truncated, info


@dataclass(frozen=True)
class EnvConfig:
    level_name: str
    num_action_repeats: int = 4
    width: int = 84
    height: int = 84


def create_env(config: EnvConfig, seed: int | None = None,
               render_mode: str | None = None) -> gym.Env:
    """Make one environment; see the module docstring for what Atari ids get."""
    if is_atari(config.level_name):
        env = _create_atari(config, render_mode)
    else:
        env = gym.make(config.level_name, render_mode=render_mode)
        env = RecordEpisodeStatistics(env)
        if _is_image(env.observation_space):
            env = FrameStackObservation(env, FRAME_STACK)
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


def _create_atari(config: EnvConfig, render_mode: str | None) -> gym.Env:
    if config.num_action_repeats < 1:
        raise ValueError(f"num_action_repeats must be >= 1, got {config.num_action_repeats}")
    # The ALE must not skip frames itself: AtariPreprocessing does the repeat and max-pool.
    env = gym.make(config.level_name, frameskip=1, render_mode=render_mode)
    env = AtariPreprocessing(
        env,
        noop_max=NOOP_MAX,
        frame_skip=config.num_action_repeats,
        screen_size=(config.width, config.height),
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireOnReset(env)
    env = LifeLossSignal(env)
    env = RecordEpisodeStatistics(env)
    return FrameStackObservation(env, FRAME_STACK)


def frame_stack_of(level_name: str) -> int:
    """Frames per observation that travel once each (Atari and other image environments),
    or 0 (observations as they are)."""
    return 0 if env_family(level_name) == "classic" else FRAME_STACK


@dataclass(frozen=True)
class EnvInfo:
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    num_actions: int
    frames_per_step: int  # the action repeat for Atari, 1 otherwise
    frame_stack: int  # frames per observation for Atari (sent once each), 0 otherwise


def random_play_observations(level_name: str, count: int, seed: int) -> np.ndarray:
    """[count, *obs] observations, one after each of `count` random actions (a finished
    episode is reset and play goes on); for checking what a network makes of real screens."""
    env = create_env(EnvConfig(level_name), seed=seed)
    env.reset()
    observations = []
    try:
        for _ in range(count):
            observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
            observations.append(np.asarray(observation))
            if terminated or truncated:
                env.reset()
    finally:
        env.close()
    return np.stack(observations)


def describe_env(config: EnvConfig) -> EnvInfo:
    """Observation shape/dtype and action count, so learners can build nets without stepping."""
    env = create_env(config)
    try:
        return env_info(env, config)
    finally:
        env.close()


def env_info(env: gym.Env, config: EnvConfig) -> EnvInfo:
    """What an environment made from `config` looks like to an agent and on the wire."""
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ValueError(f"{config.level_name}: IMPALA here needs a discrete action space, "
                         f"got {env.action_space}")
    space = env.observation_space
    return EnvInfo(
        observation_shape=tuple(space.shape),
        observation_dtype=np.dtype(space.dtype),
        num_actions=int(env.action_space.n),
        frames_per_step=config.num_action_repeats if is_atari(config.level_name) else 1,
        frame_stack=frame_stack_of(config.level_name),
    )
