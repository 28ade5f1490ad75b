"""Overlapping unrolls (Ape-X: n steps, R2D2: burn-in + 1): what the learner rebuilds is
exactly what the environment showed, step for step, across unroll boundaries, episode
resets inside the shared steps, and frame streams that send each frame once."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from impala.algorithms.apex import ApeX
from impala.environment_loop import EnvStep
from impala.envs import EnvConfig, create_env
from impala.transport import decode
from impala.unroll.batches import Batch
from impala.unroll.layout import (
    ACTION,
    DONE,
    OBSERVATION,
    UnrollLayout,
)
from impala.unroll.reader import UnrollReader
from impala.unroll.writer import UnrollWriter

LEVEL = "impala/DelayedCue-v0"  # frame-stacked, resets every 30 steps


def play(envs, steps: int, seed: int):
    """Ground truth: `steps` consecutive EnvSteps of every env (random actions)."""
    rng = np.random.default_rng(seed)
    n = len(envs)
    observations = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    step = EnvStep(observations, np.zeros(n, np.float32), np.ones(n, bool),
                   np.zeros(n, np.int64), np.ones(n, bool))
    for _ in range(steps):
        actions = rng.integers(0, 3, size=n)
        yield step, actions
        obs, rewards, dones = [], np.zeros(n, np.float32), np.zeros(n, bool)
        for i, env in enumerate(envs):
            o, r, terminated, truncated, _ = env.step(int(actions[i]))
            rewards[i] = r
            if terminated or truncated:
                o, _ = env.reset()
                dones[i] = True
            obs.append(o)
        step = EnvStep(np.stack(obs), rewards, dones, actions.astype(np.int64), dones.copy())


@pytest.mark.parametrize("unroll_length,overlap", [(20, 1), (20, 3), (12, 7), (80, 41)])
def test_overlapping_unrolls_rebuild_every_step_exactly(unroll_length, overlap):
    num_envs, unrolls = 2, 6
    envs = [create_env(EnvConfig(LEVEL), seed=i) for i in range(num_envs)]
    layout = UnrollLayout(unroll_length=unroll_length, observation_shape=(4, 36, 36),
                          observation_dtype="uint8", num_actions=3, core_shapes=(),
                          recorded=ApeX.recorded, frame_stack=4, overlap=overlap)
    writer, reader = UnrollWriter(layout, num_envs), UnrollReader(layout)
    schemas = dict(reader.schemas)
    steps = unroll_length + 1
    stride = steps - overlap
    history = list(play(envs, steps + stride * (unrolls - 1), seed=3))
    batch = Batch(layout, 1)
    t, start = 0, 0
    for u in range(unrolls):
        for t in range(start, steps):
            step, actions = history[u * stride + t]
            writer.record(t, step, actions, np.zeros((num_envs, 3), np.float32))
        messages = list(writer.messages("actor-0", 0, [[] for _ in envs]))
        writer.sent()
        for i, frames in enumerate(messages):
            message = decode(frames, schemas, 1 << 26)
            assert (message.kind == "unroll") == (u == 0 or overlap == steps)
            unroll = reader.read("peer", message)
            batch.reset()
            batch.add(unroll)
            reader.kept(unroll)
            for s in range(steps):
                truth, truth_actions = history[u * stride + s]
                np.testing.assert_array_equal(batch.arrays[OBSERVATION][s, 0],
                                              truth.observation[i], err_msg=f"unroll {u} step {s}")
                assert batch.arrays[DONE][s, 0] == truth.done[i]
                assert batch.arrays[ACTION][s, 0] == truth_actions[i]
        writer.shift()
        start = overlap
    assert any(step.episode_start.any() for step, _ in history[1:])  # resets were crossed
    for env in envs:
        env.close()


def test_an_unroll_cannot_overlap_by_more_than_its_length():
    agent_env = type("Info", (), {"observation_shape": (4,), "observation_dtype": np.dtype("f4"),
                                  "num_actions": 2, "frame_stack": 0})
    from impala.nets import create_agent

    with pytest.raises(ValueError, match="cannot overlap"):
        UnrollLayout.for_agent(5, agent_env, create_agent("MLPAgent", (4,), 2, ApeX.heads),
                               ApeX.recorded, 6)
    torch.manual_seed(0)
