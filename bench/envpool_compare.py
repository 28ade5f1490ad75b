"""Whether EnvPool would pay as the actors' environment backend: core-milliseconds per Pong
agent step, one process, EnvPool's C++ pipeline (its own thread, N environments batched)
against this toolkit's ALE + Gymnasium wrappers (one environment at a time, as an actor
steps them), with the same DeepMind settings (action repeat 4 with a max over the last two
frames, 30 no-op starts, FIRE on reset, 84x84 grayscale, 4 stacked frames, no sticky
actions). EnvPool is not a dependency: run this with a Python that has it, e.g.

  python3.11 -m venv /tmp/envpool && /tmp/envpool/bin/pip install envpool==1.2.5 \\
      gymnasium ale-py opencv-python-headless numpy
  PYTHONPATH=. /tmp/envpool/bin/python bench/envpool_compare.py [--seconds=10] [--envs=8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from impala.envs import EnvConfig, create_env


def envpool_ms_per_step(envs: int, seconds: float) -> float:
    import envpool

    env = envpool.make("Pong-v5", env_type="gymnasium", num_envs=envs, batch_size=envs,
                       num_threads=1, repeat_action_probability=0.0, noop_max=30,
                       frame_skip=4, stack_num=4, img_height=84, img_width=84,
                       gray_scale=True, episodic_life=False, reward_clip=False,
                       use_fire_reset=True, seed=1)
    observation, _ = env.reset()
    assert observation.shape == (envs, 4, 84, 84) and observation.dtype == np.uint8
    rng = np.random.default_rng(0)
    steps, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.step(rng.integers(0, 6, envs))
        steps += envs
    return 1000.0 * (time.process_time() - cpu0) / steps


def toolkit_ms_per_step(envs: int, seconds: float, level: str = "PongNoFrameskip-v4"
                        ) -> float:
    """Core-ms per agent step of `envs` of this toolkit's environments of `level`, stepped
    one at a time with random actions as an actor steps them."""
    pool = [create_env(EnvConfig(level), seed=i) for i in range(envs)]
    for env in pool:
        env.reset()
    rng = np.random.default_rng(0)
    actions = pool[0].action_space.n
    steps, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for env in pool:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(0, actions)))
            if terminated or truncated:
                env.reset()
            steps += 1
    return 1000.0 * (time.process_time() - cpu0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--envs", type=int, default=8)
    args = parser.parse_args()
    try:
        import envpool  # noqa: F401
    except ImportError:
        raise SystemExit("envpool is not installed here; see this script's docstring") from None
    toolkit = toolkit_ms_per_step(args.envs, args.seconds)
    pool = envpool_ms_per_step(args.envs, args.seconds)
    print(f"core-ms per agent step, {args.envs} environments: this toolkit {toolkit:.3f}, "
          f"EnvPool {pool:.3f} ({toolkit / pool:.2f}x)")


if __name__ == "__main__":
    main()
