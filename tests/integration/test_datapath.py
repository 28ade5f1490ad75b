"""The learner trains on exactly what each actor saw and did.

A real actor plays real ALE games (Breakout: lives, FIRE on reset, game overs) and streams
its unrolls over ZeroMQ to a real receiver, which rebuilds the frame stacks into learner
batches. A recording wrapper around each environment writes down, from the environment's
side, every observation, action, reward, life loss and reset. Every batch is checked
against that record: observations (after the frame-stream rebuild), actions, last
actions, rewards, done flags, and the behaviour logits recomputed with the published
weights. An off-by-one anywhere in the data path fails here.

A recurrent actor (R2D2 on Recall) is checked the same way for the core state each unroll
carries: from it, the learner's network recomputes every value the actor recorded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import pytest
import torch

from impala.actor import Actor
from impala.algorithm import Learning, LossResult
from impala.algorithms.value import Q_VALUES
from impala.algorithms.value.behaviour import heads_q
from impala.config import Config, parse_host_port
from impala.distributed import SingleLearner
from impala.flags import parse_config
from impala.optim import RMSpropTF
from impala.receiver import ReceiverCounts
from impala.registry import build_algorithm
from impala.unroll.batches import Batch, BatchQueue, core_state
from impala.update import Update, UpdateConfig
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


def batches_from(actor: Actor, batch_size: int, count: int,
                 timeout: float) -> tuple[list[Batch], ReceiverCounts]:
    """Run `actor` against a real receiver on its learner's port, which publishes its own
    weights as version 0, until `count` batches arrived: those batches (kept, never
    released, so each holds its own buffers) and the receiver's counts."""
    batches = BatchQueue(actor.layout, batch_size=batch_size, capacity=count + 2)
    _, port = parse_host_port(actor.cfg.learner_host)
    receiver = start_receiver(port, actor.layout, batches, weights_arrays(actor.model),
                              version=0)
    thread = threading.Thread(target=actor.run, daemon=True)
    thread.start()
    received: list[Batch] = []
    try:
        def collect():
            batch = batches.get(timeout=0.1)
            if batch is not None:
                received.append(batch)
            return len(received) >= count
        wait_for(collect, timeout, f"{count} batches", interval=0)
    finally:
        actor.stop.set()
        thread.join(timeout=15)
        stop_receiver(receiver)
        actor.close()
    return received, receiver.counts()


class LoopRecorder:
    """Around an actor's whole environment loop (any backend): what it handed the actor,
    one `Step` list per environment, as `Recorder` writes it down for one environment."""

    @dataclass
    class Stream:
        steps: list[Step] = field(default_factory=list)
        resets: int = 0
        lives_lost: int = 0

    def __init__(self, loop) -> None:
        self.loop = loop
        self.streams = [self.Stream() for _ in range(len(loop))]

    def __len__(self) -> int:
        return len(self.loop)

    @property
    def finished(self) -> list:
        return self.loop.finished

    def reset(self, seeds=None):
        step = self.loop.reset(seeds)
        for stream, observation in zip(self.streams, step.observation, strict=True):
            stream.steps.append(Step(observation.copy(), 0.0, True, 0))
            stream.resets += 1
        return step

    def step(self, actions, *args, **kwargs):
        for stream, action in zip(self.streams, actions, strict=True):
            stream.steps[-1].action = int(action)
        step = self.loop.step(actions, *args, **kwargs)
        for i, stream in enumerate(self.streams):
            stream.steps.append(Step(step.observation[i].copy(), float(step.reward[i]),
                                     bool(step.done[i]), int(step.last_action[i])))
            stream.resets += int(step.episode_start[i])
            stream.lives_lost += int(step.done[i] and not step.episode_start[i])
        return step

    def close(self) -> None:
        self.loop.close()


