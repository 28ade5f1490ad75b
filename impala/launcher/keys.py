"""Hand the run's CurveZMQ key file to every host before anything starts (see impala/auth.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from impala import auth
from impala.launcher.ssh import HostAccess, problems_in_parallel, put_private_file


@dataclass(frozen=True)
class KeyCopy:
    access: HostAccess
    path: str  # the key file's path on that host
    lines: tuple[int, ...]  # CSV lines that need it there


def copy_keys(local_run_dir: Path, copies: list[KeyCopy]) -> list[str]:
    """Create this run's keys here if it has none, then copy them to every remote host in
    parallel (mode 0600). The problems found, all of them; the secret is never shown."""
    keys = auth.ensure_keys(local_run_dir)
    content = (keys.to_json() + "\n").encode()

    def copy(item: KeyCopy) -> str | None:
        try:
            put_private_file(item.access, item.path, content)
        except ConnectionError as exc:
            lines = ", ".join(str(n) for n in item.lines)
            return f"cannot copy the run's keys: {exc} (CSV line {lines})"
        return None

    return problems_in_parallel(copy, copies)
