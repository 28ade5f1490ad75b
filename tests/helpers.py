"""Shared test helpers: free ports, processes, waiting on files, reading run directories."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from impala.registry import builtin_presets

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = str(ROOT / "experiment.py")
# Every built-in preset's values, by preset name (each algorithm declares its own).
PRESETS = {name: dict(preset.values) for name, preset in builtin_presets().items()}

# CartPole as a user runs it: the level and the agent; every other setting is the
# classic preset's (impala/algorithms/impala/).
CARTPOLE_FLAGS = ["--level_name=CartPole-v1", "--agent_name=MLPAgent", "--log_interval_s=2"]
CARTPOLE_RUN = "CartPole-v1_MLPAgent"  # the run directory CARTPOLE_FLAGS name


# Ports handed out below the kernel's ephemeral range (32768-60999 by default): a port the
# kernel picks for bind(0) is free now, but the same range is where outgoing connections
# (mpirun's, Horovod's, an actor's) take their source ports, so one may take it before the
# test's server binds it.
_PORTS = iter(random.Random(os.getpid()).sample(range(20_000, 32_000), 12_000))


def free_port() -> int:
    """A loopback TCP port that is free now, outside the ephemeral range, and not handed
    out before by this process."""
    for port in _PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port left in 20000-31999")


def start(args: list[str], log_path: Path, **kwargs) -> subprocess.Popen:
    """Start experiment.py with `args`, output to `log_path`, in a session of its own."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, EXPERIMENT, *args], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=ROOT, **kwargs)


def start_endless_cartpole(tmp_path: Path, port: int, *flags: str,
                           num_actors: int = 1) -> subprocess.Popen:
    """`--job_name=local` CartPole with a budget it never reaches, in `tmp_path`, its
    learner on `port`; stop it with `stop()`."""
    return start(["--job_name=local", f"--num_actors={num_actors}", *CARTPOLE_FLAGS,
                  "--total_environment_frames=100000000", *flags, f"--logdir={tmp_path}",
                  f"--learner_host=127.0.0.1:{port}"], tmp_path / "out.log")


def wait_for_first_updates(run_dir: Path, timeout: float = 60) -> None:
    """Wait until the run's learner has logged an update (its logs.csv)."""
    wait_for(lambda: last_value(run_dir / "logs.csv", "updates") > 0, timeout,
             f"the first updates in {run_dir}")


def run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, EXPERIMENT, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)


