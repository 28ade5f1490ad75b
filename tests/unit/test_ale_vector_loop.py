"""ale-py's vector environment behind the environment loop (impala/ale_vector_loop.py) gives
the agent what the Gymnasium pipeline gives it: checked step by step against the
Gymnasium loop on a real game with lives, and for which ids it is chosen."""

from __future__ import annotations

import numpy as np
import pytest

from impala import envs
from impala.ale_vector_loop import AtariVectorLoop, ale_settings, rom_name, uses_ale_vector
from impala.environment_loop import EnvironmentLoop
from impala.envs import EnvConfig, create_env

# 3 lives and no FIRE: with no-op starts off, both pipelines play the same deterministic
# game (their FIRE presses at reset fall on different frames, bench/ale_vector.py).
GAME = "MsPacmanNoFrameskip-v4"


def test_every_step_of_a_whole_game_matches_the_gymnasium_pipeline(monkeypatch):
    monkeypatch.setattr(envs, "NOOP_MAX", 0)
    config = EnvConfig(GAME)
    theirs = EnvironmentLoop([create_env(config, seed=0)])
    ours = AtariVectorLoop(config, 1)
    expected, got = theirs.reset([0]), ours.reset([0])
    rng = np.random.default_rng(0)
    steps = lives_lost = 0
    while not theirs.finished[0]:
        for field in ("observation", "reward", "done", "last_action", "episode_start"):
            np.testing.assert_array_equal(getattr(got, field), getattr(expected, field),
                                          err_msg=f"{field} at step {steps}")
        actions = rng.integers(0, ours.action_count, size=1)
        expected, got = theirs.step(actions), ours.step(actions)
        steps += 1
        lives_lost += int(expected.done[0] and not expected.episode_start[0])
    assert ours.finished == theirs.finished  # the game's raw score and length
    assert lives_lost == 2 and got.episode_start[0]  # its lives, then a new game
    theirs.close()
    ours.close()


def test_a_stack_is_the_last_four_frames_and_a_new_game_starts_with_copies_of_its_first():
    loop = AtariVectorLoop(EnvConfig("BreakoutNoFrameskip-v4"), 2)
    previous = loop.reset([1, 2])
    assert (previous.observation == previous.observation[:, :1]).all()
    rng = np.random.default_rng(1)
    new_games = 0
    while new_games < 2:
        step = loop.step(rng.integers(0, loop.action_count, size=2))
        for i in range(2):
            if step.episode_start[i]:
                new_games += 1
                assert (step.observation[i] == step.observation[i, :1]).all()
            else:
                np.testing.assert_array_equal(step.observation[i, :-1],
                                              previous.observation[i, 1:])
        previous = step
    assert [len(games) for games in loop.finished] != [0, 0]
    loop.close()


def test_the_ids_it_serves_and_a_clear_refusal_for_the_rest():
    assert ale_settings("ALE/BattleZone-v5") == {
        "game": "battle_zone", "repeat_action_probability": 0.25,
        "full_action_space": False, "max_num_frames_per_episode": 108_000}
    assert ale_settings("PongNoFrameskip-v4")["repeat_action_probability"] == 0.0
    assert ale_settings("CartPole-v1") is None
    assert rom_name("NameThisGame") == "name_this_game"
    assert uses_ale_vector("auto", "ALE/Qbert-v5")
    assert not uses_ale_vector("auto", "CartPole-v1")
    assert not uses_ale_vector("gymnasium", "ALE/Qbert-v5")
    with pytest.raises(ValueError, match="'CartPole-v1' is not an Atari id"):
        uses_ale_vector("ale_vector", "CartPole-v1")
