"""The actor: step `num_envs` environments with one batched forward pass per step, and send
one T+1-step unroll per environment to its learner every `unroll_length` steps.

Between unrolls it asks the learner for newer weights without waiting for the answer;
an answer that has arrived is applied before the next unroll. If the learner goes away,
sends time out and are retried (ZeroMQ reconnects by itself) until it is back.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np
import torch

from impala.ale_vector_loop import actor_loop
from impala.assembly import assemble
from impala.auth import RunKeys, wait_for_keys
from impala.config import Config, parse_host_port
from impala.devices import resolve_device
from impala.environment_loop import EnvStep, agent_step
from impala.envs import describe_env
from impala.nets import Agent, CoreState
from impala.process import (
    DOWN_REASON_VARIABLE,
    PARENT_PID_VARIABLE,
    lower_priority,
    name_os_thread,
)
from impala.transport import ActorSocket, WireError, decode, encode
from impala.unroll.writer import UnrollWriter
from impala.weights import weights_schema

log = logging.getLogger("actor")

SEND_TIMEOUT_MS = 1000
WEIGHTS_REQUEST_TIMEOUT_S = 10.0
DOWN_REPORT_WAIT_S = 30.0
# Answers from the (authenticated) learner that fail the checks this many times in a row
# mean the two build different models, which waiting will not mend.
REJECTED_ANSWERS_LIMIT = 3


class LearnerMismatch(ValueError):
    """The learner's answers do not fit this actor's model (a ValueError: the command
    line says so and exits 2, as for other bad input)."""


class OrphanWatch(threading.Thread):
    """Sets `stop` when the supervising process has gone (e.g. its learner was killed -9),
    so no actor outlives the run that started it."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__(name="orphan-watch", daemon=True)
        self.stop = stop
        parent = os.environ.get(PARENT_PID_VARIABLE, "")
        self.parent_pid = int(parent) if parent.isdigit() else None

    def run(self) -> None:
        name_os_thread()
        if self.parent_pid is None:
            return
        while not self.stop.wait(1.0):
            if os.getppid() != self.parent_pid:
                log.warning("supervisor %d has gone: stopping", self.parent_pid)
                self.stop.set()


class WeightsClient:
    """Weight requests double as flow control.

    After sending its unrolls an actor asks for weights; before sending the next ones it
    waits for the answer. The learner answers only once it has read the earlier unrolls, so
    each actor has at most two unroll sets in flight and a slow learner slows its actors
    (bounded policy lag) instead of letting unrolls pile up in socket buffers.
    """

    def __init__(self, sock: ActorSocket, model: Agent, max_bytes: int, name: str) -> None:
        self._sock = sock
        self._model = model
        self._max_bytes = max_bytes
        self._name = name
        self._schemas = {"weights": weights_schema(model), "no_update": None}
        self.version = -1  # no weights from the learner yet
        self.run_frames = 0  # the run's frames when the newest weights were made
        self.rejected = 0  # answers that failed the wire checks
        self._rejected_in_a_row = 0
        self._requested_at: float | None = None  # an answer is awaited since then
        self._restart_asked = False  # the learner lost our frame streams (unroll/framestack.py)

    def request(self, timeout_ms: int = 0) -> bool:
        """Ask for weights newer than ours; False if the socket did not take the request
        within `timeout_ms` (the learner is unreachable, or the send queue is full)."""
        message = encode("weights_request", self._name, version=self.version)
        self._requested_at = time.time() if self._sock.send(message, timeout_ms) else None
        return self._requested_at is not None

    def request_after_unrolls(self, stop: threading.Event) -> bool:
        """Ask for weights right after sending unrolls, waiting while the send queue is
        full; False if `stop` was set. Never skipped: without the request there is no
        answer to wait for, so flow control would lapse and the actor would keep acting
        on old weights (measured: version 82 while the learner was at 155)."""
        while not self.request(SEND_TIMEOUT_MS):
            if stop.is_set():
                return False
        return True

    def await_answer(self, stop: threading.Event, learner: str) -> bool:
        """Wait for the answer to the last request and apply it; False if `stop` was set."""
        waited_s = 0
        while self._requested_at is not None:
            if stop.is_set():
                return False
            if self._poll(timeout_ms=1000):
                return True
            waited_s += 1
            if time.time() - self._requested_at > WEIGHTS_REQUEST_TIMEOUT_S:
                # Lost, e.g. the learner restarted: ask again.
                log.warning("%s: no answer from learner %s for %d s; asking again",
                            self._name, learner, waited_s)
                self.request()
        return True

    def _reject(self, error: WireError) -> None:
        """Count an answer that failed the checks; LearnerMismatch once
        REJECTED_ANSWERS_LIMIT come in a row."""
        self.rejected += 1
        self._rejected_in_a_row += 1
        log.warning("%s: ignored a message from the learner: %s", self._name, error)
        if self._rejected_in_a_row >= REJECTED_ANSWERS_LIMIT:
            raise LearnerMismatch(
                f"{self._name}: {self._rejected_in_a_row} answers in a row from the learner "
                f"did not fit this actor's model ({error}): the learner and this actor build "
                "different models. Run both from the same code with the same model flags "
                "(--agent_name, --level_name, --algorithm, --value_normalization, ...)")

    def take_restart_request(self) -> bool:
        """Whether the learner asked, since the last call, for the frame streams to start
        again with self-contained unrolls (it lost them: unroll/framestack.py)."""
        asked, self._restart_asked = self._restart_asked, False
        return asked

    def _poll(self, timeout_ms: int) -> bool:
        frames = self._sock.receive(timeout_ms)
        if frames is None:
            return False
        self._requested_at = None
        try:
            message = decode(frames, self._schemas, self._max_bytes)
        except WireError as exc:
            self._reject(exc)
            return True
        self._rejected_in_a_row = 0
        if message.meta.get("restart_streams") is True:
            self._restart_asked = True
        if message.kind == "weights":
            version = message.meta.get("version")
            if isinstance(version, int) and not isinstance(version, bool):
                state = {name: torch.from_numpy(array.copy())
                         for name, array in message.arrays.items()}
                self._model.load_state_dict(state)
                self.version = version
                frames = message.meta.get("run_frames", 0)
                if isinstance(frames, int) and not isinstance(frames, bool) and frames >= 0:
                    self.run_frames = frames
        return True


