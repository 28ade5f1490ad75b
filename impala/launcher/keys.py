"""Hand the run's CurveZMQ key file to every host before anything starts (see impala/auth.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from impala import auth
from impala.launcher import slurm, ssh
from impala.launcher.ssh import HostAccess, problems_in_parallel


@dataclass(frozen=True)
class KeyCopy:
    access: HostAccess | None  # the host's login; None for a Slurm node
    path: str  # the key file's path on that host
    lines: tuple[int, ...]  # CSV lines (or Slurm workers) that need it there
    node: slurm.SlurmNode | None = None  # with --slurm: the node, reached by srun


def copy_keys(local_run_dir: Path, copies: list[KeyCopy]) -> list[str]:
    """Create this run's keys here if it has none, then copy them to every remote host in
    parallel (mode 0600). The problems found, all of them; the secret is never shown."""
    keys = auth.ensure_keys(local_run_dir)
    content = (keys.to_json() + "\n").encode()

    def copy(item: KeyCopy) -> str | None:
        try:
            if item.node is not None:
                slurm.put_private_file(item.node, item.path, content)
                return None
            assert item.access is not None
            ssh.put_private_file(item.access, item.path, content)
        except ConnectionError as exc:
            if item.node is not None:
                return f"cannot copy the run's keys to Slurm node {item.node.name}: {exc}"
            lines = ", ".join(str(n) for n in item.lines)
            return f"cannot copy the run's keys: {exc} (CSV line {lines})"
        return None

    return problems_in_parallel(copy, copies)
