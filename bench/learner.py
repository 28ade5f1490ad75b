"""One full learner update on synthetic batches of the real shape: forward over (T+1) x B
observations, V-trace, losses, backward, clipping, RMSProp step, weight publishing (a
snapshot, then checked and encoded on the publisher's thread, as the learner does).
Samples/s (agent steps trained on) and core-milliseconds per sample (every thread's).

With `--replay_ratios 1 3`, also LASER updates through the learner's own path: B fresh
Pong-shaped unrolls (frames once per step) plus r x B replayed ones sampled by priority
from a full replay and rebuilt into stacks, the fresh ones stored, priorities updated.
`fresh_per_s` is what counts toward the frame budget.

With `--algorithms impala apex r2d2`, each algorithm's update as its Pong preset runs it
(`--preset=auto`: agent, unroll length, overlap, batch, replay ratio), through the
learner's own objects: its layout, replay, `Learning` (with a target network for Ape-X and
R2D2, and R2D2's burn-in) and priority updates. `fresh_per_s` counts the steps an unroll
brings that the previous one of its environment did not (T + 1 - overlap); `ops_per_update`
the tensor operations one update dispatches (each a kernel launch on a GPU).

  .venv/bin/python bench/learner.py [--agent_name=SimpleConvNetAgent] [--seconds=10]
      [--replay_ratios 0 1 3] [--algorithms impala apex r2d2 [--flags=--burn_in=20 ...]]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import common  # noqa: F401 - puts the project on sys.path
import numpy as np
import torch

from impala.algorithm import Algorithm
from impala.assembly import assemble, build_optimizer
from impala.config import Config
from impala.devices import resolve_device
from impala.distributed import SingleLearner
from impala.envs import EnvInfo, describe_env
from impala.flags import parse_config
from impala.nets import Agent
from impala.process import keep_freed_memory
from impala.publisher import WeightPublisher
from impala.schedules import ReplaySchedule
from impala.step import untimed
from impala.transport import encode
from impala.unroll.batches import Batch
from impala.unroll.layout import UnrollLayout
from impala.unroll.reader import EpisodeStats, Unroll
from impala.unroll.replay import UnrollReplay
from impala.update import PhaseTimes, Update, UpdateConfig, tensor_operations


def timed(update: Callable[[int], None], seconds: float) -> tuple[int, float, float]:
    """`update(0)` once to warm up, then `update(i)` for i = 0, 1, ... for `seconds`:
    (updates timed, wall seconds, CPU seconds of this process)."""
    update(0)
    updates, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        update(updates)
        updates += 1
    return updates, time.perf_counter() - t0, time.process_time() - cpu0


def measure(agent_name: str, T: int, B: int, threads: int, seconds: float,
            keep_memory: bool = True, device: str = "cpu") -> dict[str, object]:
    """IMPALA's plain update (no replay) on random Pong-shaped unrolls. `keep_memory=False`
    (in a fresh process: the setting is process-wide) measures with glibc's default malloc,
    for comparison; the learner keeps its freed memory."""
    row = measure_with_replay(agent_name, T, B, threads, seconds, 0.0, keep_memory,
                              device=device)
    return {k: v for k, v in row.items() if k not in ("replay_ratio", "fresh_per_s")}


def measure_with_replay(agent_name: str, T: int, B: int, threads: int, seconds: float,
                        ratio: float, keep_memory: bool = True,
                        replay_size: int = 2000, device: str = "cpu") -> dict[str, object]:
    """IMPALA updates at replay ratio `ratio` (LASER; 0: none) through the learner's Update."""
    torch.set_num_threads(threads)
    if keep_memory:
        keep_freed_memory()
    torch.manual_seed(0)
    cfg = parse_config(["--preset=none", "--trust_region_threshold=0.3",
                        "--level_name=PongNoFrameskip-v4", f"--agent_name={agent_name}",
                        f"--unroll_length={T}", f"--batch_size={B}"])
    on = resolve_device(device, tf32=cfg.tf32_allowed)
    _, algorithm, model, layout = learner_objects(cfg, on)
    replay = UnrollReplay(layout, B, ReplaySchedule.constant(ratio), replay_size,
                          priority_exponent=0.6, importance_sampling_exponent=0.4,
                          seed=0) if ratio > 0 else None
    batch = filled_batch(layout, B, replay)
    with learner_update(algorithm, model, cfg, batch, replay, 0, on) as update:
        updates, wall, cpu = timed(update, seconds)
    trained = updates * T * (B + ratio * B)
    return {"agent": agent_name, "T": T, "B": B, "threads": threads, "replay_ratio": ratio,
            "updates_per_s": updates / wall, "samples_per_s": trained / wall,
            "fresh_per_s": updates * T * B / wall, "core_ms_per_sample": 1000.0 * cpu / trained}