class Actor:
    def __init__(self, cfg: Config, stop: threading.Event, keys: RunKeys | None = None
                 ) -> None:
        self.cfg = cfg
        self.stop = stop
        self.name = f"actor-{cfg.task}"
        torch.set_num_threads(1)
        config = cfg.env_config
        base_seed = cfg.seed * 10_007 + cfg.task * 101
        self.envs = actor_loop(config, cfg.env_backend,
                               [base_seed + i for i in range(cfg.num_envs)])
        info = describe_env(config)
        torch.manual_seed(base_seed)
        # The batched forward pass runs on --actor_device; everything around it stays on
        # the CPU (environments, the unroll, the wire).
        self.device = resolve_device(cfg.actor_device, flag="--actor_device",
                                     tf32=cfg.tf32_allowed)
        parts = assemble(cfg, info, self.device, training=False)
        algorithm, self.model, self.layout = parts.algorithm, parts.model, parts.layout
        self.model.eval()
        # The algorithm's choice of actions, for this actor's place among the run's envs.
        first_env, total_envs = cfg.exploring_envs()
        self.exploration = algorithm.exploration(first_env, cfg.num_envs, total_envs)
        host, port = parse_host_port(cfg.learner_host)
        self.max_bytes = int(cfg.max_message_mb * 2**20)
        # Room for a whole set of unrolls and the weights request that follows it.
        self.sock = ActorSocket(host, port, self.max_bytes, send_hwm=cfg.num_envs + 1,
                                keys=keys)
        self.weights = WeightsClient(self.sock, self.model, self.max_bytes, self.name)
        self.writer = UnrollWriter(self.layout, cfg.num_envs)
        self.unrolls_sent = 0

    def _act_and_record(self, t: int, step: EnvStep, core: CoreState
                        ) -> tuple[np.ndarray, CoreState]:
        """Choose every env's action on `step` (step t of the unroll) and record both;
        returns the actions [N] and the agent's new core state."""
        output, core = agent_step(self.model, step, core, self.device)
        actions, recorded = self.exploration.act({name: head.cpu()
                                                  for name, head in output.heads.items()})
        self.writer.record(t, step, actions, recorded)
        return actions, core

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        log.info("%s: %d x %s, learner %s", self.name, self.cfg.num_envs, self.cfg.level_name,
                 self.cfg.learner_host)
        if self.exploration.describe():
            log.info("%s: %s", self.name, self.exploration.describe())
        if not self._wait_for_first_weights():
            return
        steps, overlap = self.cfg.unroll_length + 1, self.layout.overlap
        step = self.envs.reset()
        core = tuple(t.to(self.device) for t in self.model.initial_state(len(self.envs)))
        cores = [core] * steps  # the core state before each step of the unroll
        actions, core = self._act_and_record(0, step, core)
        start = 1  # the first unroll has no steps shared with a previous one
        last_report = time.time()
        while not self.stop.is_set():
            version = self.weights.version  # the policy that acts in this unroll
            self.exploration.at_frames(self.weights.run_frames)
            for t in range(start, steps):
                step = self.envs.step(actions)
                cores[t] = core
                actions, core = self._act_and_record(t, step, core)
            self.writer.record_core(cores[0])
            priorities = self.exploration.priorities(self.writer.recorded_steps())
            if not self.weights.await_answer(self.stop, self.cfg.learner_host):
                return
            if not self._send_unrolls(version, priorities):
                return
            if not self.weights.request_after_unrolls(self.stop):
                return
            # The next unroll starts with this one's last `overlap` steps.
            self.writer.shift()
            cores[:overlap] = cores[steps - overlap:]
            start = overlap
            if time.time() - last_report > 30:
                log.info("%s: %d unrolls sent, policy version %d", self.name, self.unrolls_sent,
                         self.weights.version)
                last_report = time.time()

    def _wait_for_first_weights(self) -> bool:
        while not self.stop.is_set():
            if not self.weights.request():  # learner not reachable yet
                time.sleep(0.5)
                continue
            if not self.weights.await_answer(self.stop, self.cfg.learner_host):
                return False
            if self.weights.version >= 0:
                log.info("%s: got weights version %d", self.name, self.weights.version)
                return True
            time.sleep(0.1)  # the learner is up but has not published its first weights
        return False

    def _send_unrolls(self, version: int, priorities: np.ndarray | None) -> bool:
        """Send one unroll per env; False if asked to stop while the learner was away."""
        if self.weights.take_restart_request():
            log.info("%s: the learner asked to restart the frame streams", self.name)
            self.writer.restart_streams()
        messages = self.writer.messages(self.name, version, self.envs.finished, priorities,
                                        self.exploration.episode_tags())
        for i, frames in enumerate(messages):
            waited = 0
            while not self.sock.send(frames, SEND_TIMEOUT_MS):
                if self.stop.is_set():
                    return False
                waited += 1
                if waited in (5, 30) or waited % 120 == 0:
                    log.warning("%s: learner %s is not taking unrolls (%d s); retrying",
                                self.name, self.cfg.learner_host, waited)
            self.envs.finished[i] = []
            self.unrolls_sent += 1
        self.writer.sent()
        return True

    def close(self) -> None:
        self.sock.close()
        self.envs.close()


