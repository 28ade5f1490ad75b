"""The Atari pipeline on real ALE games (ROMs ship inside the ale-py wheel)."""

import numpy as np
import pytest

from impala.envs import EnvConfig, FireOnReset, create_env, describe_env, is_atari


def find_wrapper(env, kind):
    while env is not None:
        if isinstance(env, kind):
            return env
        env = getattr(env, "env", None)
    return None


@pytest.mark.parametrize("level", ["PongNoFrameskip-v4", "ALE/Pong-v5"])
def test_atari_observation_is_stacked_grayscale_uint8(level):
    env = create_env(EnvConfig(level), seed=0)
    obs, _ = env.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    obs, *_ = env.step(0)
    assert obs.shape == (4, 84, 84)
    env.close()


def test_width_and_height_flags():
    info = describe_env(EnvConfig("PongNoFrameskip-v4", width=64, height=48))
    assert info.observation_shape == (4, 48, 64)
    assert info.frames_per_step == 4
    assert info.num_actions == 6


def test_non_atari_ids_work_unchanged():
    assert not is_atari("CartPole-v1")
    info = describe_env(EnvConfig("CartPole-v1"))
    assert info.observation_shape == (4,) and info.frames_per_step == 1


def test_unknown_level_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown level_name 'NoSuchGame-v9'"):
        is_atari("NoSuchGame-v9")


def test_noop_starts_vary_the_start_of_the_game():
    # Pong's first screens are all alike, so count the frames the no-ops took instead.
    env = create_env(EnvConfig("PongNoFrameskip-v4"))
    starts = {env.reset(seed=seed)[1]["episode_frame_number"] for seed in range(8)}
    env.close()
    assert len(starts) > 2
    assert min(starts) >= 1


def test_fire_on_reset_only_for_games_that_need_it():
    breakout = create_env(EnvConfig("BreakoutNoFrameskip-v4"), seed=0)
    pacman = create_env(EnvConfig("MsPacmanNoFrameskip-v4"), seed=0)  # has no FIRE action
    assert find_wrapper(breakout, FireOnReset) is not None
    assert find_wrapper(pacman, FireOnReset) is None
    _, info = breakout.reset()
    assert info["episode_frame_number"] > 0


def test_breakout_life_loss_is_flagged_and_the_return_is_the_whole_game():
    """FIRE on reset launches the first ball without the agent; later balls need the agent's
    FIRE, as in the game. Each lost life but the last is flagged while the game goes on;
    the reported return and length cover the whole game, with the raw rewards."""
    env = create_env(EnvConfig("BreakoutNoFrameskip-v4"), seed=3)
    env.reset()
    life_losses, total_reward, steps = 0, 0.0, 0
    rng = np.random.default_rng(0)
    action = 0
    while True:
        _, reward, terminated, truncated, info = env.step(action)
        total_reward += reward
        steps += 1
        life_losses += info["life_lost"]
        if terminated or truncated:
            break
        # Relaunch after a lost life; otherwise mostly NOOP with some random moves.
        action = 1 if info["life_lost"] else (0 if rng.random() < 0.7 else int(rng.integers(2, 4)))
        assert steps < 20_000, "the game never ended: the ball was not launched"
        if life_losses == 0 and steps == 2000:
            pytest.fail("no life lost in 2000 NOOP steps: FIRE on reset is missing")
    assert life_losses == 4  # 5 lives; the last one ends the game instead
    assert info["episode"]["r"] == pytest.approx(total_reward)
    assert info["episode"]["l"] == steps
    env.close()


def test_pong_return_is_the_sum_of_raw_rewards():
    env = create_env(EnvConfig("PongNoFrameskip-v4"), seed=1)
    env.reset()
    rewards = []
    while True:
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        rewards.append(reward)
        if terminated or truncated:
            break
    assert info["episode"]["r"] == pytest.approx(sum(rewards))
    assert -21 <= sum(rewards) < 0  # a random policy loses at Pong
    assert set(rewards) <= {-1.0, 0.0, 1.0}
    env.close()


@pytest.mark.parametrize("level,cue_in_stack", [("impala/Recall-v0", False),
                                                ("impala/RecallShort-v0", True)])
def test_recall_shows_its_cue_only_beyond_the_frame_stack(level, cue_in_stack):
    """At "go" (the step that is paid) Recall's 4-frame stack holds blanks and the bar, with
    both cues alike; RecallShort's still holds the cue (the feed-forward control)."""
    stacks_at_go = {}
    for seed in range(20):
        env = create_env(EnvConfig(level), seed=seed)
        obs, _ = env.reset(seed=seed)
        cue = env.unwrapped._cue
        for _ in range(env.unwrapped.gap + 1):
            obs, reward, *_ = env.step(0)
            assert reward == 0  # nothing is paid before "go"
        stacks_at_go.setdefault(cue, obs)
        env.close()
    assert len(stacks_at_go) == 2
    left, right = stacks_at_go.values()
    assert left.shape == (4, 36, 36)
    assert np.array_equal(left, right) is not cue_in_stack
