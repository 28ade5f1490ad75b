"""What one learner process spends to take unrolls in and serve weights, per agent step.

The learner's own objects, with no training: its socket (`LearnerSocket`, CurveZMQ or
plain), its receiver thread (`UnrollReceiver`: decode, check values, continue frame
streams, copy into a batch), its batch queue (emptied by a thread that stands in for the
training loop) and its weight serving (a new version every `1 / --publish_hz` s, as a
learner at that many updates/s). `--senders` processes play actors of `--envs`
environments each, as `impala/actor.py` does on the wire: one set of unrolls (continued
frame streams), then a weights request, whose answer they await and load before the next
set. Their unrolls are random Pong-shaped ones, prepared once.

It reports agent steps/s (fresh steps, as the learner counts them), the traffic both
ways, and the CPU each of the learner's threads spent per agent step: the receiver thread
(which holds Python's lock most of that time, beside the training thread) and ZeroMQ's
I/O thread (encryption both ways; one per process). 1000 / core-ms is the most agent
steps/s that thread could serve on this CPU, whatever the senders' speed.

  .venv/bin/python bench/ingest.py [--algorithms impala] [--senders=2] [--envs=8]
      [--auth curve none] [--publish_hz 0 50] [--io_threads=1] [--seconds=10]
      [--launch_probe]
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import common  # noqa: F401 - puts the project on sys.path
import numpy as np
import psutil
import torch
from learner import algorithm_config, learner_objects

from impala import auth
from impala.actor import SEND_TIMEOUT_MS, WeightsClient
from impala.receiver import UnrollReceiver
from impala.transport import ActorSocket, LearnerSocket
from impala.unroll.batches import BatchQueue
from impala.unroll.layout import ACTION, FRAMES, LAST_ACTION, UnrollLayout
from impala.unroll.writer import UnrollWriter
from impala.weights import finite_weights

MAX_BYTES = 64 * 2**20


@dataclass
class Setting:
    algorithm: str
    auth: str  # curve | none
    publish_hz: float  # new weight versions per second (0: the first one only)
    senders: int
    envs: int
    stack_frames: str  # host | device: what the batch holds (stacks or frames)
    io_threads: int
    launch_probe: bool = False  # a kernel-launching thread's speed beside the receiver


def random_unrolls(layout: UnrollLayout, envs: int, seed: int) -> UnrollWriter:
    """A writer whose buffers hold random Pong-like unrolls of `envs` environments."""
    writer = UnrollWriter(layout, envs)
    rng = np.random.default_rng(seed)
    for name, buffer in writer.buffers.items():
        if name == FRAMES:
            buffer[:] = rng.integers(0, 255, buffer.shape, dtype=np.uint8)
        elif name in (ACTION, LAST_ACTION):
            buffer[:] = rng.integers(0, layout.num_actions, buffer.shape)
        elif buffer.dtype.kind == "f":
            buffer[:] = rng.normal(size=buffer.shape)
    return writer


def play_actor(index: int, algorithm: str, envs: int, port: int, keys_dir: str | None,
               stop: mp.Event, counts: mp.Array) -> None:
    """One sender process: unroll sets and weight requests, as an actor sends them, until
    `stop`; counts[index] = weight versions it loaded."""
    torch.set_num_threads(1)
    _, _, model, layout = learner_objects(algorithm_config(algorithm, 1, 1000))
    keys = auth.load_keys(auth.keys_path(Path(keys_dir))) if keys_dir else None
    sock = ActorSocket("127.0.0.1", port, MAX_BYTES, send_hwm=envs + 1, keys=keys)
    name = f"sender-{index}"
    client = WeightsClient(sock, model, MAX_BYTES, name)
    writer = random_unrolls(layout, envs, seed=index)
    no_episodes = [[] for _ in range(envs)]
    version = client.version
    try:
        while not stop.is_set():
            for frames in writer.messages(name, max(client.version, 0), no_episodes):
                while not sock.send(frames, SEND_TIMEOUT_MS):
                    if stop.is_set():
                        return
            writer.sent()
            if not (client.request_after_unrolls(stop) and client.await_answer(stop, "bench")):
                return
            if client.take_restart_request():  # the learner lost our streams (never here)
                writer.restart_streams()
            if client.version != version:
                version = client.version
                counts[index] += 1
    finally:
        sock.close()


class Drain(threading.Thread):
    """Stands in for the training loop: takes each full batch and gives it back."""

    def __init__(self, batches: BatchQueue) -> None:
        super().__init__(name="drain", daemon=True)
        self.batches = batches
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            batch = self.batches.get(timeout=0.1)
            if batch is not None:
                self.batches.release(batch)


class LaunchProbe(threading.Thread):
    """A stand-in for a GPU learner's training thread, which mostly launches kernels: small
    torch operations, each holding Python's lock for its Python side and letting go of it
    for its C++ side, as a CUDA launch does. Its speed beside the receiver, against alone,
    tells what the receiver's share of the lock costs such a thread (and the probe's, the
    receiver: steps/s). Clean only where cores are spare: on this 2-core VM the senders
    take CPU from both."""

    def __init__(self) -> None:
        super().__init__(name="launch-probe", daemon=True)
        self.rounds = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        value = torch.ones(1)
        while not self.stop_event.is_set():
            for _ in range(100):
                value = value * 0.5 + 1.0
            self.rounds += 1

    def rate(self, seconds: float) -> float:
        """Rounds per second over the next `seconds`."""
        start, t0 = self.rounds, time.perf_counter()
        time.sleep(seconds)
        return (self.rounds - start) / (time.perf_counter() - t0)


class Publisher(threading.Thread):
    """A new weight version every 1 / hz seconds, served by the receiver as a learner's
    (the same arrays each time: what travels is what counts)."""

    def __init__(self, receiver: UnrollReceiver, arrays: dict[str, np.ndarray],
                 hz: float) -> None:
        super().__init__(name="publisher", daemon=True)
        self.receiver, self.arrays, self.hz = receiver, arrays, hz
        self.stop_event = threading.Event()

    def run(self) -> None:
        version = 1
        while self.hz > 0 and not self.stop_event.wait(1.0 / self.hz):
            self.receiver.publish(version, self.arrays)
            version += 1


class Reading(NamedTuple):
    """The learner side's counters at one moment."""

    time: float
    unrolls: int
    unroll_bytes: int
    weights_loaded: int  # weight versions the senders loaded, all together
    cpu: dict[str | int, float]  # thread_cpu()


