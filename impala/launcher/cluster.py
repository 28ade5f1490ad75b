"""The cluster CSV -> validated WorkerSpecs -> learner groups.

Columns of the original project (kept verbatim):
  job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password
`port` is accepted for `tf_port`. Optional: num_envs, python, workdir, ssh_key.
Every problem in the file is reported at once, each with its line and column.
"""

from __future__ import annotations

import csv
import ipaddress
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

REQUIRED = ("job", "ip")
PORT_COLUMNS = ("tf_port", "port")
ORIGINAL = ("job", "ip", "tf_port", "cuda_visible_devices", "ssh_port", "ssh_username",
            "ssh_password")
OPTIONAL = ("port", "num_envs", "python", "workdir", "ssh_key")
JOBS = ("learner", "actor")
# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens.
HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
# POSIX-portable user names; never starting with '-', which ssh would read as an option.
USERNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")


class ClusterFileError(ValueError):
    """All problems found in a cluster CSV; str() lists them, one per line."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class WorkerSpec:
    job: str  # learner or actor
    ip: str
    port: int  # learners bind it; the actor's own port is informational
    line: int  # line in the CSV (the header is line 1)
    cuda_visible_devices: str = ""
    ssh_port: int = 22
    ssh_username: str = ""  # empty: the current user, or User from ssh_config
    ssh_password: str = field(default="", repr=False)  # never printed
    ssh_key: str = ""
    num_envs: int | None = None
    python: str = ""  # empty: the launcher's default for that host
    workdir: str = ""

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


@dataclass(frozen=True)
class LearnerGroup:
    rank: int
    learner: WorkerSpec
    actors: tuple[WorkerSpec, ...]


def read_cluster_csv(path: str | Path) -> list[WorkerSpec]:
    """Parse and validate the CSV; raises ClusterFileError listing every problem."""
    path = Path(path)
    if not path.is_file():
        raise ClusterFileError(path, ["file not found"])
    problems = _field_count_problems(path)
    if problems:
        raise ClusterFileError(path, problems)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True,
                            index_col=False)
    except pd.errors.EmptyDataError:
        raise ClusterFileError(path, ["the file is empty; expected a header line: "
                                      + ",".join(ORIGINAL)]) from None
    except pd.errors.ParserError as exc:
        raise ClusterFileError(path, [f"not a valid CSV: {exc}"]) from None
    table.columns = [str(c).strip() for c in table.columns]
    problems = _column_problems(list(table.columns))
    if problems:
        raise ClusterFileError(path, problems)
    if table.empty:
        raise ClusterFileError(path, ["no rows after the header: at least one learner is "
                                      "needed"])
    workers, problems = [], []
    for index, row in table.iterrows():
        worker = _parse_row({k: str(v).strip() for k, v in row.items()}, int(index) + 2,
                            problems)
        if worker is not None:
            workers.append(worker)
    problems += _cluster_problems(workers)
    if problems:
        raise ClusterFileError(path, problems)
    learners = [w for w in workers if w.job == "learner"]
    actors = [w for w in workers if w.job == "actor"]
    if len(learners) > len(actors):
        warnings.warn(f"{path}: {len(learners)} learners but only {len(actors)} actors: "
                      "some learners will have no actors and wait", stacklevel=2)
    return workers


def _field_count_problems(path: Path) -> list[str]:
    """Rows with more fields than the header: a trailing comma, or a comma inside a value
    (pandas would shift such a row's values, or take its first column as an index). Fewer
    fields are fine: the missing trailing values are empty."""
    try:
        with open(path, newline="") as file:
            rows = [(number, row) for number, row in enumerate(csv.reader(file), start=1)]
    except (UnicodeDecodeError, csv.Error) as exc:
        return [f"not a valid CSV: {exc}"]
    rows = [(number, row) for number, row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return []
    header_line, header = rows[0]
    problems = []
    if header and not header[-1].strip():
        problems.append(f"line {header_line}, column {len(header)}: empty column name (a "
                        "trailing comma?)")
    for number, row in rows[1:]:
        if len(row) > len(header):
            problems.append(f"line {number}, column {len(header) + 1}: {len(row)} fields, "
                            f"but the header has {len(header)} columns (a trailing comma, or "
                            "a comma inside a value?)")
    return problems


def _column_problems(columns: list[str]) -> list[str]:
    problems = []
    missing = [c for c in REQUIRED if c not in columns]
    if not any(c in columns for c in PORT_COLUMNS):
        missing.append("tf_port (or port)")
    if missing:
        problems.append(f"line 1: missing column(s): {', '.join(missing)}; expected "
                        f"{','.join(ORIGINAL)}")
    unknown = [c for c in columns if c not in ORIGINAL + OPTIONAL]
    if unknown:
        problems.append(f"line 1: unknown column(s): {', '.join(unknown)}; allowed: "
                        f"{', '.join(ORIGINAL + OPTIONAL)}")
    if "tf_port" in columns and "port" in columns:
        problems.append("line 1: both tf_port and port are given; keep one")
    return problems


def _parse_int(value: str, line: int, column: str, low: int, high: int,
               problems: list[str]) -> int | None:
    try:
        number = int(value)
    except ValueError:
        problems.append(f"line {line}, column {column}: expected an integer in "
                        f"{low}..{high}, got {value!r}")
        return None
    if not low <= number <= high:
        problems.append(f"line {line}, column {column}: {number} is out of range "
                        f"{low}..{high}")
        return None
    return number


def _parse_row(row: dict[str, str], line: int, problems: list[str]) -> WorkerSpec | None:
    before = len(problems)
    job = row["job"].lower()
    if job not in JOBS:
        problems.append(f"line {line}, column job: expected learner or actor, got "
                        f"{row['job']!r}")
    ip = row["ip"]
    if not _is_host(ip):
        problems.append(f"line {line}, column ip: expected a host name or IP address, got "
                        f"{ip!r}")
    username = row.get("ssh_username", "")
    if username and not USERNAME.fullmatch(username):
        problems.append(f"line {line}, column ssh_username: expected a user name (letters, "
                        f"digits, '.', '_', '-', not starting with '-'), got {username!r}")
    if job == "learner" and row.get("ssh_password"):
        problems.append(f"line {line}, column ssh_password: learners are started by mpirun, "
                        "whose ssh cannot take a password; give this host a key (ssh_key "
                        "column or ssh_config) and leave the password empty")
    port_column = "tf_port" if "tf_port" in row else "port"
    port = _parse_int(row[port_column], line, port_column, 1, 65535, problems)
    ssh_port = 22
    if row.get("ssh_port"):
        ssh_port = _parse_int(row["ssh_port"], line, "ssh_port", 1, 65535, problems)
    num_envs = None
    if row.get("num_envs"):
        num_envs = _parse_int(row["num_envs"], line, "num_envs", 1, 4096, problems)
    if len(problems) > before:
        return None
    return WorkerSpec(
        job=job, ip=ip, port=port, line=line,
        cuda_visible_devices=row.get("cuda_visible_devices", ""),
        ssh_port=ssh_port, ssh_username=row.get("ssh_username", ""),
        ssh_password=row.get("ssh_password", ""), ssh_key=row.get("ssh_key", ""),
        num_envs=num_envs, python=row.get("python", ""), workdir=row.get("workdir", ""),
    )


def _is_host(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(HOSTNAME.fullmatch(value)) and len(value) <= 253


def _cluster_problems(workers: list[WorkerSpec]) -> list[str]:
    problems = []
    seen: dict[str, int] = {}
    for worker in workers:
        if worker.address in seen:
            problems.append(f"line {worker.line}, columns ip/tf_port: {worker.address} is "
                            f"already used on line {seen[worker.address]}")
        else:
            seen[worker.address] = worker.line
    if workers and not any(w.job == "learner" for w in workers):
        problems.append("no learner: at least one row must have job=learner")
    return problems


def learner_groups(workers: list[WorkerSpec]) -> list[LearnerGroup]:
    """Actor i (in file order) serves learner i mod L, as in the original project."""
    learners = [w for w in workers if w.job == "learner"]
    actors = [w for w in workers if w.job == "actor"]
    return [LearnerGroup(rank, learner, tuple(actors[rank::len(learners)]))
            for rank, learner in enumerate(learners)]
