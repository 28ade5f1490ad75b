"""`--mode=test` and `--mode=video`: play the checkpoint's policy on fresh environments."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from impala import checkpoint
from impala.algorithm import Algorithm
from impala.assembly import AgentParts, assemble
from impala.config import Config
from impala.environment_loop import EnvironmentLoop, agent_step
from impala.envs import create_env, env_info
from impala.nets import Agent

log = logging.getLogger("evaluate")


def play_agent(cfg: Config, trained: bool = True) -> tuple[AgentParts, int]:
    """The run's agent for playing (eval mode, with its algorithm): the checkpoint's weights
    and the frames it was trained on, or with `trained=False` fresh weights and 0."""
    path = cfg.run_dir / checkpoint.CHECKPOINT_NAME
    state = checkpoint.load(path, cfg.to_dict()) if trained else None
    env = create_env(cfg.env_config)
    parts = assemble(cfg, env_info(env, cfg.env_config), training=False)
    env.close()
    frames = 0
    if state is not None:
        checkpoint.restore_model(parts.model, state, path, parts.algorithm.old_head_names)
        frames = int(state["counters"]["frames"])
    parts.model.eval()
    return parts, frames


def load_policy(cfg: Config) -> tuple[AgentParts, Path]:
    """The checkpoint's agent (in eval mode, with its algorithm) and its run directory."""
    parts, frames = play_agent(cfg)
    log.info("loaded %s (%d frames of training)", cfg.run_dir / checkpoint.CHECKPOINT_NAME,
             frames)
    return parts, cfg.run_dir


# Episodes played side by side by --mode=test: one batched forward per step instead of one
# per episode (100 CartPole episodes: 25 s one at a time, a few seconds side by side).
PARALLEL_EPISODES = 25


def play_episodes(model: Agent, algorithm: Algorithm, envs: list, seeds: list[int],
                  on_step=None) -> list[tuple[float, int]]:
    """Play one whole game (all lives) in each of `envs` (reset with its seed), side by side
    through the environment loop (lost lives as training sees them), with the algorithm's
    evaluation action; returns each game's raw return and length in agent steps, in order.
    A finished game's environment stands still while the others play, and its row keeps
    being computed (and ignored), so the core state keeps its [.., B, ..] shape."""
    loop = EnvironmentLoop(envs)
    step = loop.reset(seeds)
    core = model.initial_state(len(envs))
    playing = np.ones(len(envs), bool)
    while playing.any():
        output, core = agent_step(model, step, core)
        actions = algorithm.evaluation_action(output.heads)[0].numpy()  # [B]
        step = loop.step(actions, step, playing, on_step)
        playing = np.array([not finished for finished in loop.finished])
    return [finished[0] for finished in loop.finished]


def test(cfg: Config) -> tuple[float, float]:
    """Play --test_num_episodes episodes (seeds seed, seed+1, ...), PARALLEL_EPISODES at a
    time; print each and return the mean and std of the return."""
    parts, _ = load_policy(cfg)
    model, algorithm = parts.model, parts.algorithm
    total = cfg.test_num_episodes
    returns: list[float] = []
    for first in range(0, total, PARALLEL_EPISODES):
        count = min(PARALLEL_EPISODES, total - first)
        envs = [create_env(cfg.env_config) for _ in range(count)]
        seeds = [cfg.seed + first + i for i in range(count)]
        for i, (episode_return, length) in enumerate(play_episodes(model, algorithm, envs,
                                                                   seeds)):
            returns.append(episode_return)
            print(f"episode {first + i + 1}/{total}: return {episode_return:g}, "
                  f"{length} steps", flush=True)
        for env in envs:
            env.close()
    mean, std = float(np.mean(returns)), float(np.std(returns))
    print(f"mean return {mean:.2f} +- {std:.2f} over {len(returns)} episodes", flush=True)
    return mean, std


def video(cfg: Config) -> Path:
    """Write an mp4 of one episode beside the checkpoint."""
    import cv2

    parts, run_dir = load_policy(cfg)
    env = create_env(cfg.env_config, render_mode="rgb_array")
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

    [(episode_return, length)] = play_episodes(parts.model, parts.algorithm, [env],
                                               [cfg.seed], on_step=write_frame)
    if writer is not None:
        writer.release()
    env.close()
    print(f"wrote {path}: return {episode_return:g}, {length} steps", flush=True)
    return path