@pytest.mark.parametrize("backend", ["gymnasium", "ale_vector"])
def test_batches_hold_exactly_what_the_actor_saw_and_did(backend):
    """With Gymnasium's environments the record is each environment's own; with ale-py's
    vector environment it is the loop's (its stacks are checked against the game's frames
    in tests/unit/test_ale_vector_loop.py)."""
    num_envs, batch_size, batches_wanted = 4, 4, 40
    port = free_port()
    cfg = Config(level_name="BreakoutNoFrameskip-v4", num_envs=num_envs, unroll_length=T,
                 learner_host=f"127.0.0.1:{port}", seed=3, env_backend=backend)
    actor = Actor(cfg, threading.Event())
    if backend == "gymnasium":
        recorders = [Recorder(env) for env in actor.envs.envs]
        actor.envs.envs = recorders
    else:
        actor.envs = LoopRecorder(actor.envs)
        recorders = actor.envs.streams
    model = actor.model  # holds the published weights from the first answer on
    batches, counts = batches_from(actor, batch_size, batches_wanted, timeout=180)
    assert counts.dropped == 0 and counts.stream_restarts == 0
    check_batches(model, [batch.arrays for batch in batches], recorders, batch_size)


def check_batches(model, received: list[dict], recorders: list, batch_size: int) -> None:
    """Every step of every unroll in `received` against what `recorders` wrote down. One
    actor sends its envs' unrolls in order: unroll u is env u % N, set u // N."""
    num_envs = len(recorders)
    checked_steps = 0
    for u in range(len(received) * batch_size):
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
    assert checked_steps == len(received) * batch_size * (T + 1)
    # The record crossed what matters: lost lives and whole games over.
    assert sum(r.lives_lost for r in recorders) >= 4
    assert sum(r.resets for r in recorders) > num_envs, "no game ended"


class CoreStateSeen(Learning):
    """An algorithm's Learning that writes down the core state each loss was given."""

    def __init__(self, inner: Learning) -> None:
        self.inner = inner
        self.seen: list[tuple[torch.Tensor, ...]] = []

    def loss(self, model, batch, core_state) -> LossResult:
        self.seen.append(tuple(t.clone() for t in core_state))
        return self.inner.loss(model, batch, core_state)


def test_a_recurrent_actors_stored_state_lets_the_learner_recompute_what_it_recorded():
    """R2D2 on impala/Recall-v0 (an LSTM agent): each sequence carries the core state the
    actor held before its first step. Started from that state, the same weights give, at
    every step, exactly the Q values the actor recorded; started from zeros they do not.
    A real update hands the loss that state. So a stored state that was zeroed, or taken
    at the wrong step, by the actor or by the update, fails here. 74-step sequences
    overlapping by 41 start 33 steps apart, across Recall's 40-step episodes: with the
    preset's 81 steps every sequence would start on a reset, where any state is dropped."""
    num_envs, batch_size, batches_wanted = 2, 2, 8
    port = free_port()
    cfg = parse_config(["--algorithm=r2d2", "--level_name=impala/Recall-v0",
                        f"--num_envs={num_envs}", f"--batch_size={batch_size}",
                        "--unroll_length=73", f"--learner_host=127.0.0.1:{port}", "--seed=5"])
    actor = Actor(cfg, threading.Event())
    model = actor.model
    with torch.no_grad():  # weights far from the initial ones, whose Q values hardly differ
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    received, counts = batches_from(actor, batch_size, batches_wanted, timeout=120)
    assert counts.dropped == 0

    state_mattered = 0
    for batch in received:
        tensors = batch.tensors
        inputs = [tensors[name] for name in ("observation", "last_action", "reward", "done")]
        stored = core_state(tensors)  # each [L, B, H]
        assert stored, "the recurrent layout has no core state"
        with torch.no_grad():
            from_stored, _ = model(*inputs, stored)
            from_zero, _ = model(*inputs, tuple(torch.zeros_like(s) for s in stored))
        recorded = tensors[Q_VALUES]  # [T + 1, B, A]
        torch.testing.assert_close(heads_q(from_stored.heads), recorded, rtol=1e-4,
                                   atol=1e-5)
        first_step = (heads_q(from_zero.heads)[0] - recorded[0]).abs().amax(dim=-1)  # [B]
        state_mattered += int((first_step > 1e-3).sum())
    # Most sequences start mid-episode, where a zero state is not the actor's.
    assert state_mattered >= batches_wanted * batch_size // 2, state_mattered

    learning = CoreStateSeen(build_algorithm(cfg).learning(model))
    update = Update(model, RMSpropTF(model.parameters(), lr=1e-4), SingleLearner(), learning,
                    None, torch.device("cpu"), UpdateConfig.of(cfg))
    update(received[-1], 0, 0, 1000)
    for given, stored in zip(learning.seen[0], core_state(received[-1].tensors), strict=True):
        torch.testing.assert_close(given, stored, rtol=0, atol=0)