@contextmanager
def learner_update(algorithm: Algorithm, model: Agent, cfg: Config, batch: Batch,
                   replay: UnrollReplay | None, frames_per_update: int, device: torch.device,
                   phases: PhaseTimes | None = None) -> Iterator[Callable[[int], None]]:
    """The learner's own Update (fresh batch, replay, loss, step, after-update work,
    priorities) on `device` (where `model` is), then the weights handed to a
    WeightPublisher as the learner does (snapshot here; checked and encoded for the actors
    on its thread). Yields the update, called with its number; on leaving, the last weights
    are published. `phases`: a profile of where the training thread's time goes."""
    run_update = Update(model, build_optimizer(cfg, model), SingleLearner(),
                        algorithm.learning(model), replay, device, UpdateConfig.of(cfg),
                        phases)
    phase = phases or untimed
    publisher = WeightPublisher(
        lambda version, arrays, frames: encode("weights", "learner-0", arrays, version=version))
    publisher.start()

    def update(number: int) -> None:
        run_update(batch, number, number * frames_per_update, (number + 1) * frames_per_update)
        with phase("publish weights"):
            publisher.submit(model, number, (number + 1) * frames_per_update)

    try:
        yield update
    finally:
        publisher.close()
    publisher.raise_if_failed()


def filled_batch(layout: UnrollLayout, B: int, replay: UnrollReplay | None,
                 stacks_on_device: bool = False) -> Batch:
    """A batch of B random Pong-like unrolls, and `replay` (if any) filled with copies;
    `stacks_on_device`: the batch carries frames (the learner's --stack_frames)."""
    batch = Batch(layout, B, extra_columns=replay.max_replayed if replay else 0,
                  keep_stored=replay is not None, stacks_on_device=stacks_on_device)
    rng = np.random.default_rng(0)
    for _ in range(B):
        arrays = {name: np.zeros(spec.shape, spec.dtype) for name, spec in layout.schema().items()}
        arrays["frames"][:] = rng.integers(0, 255, arrays["frames"].shape, dtype=np.uint8)
        arrays["action"][:] = rng.integers(0, layout.num_actions, len(arrays["action"]))
        arrays["reward"][:] = rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0], len(arrays["reward"]))
        arrays[layout.recorded][:] = rng.normal(size=arrays[layout.recorded].shape)
        batch.add(Unroll(arrays, "bench", 0, EpisodeStats.empty()))
    while replay is not None and len(replay.memory) < replay.memory.capacity:
        replay.mix_into(batch, 0, 0)  # keeps the batch's unrolls
    return batch


def algorithm_config(algorithm: str, threads: int, replay_size: int,
                     flags: tuple[str, ...] = ()) -> Config:
    """The Pong preset of `algorithm` (with `flags` over it), with a replay small enough to
    fill quickly."""
    cfg = parse_config([f"--algorithm={algorithm}", "--preset=auto",
                        "--level_name=PongNoFrameskip-v4", f"--learner_threads={threads}",
                        *flags])
    if cfg.replay_ratio > 0:
        cfg = dataclasses.replace(cfg, replay_size=min(cfg.replay_size, replay_size))
    return cfg


def learner_objects(cfg: Config, device: torch.device | None = None
                    ) -> tuple[EnvInfo, Algorithm, Agent, UnrollLayout]:
    """The environment, algorithm, agent (on `device`, the CPU if None) and unroll layout
    a learner with `cfg` builds (impala/assembly.py)."""
    env_info = describe_env(cfg.env_config)
    parts = assemble(cfg, env_info, device, training=True)
    return env_info, parts.algorithm, parts.model, parts.layout


