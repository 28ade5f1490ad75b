"""Distributed IMPALA (V-trace actor-critic) in PyTorch.

The algorithm (`vtrace`, `losses`, `nets`) is plain tensor code with no process or network
logic; `actor`, `learner`, `transport` and `distributed` run it across processes and hosts;
`launcher` starts whole clusters from a CSV of hosts.
"""

import os

__version__ = "0.1.0"

# OpenMP threads spin while they wait (for the next parallel region, or for a sibling the
# kernel preempted). Where a learner shares cores with actors that spinning is CPU taken
# from the actors: a 2-thread learner spent 1.05 core-ms per sample in a Pong run against
# 0.76 alone. Sleeping costs nothing measurable on dedicated cores.
# libgomp reads this once, when torch loads it; a value the user set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
