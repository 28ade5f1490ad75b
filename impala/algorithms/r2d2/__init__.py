"""R2D2 (Kapturowski et al. 2019): a recurrent agent learning from replayed sequences with
the recurrent state the actor stored at their start, a burn-in that only warms that state
up, n-step (5) double-Q targets under the invertible value rescaling h (instead of reward
clipping), and priorities 0.9 max|delta| + 0.1 mean|delta| per sequence. The Atari preset
keeps the sequences and that priority mix but takes Ape-X's targets: see ATARI."""

from __future__ import annotations

from impala.algorithm import Preset
from impala.algorithms.value import QUIET_RMSPROP, ValueBased

# 80-step sequences (40 burn-in, 40 trained, the next starting 40 steps later), n = 5,
# gamma 0.997, value rescaling instead of clipping, alpha 0.9, beta 0.6.
SEQUENCES = {"num_envs": 16, "batch_size": 2, "unroll_length": 80, "burn_in": 40,
             "n_step": 5, "discounting": 0.997, "learning_rate": 0.0003, **QUIET_RMSPROP,
             "replay_ratio": 3.0, "replay_size": 1000, "priority_exponent": 0.9,
             "importance_sampling_exponent": 0.6, "reward_clipping": "none"}
RULE = ("the paper's sequences and targets at one learner's scale; a target copy every "
        "50 updates (4,000 frames without action repeat, 16,000 with)")
CLASSIC = Preset(
    name="r2d2_classic", families=("classic",),
    values={**SEQUENCES, "agent_name": "MLPLSTMAgent", "target_update_frames": 4_000,
            "total_environment_frames": 500_000},
    rule="r2d2_image's values for vector observations; learning there is unmeasured",
    record=())
IMAGE = Preset(
    name="r2d2_image", families=("image",),
    values={**SEQUENCES, "agent_name": "MLPLSTMAgent", "target_update_frames": 4_000,
            "total_environment_frames": 500_000},
    rule=RULE,
    record=("tests/e2e/test_value_learning.py::"
            "test_r2d2_remembers_a_cue_its_frame_stack_no_longer_shows",))
# Why no rescaling on Atari: under h the torso did not start learning Pong in seven
# variants of the other settings; without it, it did as Ape-X's does. Why Ape-X's gamma,
# n and exponents: with the paper's (0.997, 5, 0.9/0.6) the live torso still played at -20
# to 5.8M frames; with Ape-X's the same run left -20 (results/runs.csv, group r2d2). Why
# one fresh sequence per update: a sequence brings 40 new steps to an Ape-X unroll's 18,
# so at two per update R2D2 made 2.2x fewer updates per frame than Ape-X, each twice the
# size; at one it makes as many as Ape-X, of the same size, for ~0.83x the frames/s.
# Why a bfloat16 torso where the CPU has it: the network's passes are nearly all of an
# update, bfloat16 makes them ~1.5x faster, and both seeds learned Pong with it.
ATARI = Preset(
    name="r2d2_atari", families=("atari",),
    values={**SEQUENCES, "batch_size": 1, "agent_name": "SimpleConvNetLSTMAgent",
            "value_rescaling": "off",
            "reward_clipping": "abs_one", "learning_rate": 0.001, "replay_size": 4000,
            "discounting": 0.99, "n_step": 3, "priority_exponent": 0.6,
            "importance_sampling_exponent": 0.4,
            "target_update_frames": 32_000, "exploration_frames": 500_000,
            "lr_hold_fraction": 1.0, "bf16_torso": "auto",
            "total_environment_frames": 16_000_000},
    rule="the paper's network (Nature torso, LSTM 512), sequences and priority mix, with "
         "clipped rewards in raw returns instead of the rescaling h; Ape-X's gamma 0.99, "
         "n 3, priority exponents 0.6/0.4, constant rate, target period (32K frames) and "
         "anneal; 4,000 sequences of replay; one fresh and three replayed sequences per "
         "update, Ape-X's updates per frame and their size; a bfloat16 torso on a CPU with "
         "bfloat16 instructions",
    record=("r2d2-pong-preset-bf16-s1", "r2d2-pong-bs1-bf16-s1", "r2d2-pong-bs1-bf16-s2",
            "r2d2-pong-noh-apextargets-s1", "r2d2-pong-noh-apextargets-s2",
            "r2d2-pong-preset-noh-s1", "r2d2-pong-h100-noh-s1"))


class R2D2(ValueBased):
    name = "r2d2"
    presets = (CLASSIC, IMAGE, ATARI)
    action_reward_inputs = True  # the paper's LSTM sees the last action and reward
    rescaled = True
    priority_eta = 0.9
