"""Distributed IMPALA (V-trace actor-critic) in PyTorch.

The algorithm (`vtrace`, `losses`, `nets`) is plain tensor code with no process or network
logic; `actor`, `learner`, `transport` and `distributed` run it across processes and hosts;
`launcher` starts whole clusters from a CSV of hosts.
"""

__version__ = "0.1.0"
