"""`--mode=test` and `--mode=video`: play the checkpoint's policy on fresh environments."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from impala import checkpoint
from impala.algorithms import Algorithm, build_algorithm
from impala.config import Config
from impala.envs import create_env, env_info
from impala.nets import Agent

log = logging.getLogger("evaluate")


def load_policy(cfg: Config) -> tuple[Agent, Path]:
    run_dir = cfg.run_dir
    path = run_dir / checkpoint.CHECKPOINT_NAME
    state = checkpoint.load(path, cfg.to_dict())
    env = create_env(cfg.env_settings)
    model = build_algorithm(cfg).build_agent(cfg.agent_name, env_info(env, cfg.env_settings))
    env.close()
    checkpoint.restore_model(model, state, path)
    model.eval()
    log.info("loaded %s (%d frames of training)", path, state["counters"]["frames"])
    return model, run_dir


@torch.no_grad()
def play_episode(model: Agent, algorithm: Algorithm, env, seed: int, on_step=None
                 ) -> tuple[float, int]:
    """Play one whole game (all lives) with the algorithm's evaluation action (IMPALA:
    sampled from the policy; Ape-X and R2D2: greedy in Q); returns its raw return and
    length in agent steps."""
    obs, _ = env.reset(seed=seed)
    core = model.initial_state(1)
    last_action, reward, done = 0, 0.0, True
    while True:
        output, core = model(torch.from_numpy(np.asarray(obs)[None, None]),
                             torch.tensor([[last_action]]), torch.tensor([[reward]]),
                             torch.tensor([[done]]), core)
        last_action = int(algorithm.evaluation_action(output)[0, 0])
        obs, reward, terminated, truncated, info = env.step(last_action)
        done = False
        if on_step is not None:
            on_step(env)
        if terminated or truncated:
            return float(info["episode"]["r"]), int(info["episode"]["l"])


def test(cfg: Config) -> tuple[float, float]:
    """Play --test_num_episodes episodes; print and return the mean and std of the return."""
    model, _ = load_policy(cfg)
    env = create_env(cfg.env_settings)
    returns = []
    for episode in range(cfg.test_num_episodes):
        episode_return, length = play_episode(model, build_algorithm(cfg), env,
                                              seed=cfg.seed + episode)
        returns.append(episode_return)
        print(f"episode {episode + 1}/{cfg.test_num_episodes}: return {episode_return:g}, "
              f"{length} steps", flush=True)
    env.close()
    mean, std = float(np.mean(returns)), float(np.std(returns))
    print(f"mean return {mean:.2f} +- {std:.2f} over {len(returns)} episodes", flush=True)
    return mean, std


def video(cfg: Config) -> Path:
    """Write an mp4 of one episode beside the checkpoint."""
    import cv2

    model, run_dir = load_policy(cfg)
    env = create_env(cfg.env_settings, render_mode="rgb_array")
    path = run_dir / "video.mp4"
    writer = None

    def write_frame(env_) -> None:
        nonlocal writer
        frame = env_.render()
        if writer is None:
            height, width = frame.shape[:2]
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30,
                                     (width, height))
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))

    episode_return, length = play_episode(model, build_algorithm(cfg), env, seed=cfg.seed,
                                          on_step=write_frame)
    if writer is not None:
        writer.release()
    env.close()
    print(f"wrote {path}: return {episode_return:g}, {length} steps", flush=True)
    return path
