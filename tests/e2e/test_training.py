"""End to end on one host: real learner and actor processes over ZeroMQ."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from impala.algorithms.impala import Impala
from impala.flags import parse_config
from impala.local import ActorSupervisor
from impala.supervision import BACKOFF_S
from tests.helpers import (
    CARTPOLE_FLAGS,
    PRESETS,
    assert_stopped_at_the_target,
    dealer_to,
    free_port,
    last_value,
    pid_alive,
    read_csv,
    run,
    start,
    start_endless_cartpole,
    stop,
    wait_for,
)

pytestmark = pytest.mark.slow

CARTPOLE_BUDGET = 300_000  # frames (CartPole: one frame per agent step)
# The defaults ended their 300K frames with a mean of 479-500 over the last 100 episodes
# (6 seeds, on a loaded 2-core VM); with half the learning rate at 444 and 464, so this
# bar is about collapse, not speed (DelayedCue's budget is about speed). Random play
# scores ~22.
CARTPOLE_LEARNED = 400
RUN = "CartPole-v1_MLPAgent"
# CartPole's classic preset is on-policy: replay as the atari preset sets it.
REPLAY_FLAGS = [f"--{name}={PRESETS['atari'][name]}"
                for name in ("replay_ratio", "replay_size", "priority_exponent",
                             "trust_region_threshold")]
REPLAYED_SHARE = PRESETS["atari"]["replay_ratio"] / (1 + PRESETS["atari"]["replay_ratio"])
# The atari preset's share over its first --initial_replay_frames (all of a test's frames).
INITIAL_REPLAYED_SHARE = (PRESETS["atari"]["initial_replay_ratio"]
                          / (1 + PRESETS["atari"]["initial_replay_ratio"]))


class CartPoleRun(NamedTuple):
    run_dir: Path
    final_mean: float  # the mean raw return of the last 100 episodes, at the budget
    stderr: str


def cartpole_with_the_defaults(logdir: Path, extra: tuple[str, ...] = ()) -> CartPoleRun:
    """One `--job_name=local` CartPole run with no flag but the level, the agent and
    `extra`."""
    result = run(["--job_name=local", *CARTPOLE_FLAGS, *extra, f"--logdir={logdir}",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = logdir / RUN
    episodes = read_csv(run_dir / "episodes-0.csv")
    final_mean = episodes["episode_return"].iloc[-100:].mean()
    return CartPoleRun(run_dir, final_mean, result.stderr)


def test_cartpole_is_learned_within_the_frame_budget_with_the_defaults(tmp_path):
    """One learner and two actor processes, no flag but the level and the agent (the
    classic preset decides the rest, its frame budget included); the mean raw return of
    the last 100 episodes, at the end of the 300K frames, is at least CARTPOLE_LEARNED: a
    policy that learned and then fell apart fails."""
    result = cartpole_with_the_defaults(tmp_path)
    assert result.final_mean >= CARTPOLE_LEARNED, (
        f"mean return of the last 100 episodes {result.final_mean:.1f} at the end of "
        f"{CARTPOLE_BUDGET} frames")
    # The run directory holds what docs/run-directory.md promises.
    run_dir = result.run_dir
    logs = read_csv(run_dir / "logs.csv")
    for column in ("time", "frames", "sps", "updates", "episodes", "mean_episode_return",
                   "mean_episode_length", "total_loss", "pg_loss", "baseline_loss", "entropy",
                   "grad_norm", "learning_rate", "policy_lag", "queue_depth",
                   "dropped_messages"):
        assert column in logs.columns
    assert "td_error" not in logs.columns  # another algorithm's scalars are not its columns
    # Empty without episodes, without replay or without ReDo; every other column has a
    # number every row.
    numeric = logs.drop(columns=["mean_episode_return", "mean_episode_length", "replay_fill",
                                 "replayed_share", "replay_age", "dormant_units",
                                 "recycled_units"]).dropna()
    assert len(numeric) == len(logs)
    assert all(dtype.kind in "if" for dtype in numeric.dtypes), numeric.dtypes
    assert logs["mean_episode_return"].dropna().dtype.kind == "f"
    assert logs["frames"].iloc[-1] >= PRESETS["classic"]["total_environment_frames"]
    assert logs["updates"].is_unique  # the last row once, even when a log tick falls on it
    assert logs["learning_rate"].iloc[-1] < PRESETS["classic"]["learning_rate"] * 0.05
    assert logs["policy_lag"].median() < 5  # flow control keeps actors close to the learner
    assert list(run_dir.glob("events.out.tfevents.*"))
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["exit_status"] == "finished" and meta["flags"]["preset"] == "classic"
    assert meta["preset_values"] == PRESETS["classic"]
    assert "git_commit" in meta
    assert os.environ["PATH"] not in json.dumps(meta)  # the environment is never stored
    assert (run_dir / "checkpoint.pt").exists()
    assert "frames" in result.stderr and "ETA" in result.stderr  # the status line


def test_cartpole_is_learned_with_popart_value_normalization(tmp_path):
    """The classic preset with --value_normalization=popart reaches a mean of
    CARTPOLE_LEARNED over 100 episodes within the defaults' budget, with the statistics
    grown from mu 0, sigma 1 towards CartPole's values (1 a step, discounted over hundreds
    of steps).

    It stops at the target rather than judging the budget's last episodes: PopArt under
    the classic preset learns later than the plain head and dips mid-run, so its mean at
    the end of the budget is no stable bar, while it reaches 400 well within the budget
    (results/test-budgets.csv). "Learned and held" is the defaults' test above."""
    run_dir = cartpole_with_the_defaults(tmp_path, ("--value_normalization=popart",
                                                    f"--target_return={CARTPOLE_LEARNED}")
                                         ).run_dir
    assert_stopped_at_the_target(run_dir, CARTPOLE_LEARNED, CARTPOLE_BUDGET)
    weights = torch.load(run_dir / "checkpoint.pt", weights_only=False)["model"]
    mean, mean_square = (float(weights[f"heads.baseline.{name}"])
                         for name in ("mean", "mean_square"))
    assert mean > 3 and mean_square - mean**2 > 9
    logs = read_csv(run_dir / "logs.csv")  # the statistics are logged as they move
    assert logs["value_sigma"].iloc[0] < logs["value_sigma"].iloc[-1] > 3
    assert logs["value_mean"].iloc[-1] > 3