def thread_cpu(ids: dict[str, int | None]) -> dict[str | int, float]:
    """CPU seconds so far of this process's threads: those named in `ids` (native ids) by
    name, the others (ZeroMQ's I/O threads, its authenticator, the main thread) by id."""
    named = {native: name for name, native in ids.items()}
    return {named.get(thread.id, thread.id): thread.user_time + thread.system_time
            for thread in psutil.Process().threads()}


def wait_for_senders(receiver: UnrollReceiver, count: int, processes: list,
                     timeout_s: float = 120.0) -> None:
    """Until unrolls came from every sender (each imports torch and builds its agent)."""
    deadline = time.time() + timeout_s
    while (senders := receiver.counts().senders) < count:
        receiver.raise_if_stopped()
        if not all(p.is_alive() for p in processes):
            raise RuntimeError("a sender ended")
        if time.time() > deadline:
            raise RuntimeError(f"unrolls from {senders} of {count} senders "
                               f"after {timeout_s:.0f} s")
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure(setting: Setting, seconds: float, warmup: float = 2.0) -> dict[str, object]:
    """One row: the learner's side serving `setting.senders` sender processes for `seconds`
    after every sender's unrolls arrived and `warmup` more seconds."""
    cfg = algorithm_config(setting.algorithm, 1, 1000,
                           (f"--stack_frames={setting.stack_frames}",))
    _, _, model, layout = learner_objects(cfg)
    keys_dir = tempfile.mkdtemp(prefix="ingest-keys-") if setting.auth == "curve" else None
    keys = auth.ensure_keys(Path(keys_dir)) if keys_dir else None
    port = free_port()
    sock = LearnerSocket("127.0.0.1", port, MAX_BYTES,
                         receive_hwm=(cfg.queue_capacity + 1) * cfg.batch_size, keys=keys,
                         io_threads=setting.io_threads)
    batches = BatchQueue(layout, cfg.batch_size, cfg.queue_capacity,
                         extra_columns=cfg.max_replayed_per_update,
                         keep_stored=cfg.replay_schedule.largest > 0,
                         stacks_on_device=setting.stack_frames == "device")
    receiver = UnrollReceiver(sock, layout, batches, MAX_BYTES, name="learner-0")
    weights = finite_weights(model)
    receiver.publish(0, weights)
    drain, publisher = Drain(batches), Publisher(receiver, weights, setting.publish_hz)
    probe = LaunchProbe() if setting.launch_probe else None
    stoppable = [drain, publisher, *([probe] if probe else [])]  # the receiver: after senders
    receiver.start()
    for thread in stoppable:
        thread.start()
    probe_alone = probe.rate(2.0) if probe else None  # before any sender exists
    spawn = mp.get_context("spawn")
    stop, loaded = spawn.Event(), spawn.Array("l", setting.senders)
    senders = [spawn.Process(target=play_actor, daemon=True,
                             args=(i, setting.algorithm, setting.envs, port, keys_dir, stop,
                                   loaded))
               for i in range(setting.senders)]
    for process in senders:
        process.start()
    receiver_thread = next(t for t in threading.enumerate() if t.name == "unroll-receiver")
    ids = {"receiver": receiver_thread.native_id, "drain": drain.native_id,
           "publisher": publisher.native_id, **({"probe": probe.native_id} if probe else {})}

    def reading() -> Reading:
        counts = receiver.counts()
        return Reading(time.perf_counter(), counts.unrolls, counts.unroll_bytes,
                       sum(loaded), thread_cpu(ids))

    try:
        wait_for_senders(receiver, setting.senders, senders)
        time.sleep(warmup)
        before = reading()
        if probe:
            probe_beside = probe.rate(seconds)
        else:
            time.sleep(seconds)
        after = reading()
    finally:
        stop.set()
        for thread in stoppable:
            thread.stop_event.set()
        for process in senders:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
        receiver.stop()
        if keys_dir:
            shutil.rmtree(keys_dir, ignore_errors=True)
    receiver.raise_if_stopped()
    row = row_of(setting, layout, weights, before, after)
    counts = receiver.counts()
    row["dropped"] = counts.dropped + counts.stream_restarts  # 0, or it is no measure
    row["probe_speed"] = probe_beside / probe_alone if probe else None
    return row