def run_actor(cfg: Config, stop: threading.Event) -> None:
    lower_priority(cfg.actor_nice)
    OrphanWatch(stop).start()
    keys = None
    if cfg.auth == "curve":
        keys = wait_for_keys(cfg.run_dir, stop, log)
        if keys is None:  # stopped while waiting
            return
    if os.environ.get(DOWN_REASON_VARIABLE):
        report_down(cfg, keys, os.environ[DOWN_REASON_VARIABLE])
        return
    actor = Actor(cfg, stop, keys)
    try:
        actor.run()
    finally:
        actor.close()


def report_down(cfg: Config, keys: RunKeys | None, reason: str) -> None:
    """Tell the learner that this actor is left down and why (a weights request that
    carries the reason), waiting up to DOWN_REPORT_WAIT_S for its answer."""
    host, port = parse_host_port(cfg.learner_host)
    sock = ActorSocket(host, port, int(cfg.max_message_mb * 2**20), send_hwm=1, keys=keys)
    name = f"actor-{cfg.task}"
    try:
        message = encode("weights_request", name, version=-1, down=reason)
        deadline = time.time() + DOWN_REPORT_WAIT_S
        while time.time() < deadline:
            if sock.send(message, SEND_TIMEOUT_MS) and sock.receive(SEND_TIMEOUT_MS * 5):
                log.warning("%s: told learner %s that it is left down: %s", name,
                            cfg.learner_host, reason)
                return
        log.warning("%s: learner %s did not answer; it was not told why this actor is down",
                    name, cfg.learner_host)
    finally:
        sock.close()
