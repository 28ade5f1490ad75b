"""End to end on one host: checkpoints. A run resumes from its checkpoint (and its saved
replay), plays and records from it, and a checkpoint it cannot trust is refused before
training."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from impala import checkpoint
from impala.algorithms.impala import Impala
from impala.config import Config
from impala.nets import create_agent
from tests.helpers import (
    CARTPOLE_FLAGS,
    CARTPOLE_RUN,
    PRESETS,
    free_port,
    last_value,
    read_csv,
    run,
)

pytestmark = pytest.mark.slow

RUN = CARTPOLE_RUN
# CartPole's classic preset is on-policy: replay as the atari preset sets it.
REPLAY_FLAGS = [f"--{name}={PRESETS['atari'][name]}"
                for name in ("replay_ratio", "replay_size", "priority_exponent",
                             "trust_region_threshold")]
REPLAYED_SHARE = PRESETS["atari"]["replay_ratio"] / (1 + PRESETS["atari"]["replay_ratio"])


def test_pong_trains_checkpoints_resumes_and_plays(tmp_path):
    common = ["--level_name=PongNoFrameskip-v4", "--agent_name=SimpleConvNetAgent",
              "--batch_size=4", "--unroll_length=20", "--num_envs=2", "--num_actors=1",
              f"--logdir={tmp_path}", "--log_interval_s=1"]
    first = run(["--job_name=local", *common, "--total_environment_frames=3200",
                 f"--learner_host=127.0.0.1:{free_port()}"], timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "PongNoFrameskip-v4_SimpleConvNetAgent"
    assert (run_dir / "checkpoint.pt").exists()
    logs = read_csv(run_dir / "logs.csv")  # frame streams went on without a restart
    assert logs["stream_restarts"].iloc[-1] == 0 and logs["dropped_messages"].iloc[-1] == 0
    second = run(["--job_name=local", *common, "--total_environment_frames=6400",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert re.search(r"resumed from .* at 3200 frames", second.stderr)
    assert last_value(run_dir / "logs.csv", "frames") >= 6400

    test = run(["--mode=test", *common, "--test_num_episodes=1"], timeout=300)
    assert test.returncode == 0, test.stderr[-3000:]
    assert re.search(r"mean return -?\d+\.\d+ \+- 0\.00 over 1 episodes", test.stdout)

    video = run(["--mode=video", *common], timeout=300)
    assert video.returncode == 0, video.stderr[-3000:]
    assert (run_dir / "video.mp4").stat().st_size > 10_000


def test_a_run_with_replay_resumes_with_the_replay_it_saved(tmp_path):
    # Rows every update or so, so the resumed run's first row comes before any refill.
    common = [*CARTPOLE_FLAGS, *REPLAY_FLAGS, "--log_interval_s=0.02", f"--logdir={tmp_path}"]

    def train(frames: int, *flags: str) -> subprocess.CompletedProcess:
        return run(["--job_name=local", *common, f"--total_environment_frames={frames}",
                    f"--learner_host=127.0.0.1:{free_port()}", *flags], timeout=300)

    first = train(20_000)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / RUN
    filled = last_value(run_dir / "logs.csv", "replay_fill")
    stopped_at = last_value(run_dir / "logs.csv", "frames")
    second = train(40_000)
    assert second.returncode == 0, second.stderr[-3000:]
    assert re.search(r"resumed from .* at 2\d{4} frames", second.stderr)
    assert re.search(r"restored \d+ unrolls from .*replay-0.npz", second.stderr)
    logs = read_csv(run_dir / "logs.csv")
    resumed = logs[logs["frames"] > stopped_at]
    assert resumed["replay_fill"].iloc[0] >= filled > 0  # restored, not refilled
    assert resumed["replayed_share"].iloc[-1] == REPLAYED_SHARE
    # Only fresh frames count toward the budget: each run ends at it (within one update of
    # 16 x 20 fresh frames), not at twice it.
    assert 20_000 <= stopped_at < 20_320 and 40_000 <= logs["frames"].iloc[-1] < 40_320
    # Without it, a resumed run refills from new unrolls; a damaged file stops the run.
    ended_at = logs["frames"].iloc[-1]
    third = train(50_000, "--checkpoint_replay=off")
    assert third.returncode == 0, third.stderr[-3000:]
    assert "restored" not in third.stderr
    logs = read_csv(run_dir / "logs.csv")
    assert logs[logs["frames"] > ended_at]["replay_fill"].iloc[0] < filled
    replay = run_dir / "replay-0.npz"
    replay.write_bytes(replay.read_bytes()[:1000])
    damaged = train(60_000)
    assert damaged.returncode == 2 and f"{replay} is damaged" in damaged.stderr


def test_a_checkpoint_of_another_game_is_refused_before_training(tmp_path):
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"garbage")
    result = run(["--job_name=learner", "--level_name=CartPole-v1", "--agent_name=MLPAgent",
                  f"--logdir={tmp_path}", "--run_name=shared",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=60)
    assert result.returncode == 2
    assert "is corrupt or not a checkpoint" in result.stderr


def test_a_checkpoint_with_nan_weights_is_refused_before_training(tmp_path):
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent")
    checkpoint.save(run_dir / "checkpoint.pt", model, None,
                    {"frames": 10, "updates": 1, "version": 1}, cfg.to_dict())
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    next(iter(state["model"].values())).fill_(float("nan"))
    torch.save(state, run_dir / "checkpoint.pt")
    result = run(["--job_name=learner", "--level_name=CartPole-v1", "--agent_name=MLPAgent",
                  f"--logdir={tmp_path}", "--run_name=shared",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=60)
    assert result.returncode == 2
    assert "NaN or infinite values" in result.stderr and "Traceback" not in result.stderr
