"""Weights & Biases tracking (`--wandb_project`): rank 0 sends every logs.csv row, the run's
flags and, at the end, curve.png to a W&B run whose folder is `<run_dir>/wandb/`.

W&B's own environment decides where the run goes: `WANDB_MODE` where it is set; else online
where W&B has an API key (`WANDB_API_KEY`, or a `wandb login` in ~/.netrc), offline
otherwise (`wandb sync <run_dir>/wandb/offline-run-*` uploads it later). A resumed run
continues the same W&B run: its id is kept in `<run_dir>/wandb-run-id`. The package is an
optional extra: `pip install '.[wandb]'`.
"""

from __future__ import annotations

import logging
import netrc
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from impala.meta import redact

log = logging.getLogger("learner")

RUN_ID_FILE = "wandb-run-id"
WANDB_HOST = "api.wandb.ai"


class TrackingUnavailable(ValueError):
    """--wandb_project was given where the wandb package cannot be imported."""


def import_wandb():
    try:
        import wandb
    except ImportError as exc:
        raise TrackingUnavailable(
            f"--wandb_project needs the wandb package ({exc}): install the project's extra, "
            "e.g. .venv/bin/pip install -e '.[wandb]'") from None
    return wandb


def wandb_mode(environ: Mapping[str, str], netrc_path: Path | None = None) -> str | None:
    """The mode to ask W&B for: None where WANDB_MODE is set (W&B reads it itself),
    "online" where an API key is known, "offline" otherwise."""
    if environ.get("WANDB_MODE"):
        return None
    if environ.get("WANDB_API_KEY") or _netrc_has_key(netrc_path):
        return "online"
    return "offline"


def _netrc_has_key(path: Path | None) -> bool:
    path = path or Path.home() / ".netrc"
    try:
        return netrc.netrc(str(path)).authenticators(WANDB_HOST) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def run_id(run_dir: Path) -> str:
    """The W&B run id of this run directory: made once, then read back on every resume."""
    path = run_dir / RUN_ID_FILE
    if path.exists():
        return path.read_text().strip()
    new = secrets.token_hex(4)
    path.write_text(new + "\n")
    return new


class WandbRun:
    """One W&B run for a training run (rank 0 only): `log` a logs.csv row, `finish` with
    the final picture."""

    def __init__(self, run_dir: Path, flags: dict[str, Any], project: str, entity: str = "",
                 group: str = "") -> None:
        wandb = import_wandb()
        self._wandb = wandb
        self._step = 0
        self._run = wandb.init(
            project=project, entity=entity or None, group=group or None,
            name=run_dir.name, id=run_id(run_dir), resume="allow", dir=str(run_dir),
            config=redact(flags), mode=wandb_mode(os.environ),
            # Training prints its own status; W&B's console capture and system-metrics
            # sampler would each take a thread and CPU from the learner.
            settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))
        log.info("W&B run %s (project %s, %s) in %s", self._run.id, project,
                 self._run.settings.mode, run_dir / "wandb")

    def log(self, row: Mapping[str, Any]) -> None:
        """One logs.csv row, at its frame count."""
        self._step = max(self._step, int(row["frames"]))
        self._run.log({key: value for key, value in row.items()
                       if isinstance(value, int | float)}, step=self._step)

    def finish(self, curve: Path | None, exit_code: int) -> None:
        if curve is not None and curve.exists():
            self._run.log({"curve": self._wandb.Image(str(curve))}, step=self._step)
        self._run.finish(exit_code=exit_code)
