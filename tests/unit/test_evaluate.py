"""--mode=test plays its episodes side by side: each must come out as if played alone."""

from __future__ import annotations

import pytest
import torch

from impala.config import Config
from impala.envs import create_env, env_info
from impala.evaluate import play_episodes
from impala.nets import build_agent
from impala.registry import build_algorithm


@pytest.mark.parametrize("algorithm,agent", [("apex", "MLPAgent"), ("r2d2", "MLPLSTMAgent")])
def test_episodes_side_by_side_end_as_each_would_alone(algorithm, agent):
    """Greedy play is deterministic given the seed, so a batch of five games (of different
    lengths: rows finish at different steps, the LSTM's state is per row) must give the
    same return and length per game as five games played one at a time."""
    cfg = Config(level_name="CartPole-v1", agent_name=agent, algorithm=algorithm)
    torch.manual_seed(0)
    env = create_env(cfg.env_config)
    model = build_agent(agent, env_info(env, cfg.env_config), build_algorithm(cfg)).eval()
    seeds = list(range(10, 15))
    together = play_episodes(model, build_algorithm(cfg),
                             [create_env(cfg.env_config) for _ in seeds], seeds)
    alone = [play_episodes(model, build_algorithm(cfg), [env], [seed])[0] for seed in seeds]
    assert together == alone
    assert len({length for _, length in alone}) > 1  # the games did end at different steps