def wait_for(condition: Callable[[], object], timeout: float, what: str,
             interval: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def read_csv(path: Path) -> pd.DataFrame | None:
    try:
        frame = pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None
    return frame if len(frame) else None


def last_value(path: Path, column: str) -> float:
    frame = read_csv(path)
    return float(frame[column].iloc[-1]) if frame is not None else 0.0


def stop(proc: subprocess.Popen, timeout: float = 60) -> int:
    """SIGTERM, then wait; SIGKILL the whole session if it hangs (and fail loudly)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"pid {proc.pid} did not stop within {timeout} s of SIGTERM") from None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def dealer_to(port: int, run_dir: Path | None = None, linger_ms: int = 5000,
              host: str = "127.0.0.1"):
    """A DEALER socket to a learner: with `run_dir`, a CURVE client holding that run's keys
    (a peer the learner admits); without, a peer with no key."""
    import zmq

    from impala import auth

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, linger_ms)
    if run_dir is not None:
        wait_for(lambda: auth.keys_path(run_dir).exists(), 30, "the run's keys")
        auth.secure_client(sock, auth.load_keys(auth.keys_path(run_dir)))
    sock.connect(f"tcp://{host}:{port}")
    return sock


def weights_answered(sock, timeout_ms: int) -> bool:
    """Whether a weights request on `sock` gets the weights back within `timeout_ms`."""
    import json

    import zmq

    from impala.transport import encode

    # A DEALER blocks sending until a connection completes its handshake, which a peer
    # without the key never does.
    if not sock.poll(timeout_ms, zmq.POLLOUT):
        return False
    sock.send_multipart(encode("weights_request", "peer", version=-1), flags=zmq.NOBLOCK)
    if not sock.poll(timeout_ms):
        return False
    return json.loads(sock.recv_multipart()[0])["kind"] == "weights"


def assert_ranks_in_sync(run_dir: Path, same_rows: bool = True,
                         rank_dirs: list[Path] | None = None) -> pd.DataFrame:
    """param_checksum and state_digest (everything the ranks must hold identically: weights,
    optimizer state, a target network, counters) equal on both ranks at every update both
    logged; with `same_rows`, both logged the same updates (a run that ended by
    itself; one stopped from outside may leave one rank a row ahead). `rank_dirs`: where
    each rank's files are, when the ranks ran on hosts of their own."""
    rank_dirs = rank_dirs or [run_dir, run_dir]
    ranks = [pd.read_csv(rank_dirs[r] / f"learner-{r}.csv",
                         dtype={"param_checksum": str, "state_digest": str})
             for r in (0, 1)]
    merged = ranks[0].merge(ranks[1], on="updates", suffixes=("_0", "_1"))
    assert len(merged) >= 3
    if same_rows:
        assert len(merged) == len(ranks[0]) == len(ranks[1])
    mismatched = merged[merged["param_checksum_0"] != merged["param_checksum_1"]]
    assert mismatched.empty, mismatched[["updates", "param_checksum_0", "param_checksum_1"]]
    mismatched = merged[merged["state_digest_0"] != merged["state_digest_1"]]
    assert mismatched.empty, mismatched[["updates", "state_digest_0", "state_digest_1"]]
    assert (merged["frames_0"] == merged["frames_1"]).all()  # one global frame count
    return merged


def progress(run_dir: Path, window: int = 100) -> str:
    """How far a run's learning got, for a failure message: its episodes, frames and
    the best and last rolling mean over `window` episodes of rank 0."""
    episodes = read_csv(run_dir / "episodes-0.csv")
    if episodes is None or episodes.empty:
        return "no episodes were written"
    rolling = episodes["episode_return"].rolling(window, min_periods=1).mean()
    best = int(rolling.idxmax())
    return (f"{len(episodes)} episodes to {episodes['frames'].iloc[-1]} frames; the mean of "
            f"the last {window} was {rolling.iloc[-1]:.2f} at the end, best "
            f"{rolling.iloc[best]:.2f} at {episodes['frames'].iloc[best]} frames")


def assert_stopped_at_the_target(run_dir: Path, target: float, budget: int,
                                 ranks: int = 1) -> int:
    """The run ended on --target_return, before its frame budget; the mean its learner
    logged is, to the last digit printed, that of the last episodes all ranks wrote to
    their episodes CSVs (whole updates: rows share the frame count of their update).
    Returns the frame count at the stop."""
    logged = re.search(r"mean return (\S+) over the last (\d+) episodes reached "
                       r"--target_return=\S+ at (\d+) frames: done",
                       (run_dir / "learner-0.log").read_text())
    assert logged, f"the run did not stop on its --target_return {target}: {progress(run_dir)}"
    mean, count, frames = float(logged.group(1)), int(logged.group(2)), int(logged.group(3))
    episodes = pd.concat([pd.read_csv(run_dir / f"episodes-{r}.csv") for r in range(ranks)])
    last = episodes.sort_values("frames", kind="stable")["episode_return"].iloc[-count:]
    assert np.isclose(last.mean(), mean, atol=0.006) and mean >= target
    assert frames < budget
    return frames


def with_program(command: list[str], program: list[str]) -> list[str]:
    """An mpirun command line with every rank's learner program (experiment.py and its
    flags) swapped for `program` (python's arguments)."""
    command = list(command)
    position = [i for i, word in enumerate(command) if word == "experiment.py"]
    for start_index in reversed(position):
        end = command.index(":", start_index) if ":" in command[start_index:] else len(command)
        command[start_index:end] = program
    return command
