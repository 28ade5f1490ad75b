"""End to end on one host: a `--job_name=local` run keeps training through what goes
wrong around it (malformed messages, a killed actor, a killed learner) and stops cleanly."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from impala.flags import parse_config
from impala.local import ActorSupervisor
from impala.supervision import BACKOFF_S
from tests.helpers import (
    CARTPOLE_FLAGS,
    CARTPOLE_RUN,
    dealer_to,
    free_port,
    last_value,
    pid_alive,
    read_csv,
    start,
    start_endless_cartpole,
    stop,
    wait_for,
    wait_for_first_updates,
)

pytestmark = pytest.mark.slow

RUN = CARTPOLE_RUN


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
        wait_for_first_updates(tmp_path / RUN)
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
        wait_for_first_updates(run_dir)
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
    run_dir = tmp_path / RUN
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
