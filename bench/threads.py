"""Each thread's share of a core in a running process, sampled from /proc: where a learner's
(or an actor's) CPU goes while it trains, by the names the toolkit gives its threads
(`unroll-receiver`, `publisher`, `actor-supervis[or]`; ZeroMQ names its own `ZMQbg/...`).
The main thread, whose id is the process's, trains or steps the environments; threads left
unnamed carry the process's name: torch's intra-op threads (`--learner_threads`) among them.

  python bench/threads.py PID [--seconds 10]
  python bench/threads.py --pid_from RUN_DIR/learner-0.log    # the learner ("rank 0 (pid N)")
  python bench/threads.py --pid_from RUN_DIR/learner-0.log --label "started actor 0"

A thread near 1.00 core is the one a faster machine would not help; in a run whose learner
is the bound (queue_depth full in logs.csv), the main thread's share says whether it waits
for the CPU and Python's lock (well under 1) or computes (near 1).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_ticks(pid: int) -> dict[int, tuple[str, int]]:
    """{thread id: (name, user + system clock ticks so far)} of process `pid`."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended between the listing and the read
        # The name is in parentheses and may hold spaces; the fields after it are plain.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        threads[int(task.name)] = (name, int(fields[11]) + int(fields[12]))  # utime, stime
    return threads


def sample(pid: int, seconds: float) -> list[tuple[int, str, float]]:
    """[(thread id, name, cores used)] over `seconds`, busiest first; a thread that
    started during the sample counts from its start."""
    before = thread_ticks(pid)
    time.sleep(seconds)
    after = thread_ticks(pid)
    rows = []
    for tid, (name, ticks) in after.items():
        used = (ticks - before.get(tid, (name, 0))[1]) / TICKS_PER_S / seconds
        rows.append((tid, f"main ({name})" if tid == pid else name, used))
    return sorted(rows, key=lambda row: -row[2])


def pid_from_log(log: Path, label: str) -> int:
    """The pid a learner's log gives after `label` ("rank 0 (pid 2483)", "started actor 3
    (pid 2534)"); the last one, so a resumed run's."""
    try:
        text = log.read_text()
    except OSError as error:
        raise SystemExit(f"{log}: cannot read it ({error.strerror}); has the run started?"
                         ) from None
    found = re.findall(re.escape(label) + r" \(pid (\d+)\)", text)
    if not found:
        raise SystemExit(f"{log}: no '{label} (pid N)' in it yet")
    return int(found[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pid", type=int, nargs="?")
    parser.add_argument("--pid_from", type=Path, help="a learner's log naming the pid")
    parser.add_argument("--label", default="rank 0", help="what precedes '(pid N)' there")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if (args.pid is None) == (args.pid_from is None):
        parser.error("give a PID or --pid_from=LOG")
    pid = args.pid if args.pid is not None else pid_from_log(args.pid_from, args.label)
    if not Path(f"/proc/{pid}").exists():
        sys.exit(f"no process {pid} (it ended, or this is not Linux)")
    try:
        process_name = Path(f"/proc/{pid}/comm").read_text().strip()
        rows = sample(pid, args.seconds)
    except FileNotFoundError:
        sys.exit(f"process {pid} ended during the sample")
    print(f"process {pid}, {args.seconds:.0f} s: {sum(r[2] for r in rows):.2f} cores in "
          f"{len(rows)} threads")
    print("| thread | id | cores |\n| --- | ---: | ---: |")
    for tid, name, used in rows:
        if used >= 0.005 or name != process_name:  # idle unnamed threads are many and alike
            print(f"| {name} | {tid} | {used:.2f} |")


if __name__ == "__main__":
    main()
