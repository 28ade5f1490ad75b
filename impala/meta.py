"""meta.json: what a run was. The flags (no secrets), the preset's values, the algorithm's
curve panels, git commit and dirty flag, host, Python, start and end time, exit status, and
how many times the run was started."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SECRET_WORDS = ("password", "secret", "token", "key")


def git_state(repo: Path) -> dict[str, Any]:
    """The commit and whether the tree is dirty; nothing if this is not a git checkout.

    Dirty means tracked files that differ from the commit, outside `results/`: that folder
    is what runs write (rows, episodes, the suite's saved states), so a run in progress
    beside another would otherwise mark every row dirty though the code is the commit's.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".",
                         ":(exclude)results"))
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}
    return {"git_commit": commit or None, "git_dirty": dirty if commit else None}


def redact(flags: dict[str, Any]) -> dict[str, Any]:
    """Drop anything that looks like a secret before it is written anywhere."""
    return {k: v for k, v in flags.items() if not any(w in k.lower() for w in SECRET_WORDS)}


class RunMeta:
    """meta.json: written at start, completed with end time and exit status at the end."""

    def __init__(self, run_dir: Path, flags: dict[str, Any], role: str,
                 preset: dict[str, Any] | None = None,
                 panels: list[dict[str, Any]] | None = None) -> None:
        self.path = run_dir / "meta.json"
        previous = self._read()
        repo = Path(__file__).resolve().parent.parent
        self.data = {
            "flags": redact(flags),
            # The preset's values (flags["preset"] names it); each flag the user did not
            # set took its value from here.
            "preset_values": preset or {},
            # The algorithm's curve panels (impala.algorithm.Panel), for curves.py.
            "panels": panels or [],
            "role": role,
            "host": socket.gethostname(),
            "python": sys.version.split()[0],
            **git_state(repo),
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "end_time": None,
            "exit_status": "running",
            "starts": previous.get("starts", 0) + 1,
        }
        self._write()

    def _read(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def _write(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    def finish(self, exit_status: str, **extra: Any) -> None:
        self.data.update(end_time=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                         exit_status=exit_status, **extra)
        self._write()