def measure_algorithm(algorithm: str, threads: int, seconds: float, replay_size: int = 1000,
                      flags: tuple[str, ...] = (), device: str = "cpu",
                      phases: PhaseTimes | None = None) -> dict[str, object]:
    """Updates/s of `algorithm` at its Pong preset (and `flags`), through the learner's
    objects."""
    cfg = algorithm_config(algorithm, threads, replay_size, flags)
    torch.set_num_threads(threads)
    keep_freed_memory()
    torch.manual_seed(0)
    on = resolve_device(device, tf32=cfg.tf32_allowed)
    env_info, algo, model, layout = learner_objects(cfg, on)
    B, T, ratio = cfg.batch_size, cfg.unroll_length, cfg.replay_ratio
    replay = UnrollReplay(layout, B, ReplaySchedule.constant(ratio), max(cfg.replay_size, 2 * B),
                          cfg.priority_exponent, cfg.importance_sampling_exponent,
                          seed=0) if ratio > 0 else None
    batch = filled_batch(layout, B, replay, cfg.stacks_on_device(on))
    fresh_frames = B * (T + 1 - algo.overlap) * env_info.frames_per_step
    with learner_update(algo, model, cfg, batch, replay, fresh_frames, on,
                        phases) as update:
        updates, wall, cpu = timed(update, seconds)
        operations = tensor_operations(lambda: update(updates))
    fresh = updates * B * (T + 1 - algo.overlap)
    trained = fresh * (1 + ratio)
    return {"algorithm": algorithm, "agent": cfg.agent_name, "T": T, "B": B,
            "overlap": algo.overlap, "threads": threads, "replay_ratio": ratio,
            "updates": updates, "device": device, "channels_last": model.channels_last,
            "tf32": cfg.tf32 if on.type == "cuda" else "-", "bf16_torso": model.bf16_torso,
            "updates_per_s": updates / wall, "samples_per_s": trained / wall,
            "fresh_per_s": fresh / wall, "frames_per_s": fresh * env_info.frames_per_step / wall,
            "core_ms_per_sample": 1000.0 * cpu / trained, "ops_per_update": operations}


def profile_phases(device: str) -> PhaseTimes:
    """Phase timings that, on a GPU, wait for each phase's kernels."""
    on = resolve_device(device)
    return PhaseTimes(torch.cuda.synchronize if on.type == "cuda" else None)


def profile_rows(row: dict[str, object], phases: PhaseTimes) -> list[dict[str, object]]:
    """Milliseconds per update in each phase (the warm-up update included), and its share."""
    calls = row["updates"] + 1
    total = sum(phases.seconds.values())
    return [{"algorithm": row["algorithm"], "threads": row["threads"], "device": row["device"],
             "phase": phase, "ms_per_update": 1000.0 * seconds / calls,
             "share": seconds / total}
            for phase, seconds in sorted(phases.seconds.items(), key=lambda kv: -kv[1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agent_name", default="SimpleConvNetAgent")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--shapes", nargs="*", default=["20x32", "80x8"],
                        help="TxB batch shapes")
    parser.add_argument("--replay_ratios", type=float, nargs="*", default=[0.0],
                        help="0: the plain update; > 0: LASER updates at that ratio")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"),
                        help="where the update runs (the batch is copied there each update, "
                             "as the learner does)")
    parser.add_argument("--flags", action="append", default=[],
                        help="with --algorithms: training flags over each preset, e.g. "
                             "--flags=--unroll_length=40 --flags=--burn_in=20")
    parser.add_argument("--profile", action="store_true",
                        help="with --algorithms: also where each update's time goes, by phase")
    parser.add_argument("--algorithms", nargs="*", default=[],
                        help="instead of the above: each algorithm at its Pong preset")
    args = parser.parse_args()
    if args.algorithms:
        rows, profile = [], []
        for name in args.algorithms:
            for threads in args.threads:
                phases = profile_phases(args.device) if args.profile else None
                row = measure_algorithm(name, threads, args.seconds, flags=tuple(args.flags),
                                        device=args.device, phases=phases)
                rows.append(row | {"device": args.device})
                if phases is not None:
                    profile += profile_rows(row, phases)
        if profile:
            common.report("learner_profile", profile, [
                "algorithm", "threads", "device", "phase", "ms_per_update", "share"])
        common.report("learner_algorithms", rows, [
            "algorithm", "agent", "T", "B", "overlap", "threads", "device", "channels_last",
            "tf32", "bf16_torso", "replay_ratio", "updates_per_s", "samples_per_s",
            "fresh_per_s", "frames_per_s", "core_ms_per_sample", "ops_per_update"])
        return
    rows = []
    for shape in args.shapes:
        T, B = (int(x) for x in shape.split("x"))
        for threads in args.threads:
            for ratio in args.replay_ratios:
                if ratio > 0:
                    rows.append(measure_with_replay(args.agent_name, T, B, threads,
                                                    args.seconds, ratio, device=args.device))
                else:
                    row = measure(args.agent_name, T, B, threads, args.seconds,
                                  device=args.device)
                    rows.append(row | {"replay_ratio": 0.0, "fresh_per_s": row["samples_per_s"]})
    for row in rows:
        row["device"] = args.device
    common.report("learner", rows, ["agent", "T", "B", "threads", "device", "replay_ratio",
                                    "updates_per_s", "samples_per_s", "fresh_per_s",
                                    "core_ms_per_sample"])


if __name__ == "__main__":
    main()