def row_of(setting: Setting, layout: UnrollLayout, weights: dict[str, np.ndarray],
           before: Reading, after: Reading) -> dict[str, object]:
    wall = after.time - before.time
    steps = (after.unrolls - before.unrolls) * (layout.unroll_length + 1 - layout.overlap)
    if steps == 0:
        raise RuntimeError("no unrolls arrived while measuring: the senders did not start")
    weight_bytes = sum(array.nbytes for array in weights.values())
    cpu = {name: seconds - before.cpu.get(name, 0.0) for name, seconds in after.cpu.items()}
    per_step = {name: 1000.0 * seconds / steps for name, seconds in cpu.items()
                if isinstance(name, str)}
    # ZeroMQ's threads are the unnamed ones; the busiest bounds the rate (a peer's traffic
    # stays on the I/O thread its connection was given).
    others = [1000.0 * seconds / steps for name, seconds in cpu.items()
              if not isinstance(name, str)]
    return {"algorithm": setting.algorithm, "auth": setting.auth,
            "publish_hz": setting.publish_hz, "senders": setting.senders,
            "envs": setting.envs, "T": layout.unroll_length,
            "stack_frames": setting.stack_frames, "io_threads": setting.io_threads,
            "steps_per_s": steps / wall,
            "in_MB_per_s": (after.unroll_bytes - before.unroll_bytes) / wall / 2**20,
            "weights_MB_per_s": ((after.weights_loaded - before.weights_loaded) * weight_bytes
                                 / wall / 2**20),
            "receiver_ms_per_step": per_step["receiver"],
            "zmq_ms_per_step": sum(others),
            "drain_ms_per_step": per_step["drain"],
            "receiver_ceiling": 1000.0 / per_step["receiver"],
            "zmq_ceiling": 1000.0 / max(others)}


COLUMNS = ["algorithm", "auth", "publish_hz", "senders", "envs", "T", "stack_frames",
           "io_threads", "steps_per_s", "in_MB_per_s", "weights_MB_per_s",
           "receiver_ms_per_step", "zmq_ms_per_step", "drain_ms_per_step",
           "receiver_ceiling", "zmq_ceiling", "dropped", "probe_speed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", nargs="+", default=["impala"])
    parser.add_argument("--auth", nargs="+", default=["curve", "none"],
                        choices=("curve", "none"))
    parser.add_argument("--publish_hz", type=float, nargs="+", default=[0.0, 50.0],
                        help="new weight versions per second (a learner's updates/s)")
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--stack_frames", nargs="+", default=["host"],
                        choices=("host", "device"))
    parser.add_argument("--io_threads", type=int, nargs="+", default=[1])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--launch_probe", action="store_true",
                        help="beside the receiver, a thread of small torch operations as a GPU "
                             "learner's training thread: its speed against alone "
                             "(probe_speed; clean only where cores are spare)")
    args = parser.parse_args()
    rows = []
    for algorithm, auth_mode, hz, stack, io in itertools.product(
            args.algorithms, args.auth, args.publish_hz, args.stack_frames, args.io_threads):
        setting = Setting(algorithm, auth_mode, hz, args.senders, args.envs, stack, io,
                          args.launch_probe)
        rows.append(measure(setting, args.seconds))
        print(", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in rows[-1].items()), flush=True)
    common.report("ingest", rows, COLUMNS)


if __name__ == "__main__":
    main()
