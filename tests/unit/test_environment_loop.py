"""The one environment loop, on a real game with lives (Breakout): a lost life is an episode
start for the agent (its recurrent state starts afresh) but not for the game, and evaluation,
which steps through the same loop, shows the agent lost lives exactly as the actor does."""

from __future__ import annotations

import numpy as np
import torch

from impala.config import Config
from impala.environment_loop import EnvironmentLoop
from impala.envs import create_env, env_info
from impala.evaluate import play_episodes
from impala.nets import build_agent
from impala.registry import build_algorithm

GAME = "BreakoutNoFrameskip-v4"  # 5 lives
LIVES = 5


def test_a_lost_life_is_an_episode_start_for_the_agent_but_the_game_goes_on():
    cfg = Config(level_name=GAME)
    loop = EnvironmentLoop([create_env(cfg.env_config)])
    step = loop.reset([3])
    assert step.done.all() and step.episode_start.all()
    rng = np.random.default_rng(0)
    lives_lost = 0
    while not loop.finished[0]:
        step = loop.step(rng.integers(0, 4, size=1))
        if step.done[0] and not step.episode_start[0]:
            lives_lost += 1
    loop.close()
    assert lives_lost == LIVES - 1  # the last life's end is the game's end
    assert step.done[0] and step.episode_start[0]  # and the game was reset


def test_evaluation_shows_the_agent_each_lost_life_as_training_does():
    cfg = Config(level_name=GAME, agent_name="SimpleConvNetLSTMAgent")
    torch.manual_seed(0)
    env = create_env(cfg.env_config)
    model = build_agent(cfg.agent_name, env_info(env, cfg.env_config), build_algorithm(cfg))
    dones = []
    model.register_forward_pre_hook(lambda _module, args: dones.append(bool(args[3].any())))
    [(_, length)] = play_episodes(model.eval(), build_algorithm(cfg), [env], [5])
    assert len(dones) == length  # one forward pass per agent step
    assert sum(dones) == 1 + (LIVES - 1)  # the game's start, then each life lost
