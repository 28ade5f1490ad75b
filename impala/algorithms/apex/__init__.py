"""Ape-X (Horgan et al. 2018): many actors, each environment with its own epsilon
(eps_i = 0.4^(1 + 7 i / (N - 1))), n-step (3) dueling double-Q with a target network,
prioritized replay (alpha 0.6, beta 0.4) whose first priorities the actors compute.

Its network sees the frames only, as the paper's dueling network does: with the last action
as an input (IMPALA's agents have it) a feed-forward agent learned to carry a cue in its
own actions and half-solved impala/Recall-v0."""

from __future__ import annotations

from impala.algorithm import Preset
from impala.algorithms.value import QUIET_RMSPROP, ValueBased

PRIORITIZED = {"priority_exponent": 0.6, "importance_sampling_exponent": 0.4}

CLASSIC = Preset(
    name="apex_classic", families=("classic",),
    values={"agent_name": "MLPAgent", "num_envs": 16, "batch_size": 4, "unroll_length": 10,
            "learning_rate": 0.001, "replay_ratio": 4.0, "replay_size": 4000, **PRIORITIZED,
            "target_update_frames": 1_600, "reward_clipping": "none",
            "total_environment_frames": 500_000},
    rule="many small updates (160 transitions each), the default RMSProp",
    record=("tests/e2e/test_value_learning.py::test_apex_learns_cartpole_with_its_defaults",))
ATARI = Preset(
    name="apex_atari", families=("atari",),
    values={"batch_size": 2, "learning_rate": 0.001, **QUIET_RMSPROP, "replay_ratio": 3.0,
            "replay_size": 10_000, **PRIORITIZED, "target_update_frames": 32_000,
            "exploration_frames": 500_000, "lr_hold_fraction": 1.0,
            "total_environment_frames": 10_000_000},
    rule="a target copy every 32K frames (Rainbow's period), many small updates (2 fresh "
         "and 6 replayed unrolls) at a constant, larger rate, DQN's anneal over the first "
         "500K frames: updates per frame and their size, not the batch, limit learning",
    record=("apex-pong-preset-s1", "apex-pong-preset-s2", "apex-pong-preset-s1-b",
            "apex-pong-preset-s3", "apex-pong-preset-s1-c", "apex-pong-preset-s2-c"))
IMAGE = Preset(
    name="apex_image", families=("image",),
    values={**ATARI.values, "target_update_frames": 2_880, "exploration_frames": 0,
            "total_environment_frames": 500_000},
    rule="apex_atari with a target copy every 2,880 frames and no anneal: small tasks, "
         "rewards tens of steps apart, no action repeat",
    record=("tests/e2e/test_value_learning.py::"
            "test_apex_learns_a_reward_paid_25_steps_later_through_the_atari_data_path",))


class ApeX(ValueBased):
    name = "apex"
    presets = (CLASSIC, ATARI, IMAGE)
    action_reward_inputs = False  # the paper's dueling network sees frames only
    rescaled = False
    priority_eta = 0.0  # an unroll's priority is its transitions' mean |delta|