# DelayedCue's budget fails a learner that learns half as fast: the defaults reached 9 of 10
# at 9.1K-10.9K frames (9 seeds, on a loaded 2-core VM), and with half the learning rate
# at 15.4K-16.0K (3 seeds; 7.3 and 8.3 at 13K in 2 more). DelayedCueLong's budget is 2.4x
# what the defaults need (41-45K frames, 38K with replay): its tests are of the data path
# (replay, stacks, the bootstrap), not of learning speed. The runs stop at the target
# (--target_return), so a margin costs time only when it is needed.
CUE_BUDGET = 14_000
LONG_CUE_BUDGET = 100_000


def cue_run(tmp_path: Path, level: str, budget: int, target: float,
            flags: tuple[str, ...] = ()) -> Path:
    """A --job_name=local run of `level` with the defaults (and `flags`) that must stop on
    reaching `target` (mean of the last 100 episodes) within `budget` frames; its run dir."""
    result = run(["--job_name=local", f"--level_name={level}", *flags,
                  f"--total_environment_frames={budget}", f"--target_return={target}",
                  "--log_interval_s=2", f"--logdir={tmp_path}",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / f"{level.replace('/', '-')}_SimpleConvNetAgent"
    assert_stopped_at_the_target(run_dir, target, budget)
    return run_dir


def test_an_image_task_that_needs_stacked_frames_is_learned_with_the_defaults(tmp_path):
    """impala/DelayedCue-v0 goes through the Atari data path (frame stacks sent once and
    rebuilt on the learner, rewards one step after the action): it is solved only if
    that path is right. Random play scores 0, perfect play 10."""
    run_dir = cue_run(tmp_path, "impala/DelayedCue-v0", CUE_BUDGET, 9.0)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["flags"]["preset"] == "atari" and meta["preset_values"]["batch_size"] == 8
    assert (run_dir / "curve.png").stat().st_size > 10_000


def test_a_reward_paid_after_the_unroll_ends_is_learned_through_the_bootstrap(tmp_path):
    """impala/DelayedCueLong-v0 pays each answer 25 steps later, past the unroll's 20 (as
    Pong pays a point long after the paddle moved); only the waiting screens tell what is
    coming. Solved only if values and bootstrap values carry the return across unroll
    boundaries. Random play scores 0, perfect play 5; on-policy (replay off, every
    unroll learned from once) it is solved in ~45K frames."""
    run_dir = cue_run(tmp_path, "impala/DelayedCueLong-v0", LONG_CUE_BUDGET, 4.5,
                      ("--replay_ratio=0",))
    assert read_csv(run_dir / "logs.csv")["replay_fill"].isna().all()


def test_prioritized_replay_learns_through_the_atari_data_path(tmp_path):
    """LASER with prioritized replay, as the atari preset sets it, on
    impala/DelayedCueLong-v0: replayed unrolls are kept as single frames and rebuilt into
    stacks after the fresh ones, weighted and masked in the loss. A wrong rebuild, weight or
    priority shows as a task not learned."""
    run_dir = cue_run(tmp_path, "impala/DelayedCueLong-v0", LONG_CUE_BUDGET, 4.5)
    logs = read_csv(run_dir / "logs.csv")
    last = logs.iloc[-1]
    assert last["frames"] < PRESETS["atari"]["initial_replay_frames"]
    assert last["replayed_share"] == INITIAL_REPLAYED_SHARE and 0 < last["replay_fill"] <= 1
    assert last["replay_age"] >= 1 and 0 <= last["trust_region_masked"] <= 1
    replay_size = PRESETS["atari"]["replay_size"]
    assert f"replay: {replay_size} unrolls x" in (run_dir / "learner-0.log").read_text()


def test_frame_stacks_gathered_where_the_update_runs_learn_through_the_atari_data_path(
        tmp_path):
    """--stack_frames=device on the CPU (a GPU learner's default): batches carry each frame
    once and the update gathers the stacks, for fresh and replayed unrolls alike."""
    run_dir = cue_run(tmp_path, "impala/DelayedCueLong-v0", LONG_CUE_BUDGET, 4.5,
                      ("--stack_frames=device",))
    assert "frame stacks gathered on the device" in (run_dir / "learner-0.log").read_text()


def _raw_messages(header_ok: bytes) -> list[list[bytes]]:
    """One message of each malformed kind."""
    good_fields = json.loads(header_ok)["fields"]

    def header(**changes):
        base = json.loads(header_ok)
        base.update(changes)
        return json.dumps(base).encode()

    obs_fields = [["observation", "float32", [21, 4]]]
    return [
        [b"\x00\x01garbage"],
        [header(format=99)],
        [header()],  # truncated: header lists arrays, no frames follow
        [header(fields=obs_fields), b"\x00" * (21 * 4 * 4), b"extra"],
        [header(fields=[["observation", "float64", [21, 4]]]), b"\x00" * (21 * 4 * 8)],
        [header(fields=[["observation", "float32", [21, 84, 84]]]), b"\x00" * 16],
        [header(fields=good_fields + [["bonus", "float32", [1]]])],
        [header(kind="weights")],
        [header(kind="unroll_continued")],  # frame streams exist for Atari only
        [b"\x80\x04\x95pickle"],
        [header(), b"\x00" * (3 * 2**20)],  # over --max_message_mb=2
    ]


def test_malformed_messages_are_dropped_and_the_learner_keeps_training(tmp_path):
    port = free_port()
    proc = start_endless_cartpole(tmp_path, port, "--max_message_mb=2")
    logs = tmp_path / RUN / "logs.csv"
    try:
        wait_for(lambda: last_value(logs, "updates") > 0, 60, "first updates")
        header_ok = json.dumps({
            "format": 1, "kind": "unroll", "sender": "attacker", "meta": {},
            "fields": [["observation", "float32", [21, 4]]]}).encode()
        messages = _raw_messages(header_ok)
        # A peer holding the run's key: what gets past authentication must still be checked.
        sock = dealer_to(port, tmp_path / RUN)
        for message in messages:
            sock.send_multipart(message)
        sock.close()
        updates_then = last_value(logs, "updates")
        # Oversized frames are cut off by ZeroMQ itself (the peer is disconnected), so at
        # least every other kind must be counted.
        wait_for(lambda: last_value(logs, "dropped_messages") >= len(messages) - 1, 30,
                 "dropped messages to be counted")
        wait_for(lambda: last_value(logs, "updates") > updates_then + 20, 30,
                 "training to go on")
        assert proc.poll() is None
        learner_log = (tmp_path / RUN / "learner-0.log").read_text()
        for reason in ("header is not JSON", "wire format 99", "0 frames follow",
                       "dtype 'float64' is not one of", "unexpected message kind 'weights'",
                       "unexpected message kind 'unroll_continued'"):
            assert reason in learner_log
        assert "dropped message from peer" in learner_log
    finally:
        assert stop(proc) == 0


def _started_actor_pids(log_text: str, task: int) -> list[int]:
    return [int(p) for p in re.findall(rf"started actor {task} \(pid (\d+)\)", log_text)]


def _weights_lines(actor_log: Path) -> int:
    """How many times an actor process writing this log received its first weights."""
    return actor_log.read_text().count("got weights version") if actor_log.exists() else 0


def _niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def _autogroup_niceness(pid: int) -> int | None:
    """The niceness of the process's scheduling group; None without autogroups."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split("nice")[1])
    except OSError:
        return None


def test_killed_actor_is_restarted_and_the_learner_keeps_going(tmp_path):
    proc = start_endless_cartpole(tmp_path, free_port(), num_actors=2)
    run_dir = tmp_path / RUN
    learner_log = run_dir / "learner-0.log"
    try:
        wait_for(lambda: last_value(run_dir / "logs.csv", "updates") > 0, 60, "first updates")
        # With the classic preset one actor fills a batch alone: updates do not mean actor 0
        # has its weights yet, and killing it before would leave one line where we count two.
        wait_for(lambda: _weights_lines(run_dir / "actor-0.log") == 1, 60, "actor 0's weights")
        first_pid = _started_actor_pids(learner_log.read_text(), 0)[0]
        actor1 = _started_actor_pids(learner_log.read_text(), 1)[0]
        # Actors yield the CPU to their learner, in their own session's group as well.
        assert _niceness(actor1) == 10 and _niceness(proc.pid) == _niceness(os.getpid())
        assert _autogroup_niceness(actor1) in (10, None)
        os.kill(first_pid, signal.SIGKILL)
        new_pids = wait_for(lambda: _started_actor_pids(learner_log.read_text(), 0)[1:], 30,
                            "actor 0 to be restarted")
        assert "actor 0 exited with -9; restarting" in learner_log.read_text()
        frames_then = last_value(run_dir / "logs.csv", "frames")
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > frames_then + 50_000, 60,
                 "training to go on")
        # The restarted actor rejoins: it gets weights from the learner (the log appends).
        wait_for(lambda: _weights_lines(run_dir / "actor-0.log") == 2, 30,
                 "the restarted actor to get weights")
        assert proc.poll() is None and pid_alive(new_pids[0]) and pid_alive(actor1)
    finally:
        assert stop(proc) == 0
    # Stopping the run ends exactly the actors it started.
    for pid in (new_pids[0], actor1):
        wait_for(lambda pid=pid: not pid_alive(pid), 10, f"actor pid {pid} to exit")


def test_a_run_stopped_between_log_rows_still_logs_its_last_updates(tmp_path):
    """SIGTERM before the first --log_interval_s tick: logs.csv still gets a row for the
    updates made, at the frames the final checkpoint holds (it had none before: a run cut
    short by `bench/gpu_session.sh` lost its last minutes of rows)."""
    proc = start_endless_cartpole(tmp_path, free_port(), "--log_interval_s=3600")
    run_dir = tmp_path / "CartPole-v1_MLPAgent"
    try:
        wait_for(lambda: read_csv(run_dir / "episodes-0.csv") is not None, 60,
                 "the first episodes")
    finally:
        assert stop(proc) == 0
    logs = read_csv(run_dir / "logs.csv")
    assert logs is not None and len(logs) == 1
    saved = re.search(r"checkpoint saved at (\d+) frames",
                      (run_dir / "learner-0.log").read_text())
    assert logs["frames"].iloc[-1] == int(saved.group(1)) > 0
    assert logs["updates"].iloc[-1] > 0 and logs["sps"].iloc[-1] > 0


def test_an_actor_that_exits_while_the_run_stops_is_not_started_again(tmp_path, caplog):
    """A signal that reaches the actors as well as the learner (one sent to the whole
    process group, say) makes them exit while the learner still writes its last checkpoint:
    the supervisor must not start them again then (it did: two new actors in the run's last
    second, Pong run M)."""
    cfg = parse_config(["--job_name=local", "--num_actors=1", *CARTPOLE_FLAGS,
                        f"--logdir={tmp_path}", f"--learner_host=127.0.0.1:{free_port()}"])
    cfg.run_dir.mkdir(parents=True)
    run_stopping = threading.Event()
    supervisor = ActorSupervisor(cfg, cfg.run_dir, stopping=run_stopping)
    with caplog.at_level("INFO", logger="local"):
        supervisor.start()
        try:
            wait_for(lambda: 0 in supervisor.procs, 10, "the actor to start")
            first = supervisor.procs[0]
            run_stopping.set()  # what the learner's signal handler sets
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=30)
            time.sleep(BACKOFF_S[0] + 1.5)  # past the first restart's delay
            assert supervisor.procs[0] is first
        finally:
            supervisor.stop()
    assert [r for r in caplog.records if "started actor" in r.getMessage()][1:] == []
    assert not any("restarting" in r.getMessage() for r in caplog.records)


def test_learner_killed_and_restarted_resumes_and_actors_reconnect(tmp_path):
    port = free_port()
    learner_args = ["--job_name=learner", *CARTPOLE_FLAGS, "--checkpoint_interval_s=1",
                    "--total_environment_frames=100000000", f"--logdir={tmp_path}",
                    f"--learner_host=127.0.0.1:{port}"]
    # The actor shares the learner's run directory, where the learner creates the run's key
    # file: started first, it waits for it.
    actor = start(["--job_name=actor", "--task=0", *CARTPOLE_FLAGS, f"--logdir={tmp_path}",
                   f"--learner_host=127.0.0.1:{port}"], tmp_path / "actor.log")
    learner = start(learner_args, tmp_path / "learner.log")
    run_dir = tmp_path / RUN
    try:
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > 20_000, 60, "training")
        wait_for(lambda: (run_dir / "checkpoint.pt").exists(), 10, "a checkpoint")
        time.sleep(1.5)  # let a checkpoint after 20k frames land
        learner.kill()
        learner.wait()
        time.sleep(2)
        assert actor.poll() is None, "the actor must outlive its learner and wait for it"
        restarted_at = time.time()
        learner = start(learner_args, tmp_path / "learner.log")  # the same command again
        resumed = wait_for(
            lambda: re.findall(r"resumed from .* at (\d+) frames",
                               (run_dir / "learner-0.log").read_text()), 60, "the resume")
        # From a checkpoint written after the 20K frames seen before the kill.
        assert int(resumed[0]) >= 20_000
        wait_for(lambda: last_value(run_dir / "logs.csv", "frames") > int(resumed[0]) + 20_000,
                 60, "training after the resume (the actor reconnected)")
        meta = json.loads((run_dir / "meta.json").read_text())
        assert meta["starts"] == 2
    finally:
        assert stop(learner) == 0
        stop(actor)
    logs = read_csv(run_dir / "logs.csv")
    # The restarted learner counts on from the checkpoint's frames (rows the killed one
    # wrote after its last checkpoint stay in the file above them).
    after = logs[logs["time"] > restarted_at]["frames"]
    assert len(after) > 1 and after.iloc[0] > int(resumed[0]) and after.is_monotonic_increasing
    # Each row's span is the time it trained: the >= 2 s the learner was down is not in them.
    spans = logs["interval_s"]
    assert (spans > 0).all()
    assert spans.sum() + 2 <= logs["time"].iloc[-1] - logs["time"].iloc[0] + spans.iloc[0]


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
    import torch

    from impala import checkpoint
    from impala.config import Config
    from impala.nets import create_agent

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
