"""The learner trains on exactly what each actor saw and did.

A real actor plays real ALE games (Breakout: lives, FIRE on reset, game overs) and streams
its unrolls over ZeroMQ to a real receiver, which rebuilds the frame stacks into learner
batches. A recording wrapper around each environment writes down, from the environment's
side, every observation, action, reward, life loss and reset. Every batch is checked
against that record: observations (after the frame-stream rebuild), actions, last
actions, rewards, done flags, and the behaviour logits recomputed with the published
weights. An off-by-one anywhere in the data path fails here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from impala.actor import Actor
from impala.config import Config
from impala.unroll.batches import BatchQueue
from impala.weights import weights_arrays
from tests.helpers import free_port, wait_for
from tests.wire import start_receiver, stop_receiver

T = 20


@dataclass
class Step:
    """One agent step as the environment saw it (the actor's step convention)."""

    observation: np.ndarray
    reward: float
    done: bool  # this step starts a new episode for the learner (reset or lost life)
    last_action: int
    action: int | None = None  # the action the agent took on this observation


@dataclass
class Recorder(gym.Wrapper):
    """Outermost wrapper: the ground truth of one environment's stream of steps."""

    env: gym.Env
    steps: list[Step] = field(default_factory=list)
    resets: int = 0
    lives_lost: int = 0

    def __post_init__(self) -> None:
        super().__init__(self.env)

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        self.resets += 1
        if self.steps and self.steps[-1].done:  # a game over: the reset frame replaces it
            self.steps[-1].observation = observation.copy()
        else:
            self.steps.append(Step(observation.copy(), 0.0, True, 0))
        return observation, info

    def step(self, action):
        self.steps[-1].action = int(action)
        observation, reward, terminated, truncated, info = self.env.step(action)
        life_lost = bool(info.get("life_lost"))
        self.lives_lost += life_lost
        self.steps.append(Step(observation.copy(), float(reward),
                               terminated or truncated or life_lost, int(action)))
        return observation, reward, terminated, truncated, info


def test_batches_hold_exactly_what_the_actor_saw_and_did():
    num_envs, batch_size, batches_wanted = 4, 4, 40
    port = free_port()
    cfg = Config(level_name="BreakoutNoFrameskip-v4", num_envs=num_envs, unroll_length=T,
                 learner_host=f"127.0.0.1:{port}", seed=3)
    stop = threading.Event()
    actor = Actor(cfg, stop)
    recorders = [Recorder(env) for env in actor.envs.envs]
    actor.envs.envs = recorders
    weights = weights_arrays(actor.model)
    model = actor.model  # holds the published weights from the first answer on
    batches = BatchQueue(actor.layout, batch_size=batch_size, capacity=batches_wanted + 2)
    receiver = start_receiver(port, actor.layout, batches, weights, version=0)
    thread = threading.Thread(target=actor.run, daemon=True)
    thread.start()
    received = []
    try:
        def collect():
            batch = batches.get(timeout=0.1)
            if batch is not None:
                received.append({name: a.copy() for name, a in batch.arrays.items()})
                batches.release(batch)
            return len(received) >= batches_wanted
        wait_for(collect, 180, f"{batches_wanted} batches", interval=0)
    finally:
        stop.set()
        thread.join(timeout=15)
        stop_receiver(receiver)
        actor.close()
    assert receiver.counts().dropped == 0 and receiver.counts().stream_restarts == 0

    # One actor sends its envs' unrolls in order: unroll u is env u % N, set u // N.
    checked_steps = 0
    for u in range(batches_wanted * batch_size):
        arrays = received[u // batch_size]
        column = u % batch_size
        env, unroll_set = u % num_envs, u // num_envs
        truth = recorders[env].steps[unroll_set * T: unroll_set * T + T + 1]
        where = f"env {env}, unroll {unroll_set}"
        for t, step in enumerate(truth):
            np.testing.assert_array_equal(arrays["observation"][t, column], step.observation,
                                          err_msg=f"observation, {where}, step {t}")
            assert arrays["reward"][t, column] == step.reward, (where, t)
            assert arrays["done"][t, column] == step.done, (where, t)
            assert arrays["last_action"][t, column] == step.last_action, (where, t)
            if step.action is None:  # taken next, but the actor was stopped first
                assert step is recorders[env].steps[-1], (where, t)
            else:
                assert arrays["action"][t, column] == step.action, (where, t)
        with torch.no_grad():
            output, _ = model(torch.from_numpy(arrays["observation"][:, column:column + 1]),
                              torch.from_numpy(arrays["last_action"][:, column:column + 1]),
                              torch.from_numpy(arrays["reward"][:, column:column + 1]),
                              torch.from_numpy(arrays["done"][:, column:column + 1]))
        np.testing.assert_allclose(arrays["policy_logits"][:, column],
                                   output.heads["policy_logits"][:, 0].numpy(), rtol=1e-4,
                                   atol=1e-5,
                                   err_msg=f"behaviour logits, {where}")
        checked_steps += len(truth)
    assert checked_steps == batches_wanted * batch_size * (T + 1)
    # The record crossed what matters: lost lives and whole games over.
    assert sum(r.lives_lost for r in recorders) >= 4
    assert sum(r.resets for r in recorders) > num_envs, "no game ended"
