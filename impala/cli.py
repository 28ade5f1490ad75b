"""Entry points: `experiment.py` (every role) and `run_experiment_mm_raw.py` (the frontend)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import NoReturn

from impala.config import Config
from impala.flags import parse_config
from impala.logs import setup_logging
from impala.signals import act_on_signals

log = logging.getLogger("experiment")


SHUTDOWN_BOUND_S = 10.0  # after every rank's save, when one negotiation round is left


def install_stop_handlers(stop: threading.Event) -> None:
    """SIGINT/SIGTERM/SIGUSR1 set `stop` (the learner then checkpoints and exits 0); a
    second SIGINT interrupts at once. SIGUSR1 is what the frontend sends through mpirun,
    which forwards it to every rank at once."""

    def request_stop(signum: int) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():  # scancel signals every process, and mpirun forwards it too
            log.info("received %s again: the stop is under way", name)
        else:
            log.info("received %s: stopping", name)
        stop.set()

    act_on_signals((signal.SIGINT, signal.SIGTERM, signal.SIGUSR1), request_stop,
                   interrupt_on_repeat=True)


def exit_now(code: int = 0) -> NoReturn:
    """End without the interpreter's teardown. An actor that has closed its socket and
    environments: its final garbage collection buys nothing here, and on a loaded machine,
    at the actor's lower priority, can outlast the supervisor's grace after SIGTERM, so that
    a clean stop ends in a kill. A learner whose Horovod shutdown did not end (mpirun is
    ending the job): Horovod's exit hook would wait for it again."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_learner(cfg: Config, stop: threading.Event, supervised_actors: bool) -> int:
    from impala.distributed import create_backend
    from impala.learner import Learner

    backend = create_backend(cfg.allreduce_backend, cfg.device_for())
    run_dir = cfg.run_dir
    setup_logging(run_dir / f"learner-{backend.rank}.log", f"learner-{backend.rank}")
    if backend.name != cfg.allreduce_backend:
        log.info("not started by mpirun: running as a single learner (no %s allreduce)",
                 cfg.allreduce_backend)
    supervisor, status = None, "error"
    try:
        learner = Learner(cfg, backend, stop)
        if supervised_actors:
            from impala.local import ActorSupervisor

            supervisor = ActorSupervisor(cfg, run_dir, stopping=stop)
            supervisor.start()
        status = learner.run()
    finally:
        if supervisor is not None:
            supervisor.stop()
        if not backend.shutdown(SHUTDOWN_BOUND_S if status != "error" else None):
            log.info("learner exit status: %s", status, exc_info=sys.exc_info()[1])
            exit_now(exit_code(status))
    log.info("learner exit status: %s", status)
    return exit_code(status)


def exit_code(status: str) -> int:
    return 0 if status in ("finished", "stopped") else 1


def experiment_main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    stop = threading.Event()
    install_stop_handlers(stop)
    from impala.checkpoint import CheckpointError

    try:
        if cfg.mode == "test":
            from impala.evaluate import test

            setup_logging(None, "test")
            test(cfg)
            return 0
        if cfg.mode == "video":
            from impala.evaluate import video

            setup_logging(None, "video")
            video(cfg)
            return 0
        if cfg.job_name == "actor":
            from impala.actor import run_actor

            setup_logging(None, f"actor-{cfg.task}")
            run_actor(cfg, stop)
            exit_now()
        return _run_learner(cfg, stop, supervised_actors=cfg.job_name == "local")
    except (CheckpointError, OSError, ValueError) as exc:
        log.error("%s", exc)
        print(f"error: {exc}", file=sys.stderr)
        return 2


def frontend_main(argv: list[str] | None = None) -> int:
    from impala.launcher.frontend import main

    return main(argv)


if __name__ == "__main__":
    sys.exit(experiment_main())
