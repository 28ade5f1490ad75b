"""Frame stacks rebuilt on the learner equal the actor's, across resets, on a real game."""

import numpy as np

from impala.envs import EnvConfig, create_env
from impala.unroll.framestack import rebuild_stacks, split_stacks, stack_indices


def test_indices_without_and_with_resets():
    no_reset = stack_indices(np.zeros(4, bool), 4)
    assert no_reset.tolist() == [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]]
    reset_at_2 = stack_indices(np.array([False, False, True, False]), 4)
    assert reset_at_2[2].tolist() == [5, 5, 5, 5]  # the reset frame, four times
    assert reset_at_2[3].tolist() == [5, 5, 5, 6]


def test_rebuilt_stacks_equal_the_environments_across_episode_ends():
    """Breakout's 5 lives end quickly with random play: unrolls cross real resets."""
    env = create_env(EnvConfig("BreakoutNoFrameskip-v4"), seed=0)
    obs, _ = env.reset()
    T, checked, resets = 20, 0, 0
    for _ in range(60):
        observations, starts = [obs], [checked == 0]
        for _ in range(T):
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            reset = terminated or truncated
            if reset:
                obs, _ = env.reset()
                resets += 1
            observations.append(obs)
            starts.append(reset)
        stacked = np.stack(observations)
        frames = split_stacks(stacked)
        assert frames.shape == (T + 4, 84, 84)
        rebuilt = np.zeros_like(stacked)
        rebuild_stacks(frames, np.array(starts), rebuilt)
        np.testing.assert_array_equal(rebuilt, stacked)
        checked += 1
        obs = observations[-1]
    assert resets >= 1, "the test never crossed an episode end"
