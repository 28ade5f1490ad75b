"""What ale-py's own vector environment (`ale_py.vector_env.AtariVectorEnv`, C++ threads
doing the DeepMind preprocessing) saves an actor per frame, as `--env_backend=ale_vector`
runs it.

Measured side by side in the same minutes:
- **the same frames**: an actor sends each frame once (the learner rebuilds the stacks), so
  what must match is the single preprocessed frame. With sticky actions and no-op starts
  off (both deterministic), both pipelines play the same random actions from the same
  reset, and every frame is compared pixel by pixel: once without pressing FIRE at reset,
  once with each pipeline's own FIRE reset;
- **the cost**: core-milliseconds per agent step (the process's CPU time, its threads
  included, over the steps made) of the loop an actor steps its N games through, on each
  backend (`gymnasium`: one environment at a time through envs.py's wrappers;
  `ale_vector`: impala/ale_vector_loop.py), under the ALE v5 protocol the suite trains on
  (sticky actions 0.25, 30 no-op starts);
- **what it saves the whole actor**: in the same rounds, the actor's other large cost (its
  batched forward pass and choice of actions, bench/inference.py at batch N) is measured,
  and the actor's core-ms per agent step on each backend is their sum. The unroll writer
  and the wire are left out (a few percent of an actor's samples).

  .venv/bin/python bench/ale_vector.py [--game=Breakout] [--envs=8] [--seconds=10] [--rounds=3]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
from ale_py.vector_env import AtariVectorEnv
from gymnasium.wrappers import AtariPreprocessing
from inference import measure as forward_pass

from impala.ale_vector_loop import actor_loop, rom_name
from impala.envs import EnvConfig, FireOnReset, describe_env


def toolkit_deterministic(game: str, fire_reset: bool) -> gym.Env:
    """This toolkit's Atari pipeline (envs.py) up to the frame an actor sends, with sticky
    actions and no-op starts off."""
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0)
    env = AtariPreprocessing(env, noop_max=0, frame_skip=4, screen_size=84,
                             terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    return FireOnReset(env) if fire_reset else env


def vector_deterministic(game: str, fire_reset: bool) -> AtariVectorEnv:
    """One AtariVectorEnv game giving single frames [1, 1, 84, 84], with sticky actions and
    no-op starts off."""
    return AtariVectorEnv(game=rom_name(game), num_envs=1, num_threads=1,
                          repeat_action_probability=0.0, noop_max=0, stack_num=1,
                          episodic_life=False, reward_clipping=False,
                          use_fire_reset=fire_reset)


def compare_frames(game: str, steps: int, fire_reset: bool) -> tuple[int, int, float]:
    """(frames compared, frames that differ, largest pixel difference) over one
    deterministic game played with the same random actions by both pipelines."""
    ours = toolkit_deterministic(game, fire_reset)
    theirs = vector_deterministic(game, fire_reset)
    mine, _ = ours.reset(seed=0)
    other, _ = theirs.reset(seed=0)
    rng = np.random.default_rng(0)
    differing, largest, compared = 0, 0.0, 0
    for _ in range(steps):
        gap = np.abs(np.asarray(mine, np.int16) - np.asarray(other[0, 0], np.int16))
        differing += int(gap.max() > 0)
        largest = max(largest, float(gap.max()))
        compared += 1
        action = int(rng.integers(0, ours.action_space.n))
        mine, _, terminated, truncated, _ = ours.step(action)
        other, _, vector_end, vector_cut, _ = theirs.step(np.array([action]))
        if terminated or truncated or vector_end[0] or vector_cut[0]:
            break
    ours.close()
    theirs.close()
    return compared, differing, largest


def loop_ms_per_step(game: str, backend: str, envs: int, seconds: float) -> float:
    """Core-ms per agent step of the loop an actor steps its games through on `backend`
    (impala/ale_vector_loop.actor_loop: stacks, lives and episode records included),
    under the suite's protocol, with random actions."""
    config = EnvConfig(f"ALE/{game}-v5")
    loop = actor_loop(config, backend, list(range(envs)))
    step = loop.reset()
    rng = np.random.default_rng(0)
    actions = describe_env(config).num_actions
    steps, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step = loop.step(rng.integers(0, actions, envs), step)
        steps += envs
    loop.close()
    return 1000.0 * (time.process_time() - cpu0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="alternating pairs")
    parser.add_argument("--compare_steps", type=int, default=2000)
    args = parser.parse_args()
    for fire_reset in (False, True):
        compared, differing, largest = compare_frames(args.game, args.compare_steps,
                                                      fire_reset)
        print(f"frames, FIRE at reset {'on' if fire_reset else 'off'}: {differing} of "
              f"{compared} differ (largest pixel difference {largest:.0f})", flush=True)
    for round_ in range(args.rounds):
        ours = loop_ms_per_step(args.game, "gymnasium", args.envs, args.seconds)
        theirs = loop_ms_per_step(args.game, "ale_vector", args.envs, args.seconds)
        forward = forward_pass("SimpleConvNetAgent", args.envs,
                               args.seconds)["core_ms_per_observation"]
        print(f"round {round_ + 1}: toolkit {ours:.3f} core-ms per agent step, "
              f"AtariVectorEnv {theirs:.3f} ({ours / theirs:.2f}x); forward pass "
              f"{forward:.3f}: the actor {ours + forward:.3f} against "
              f"{theirs + forward:.3f} ({(ours + forward) / (theirs + forward):.2f}x)",
              flush=True)


if __name__ == "__main__":
    main()
