"""Shared by the benchmarks: the machine, the commit, a printed table, a CSV of results.

Each benchmark prints a table and appends its rows to bench/results/<name>.csv with the
machine (cores, CPU model, torch threads) and the git commit, so numbers can be compared
across machines and commits.
"""

from __future__ import annotations

import csv
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))
import impala  # noqa: E402,F401 - OpenMP settings of the real processes, before torch loads
from impala.meta import git_state  # noqa: E402


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    """The short commit, with `-dirty` where the code differs from it (meta.git_state)."""
    state = git_state(ROOT)
    if not state["git_commit"]:
        return "unknown"
    return state["git_commit"][:7] + ("-dirty" if state["git_dirty"] else "")


def machine() -> dict[str, object]:
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": git_commit(),
            "cores": os.cpu_count(), "cpu": cpu_model()}


def machine_name() -> str:
    """The machine as runs.csv names it: `h200-16core` on a GPU, `vm-2core-cpu` on a CPU."""
    cores = os.cpu_count()
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0).lower()
            model = next((m for m in ("h200", "h100", "a100") if m in gpu), "gpu")
            return f"{model}-{cores}core"
    except ImportError:
        pass
    return f"vm-{cores}core-cpu"


def report(name: str, rows: list[dict[str, object]], columns: list[str]) -> None:
    """Print `rows` as a table and append them, with the machine, to results/<name>.csv."""
    widths = {c: max(len(c), *(len(_cell(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.rjust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(_cell(row.get(c)).rjust(widths[c]) for c in columns))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.csv"
    info = machine()
    fields = list(info) + columns
    earlier, earlier_fields = _read_results(path)
    if earlier_fields and earlier_fields != fields:
        # A benchmark that gained a column: rewrite the file under the union of both
        # headers (old rows get empty cells), never rows wider than their header.
        fields = earlier_fields + [c for c in fields if c not in earlier_fields]
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(earlier)
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if not earlier_fields:
            writer.writeheader()
        for row in rows:
            writer.writerow({**info, **row})
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"(appended to {shown}; {info['cores']} cores, {info['cpu']}, "
          f"commit {info['commit']})")


def _read_results(path: Path) -> tuple[list[dict[str, str]], list[str]]:
    """The rows and header of a results CSV ([] and [] if there is none); a row with more
    cells than the header is refused, naming the file and line."""
    if not path.exists():
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        fields = list(reader.fieldnames or [])
    for line, row in enumerate(rows, start=2):
        if None in row:
            raise ValueError(f"{path}: line {line} has {len(fields) + len(row[None])} cells "
                             f"under a header of {len(fields)}; fix or move the file")
    return rows, fields


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.0f}"
    return "" if value is None else str(value)
