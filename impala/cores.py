"""How many of this host's cores the processes of a run take by default: the cores this
process may use, the actors that fill them beside a learner, and a learner socket's I/O
threads. The flags that override each are in Config."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


def default_actor_count() -> int:
    """Actors that fill this host's cores beside a learner: one per core but two (the
    learner's and the rest of the host's), at least two."""
    return max(2, usable_cores() - 2)


def learner_io_threads(flag: int) -> int:
    """The learner socket's ZeroMQ I/O threads: `flag`, or for 0 one per 8 cores of this
    host (1 to 4). A learner fed by a host full of actors serves each of them a copy of
    its weights per unroll set; under CURVE, one I/O thread encrypts ~1 GB/s,
    about what 8-16 actor cores ask for."""
    return flag or min(4, max(1, usable_cores() // 8))
