"""Hand the run's CurveZMQ key file to every host before anything starts (see impala/auth.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from impala import auth
from impala.launcher import slurm, ssh
from impala.launcher.ssh import HostAccess, problems_in_parallel


@dataclass(frozen=True)
class KeyCopy:
    where: HostAccess | slurm.SlurmNode  # a host's login (ssh), or a Slurm node (srun)
    path: str  # the key file's path on that host
    lines: tuple[int, ...]  # CSV lines (or Slurm workers) that need it there


def copy_keys(local_run_dir: Path, copies: list[KeyCopy]) -> list[str]:
    """Create this run's keys here if it has none, then copy them to every remote host in
    parallel (mode 0600). The problems found, all of them; the secret is never shown."""
    keys = auth.ensure_keys(local_run_dir)
    content = (keys.to_json() + "\n").encode()

    def copy(item: KeyCopy) -> str | None:
        on_node = isinstance(item.where, slurm.SlurmNode)
        try:
            (slurm if on_node else ssh).put_private_file(item.where, item.path, content)
        except ConnectionError as exc:
            if on_node:
                return f"cannot copy the run's keys to Slurm node {item.where.name}: {exc}"
            lines = ", ".join(str(n) for n in item.lines)
            return f"cannot copy the run's keys: {exc} (CSV line {lines})"
        return None

    return problems_in_parallel(copy, copies)
