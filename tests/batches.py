"""Learner batches without actors: an algorithm at its Pong preset with a small batch, and
random Pong-shaped unrolls to fill its batches and replay."""

from __future__ import annotations

import numpy as np
import torch

from impala.envs import describe_env
from impala.flags import parse_config
from impala.nets import build_agent
from impala.registry import build_algorithm
from impala.unroll.batches import Batch
from impala.unroll.layout import UnrollLayout
from impala.unroll.reader import EpisodeStats, Unroll
from impala.unroll.replay import UnrollReplay

T, B = 6, 3


def pong_learner(algorithm: str, extra_flags: tuple[str, ...] = ()) -> tuple:
    """An algorithm at its Pong preset with a small batch (and `extra_flags`):
    (config, algorithm, model, layout)."""
    cfg = parse_config([f"--algorithm={algorithm}", "--preset=auto",
                        "--level_name=PongNoFrameskip-v4", f"--unroll_length={T}",
                        f"--batch_size={B}", "--replay_size=16", "--learner_threads=1",
                        *extra_flags])
    algo = build_algorithm(cfg)
    torch.manual_seed(0)
    model = build_agent(cfg.agent_name, describe_env(cfg.env_config), algo)
    layout = UnrollLayout.for_agent(T, describe_env(cfg.env_config), model, algo.recorded,
                                    algo.overlap)
    return cfg, algo, model, layout


def random_batch(layout: UnrollLayout, replay: UnrollReplay | None, seed: int = 0,
                 stacks_on_device: bool = False) -> Batch:
    """B random Pong-shaped unrolls, some of whose environments reset mid-unroll."""
    batch = Batch(layout, B, extra_columns=replay.max_replayed if replay else 0,
                  keep_stored=replay is not None, stacks_on_device=stacks_on_device)
    rng = np.random.default_rng(seed)
    for _ in range(B):
        arrays = {name: np.zeros(spec.shape, spec.dtype) for name, spec in layout.schema().items()}
        arrays["frames"][:] = rng.integers(0, 255, arrays["frames"].shape, dtype=np.uint8)
        arrays["episode_start"][:] = rng.random(len(arrays["episode_start"])) < 0.2
        arrays["done"][:] = arrays["episode_start"]
        arrays["action"][:] = rng.integers(0, layout.num_actions, len(arrays["action"]))
        arrays["reward"][:] = rng.choice([-1.0, 0.0, 1.0], len(arrays["reward"]))
        arrays[layout.recorded][:] = rng.normal(size=arrays[layout.recorded].shape)
        batch.add(Unroll(arrays, "test", 0, EpisodeStats.empty()))
    return batch
