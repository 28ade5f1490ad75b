"""Slow NumPy references written from the papers, shared by the tests that hold the tensor
code to them: step by step, with Python loops."""

from __future__ import annotations

import math

import numpy as np


def slow_h(x: float, eps: float = 1e-3) -> float:
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + eps * x


def slow_targets(rewards, done, online_q, target_q, gamma, n, rescaled):
    """Per (t, b): walk forward up to n steps (not past the unroll's end), summing
    discounted rewards and stopping at an episode end; then bootstrap with the target
    network's value of the online network's greedy action."""
    steps, batch = rewards.shape[0] - 1, rewards.shape[1]
    out = np.zeros((steps, batch))
    for b in range(batch):
        for t in range(steps):
            total, discount, ended = 0.0, 1.0, False
            s = t
            for _ in range(n):
                if s + 1 > steps:
                    break
                s += 1
                total += discount * rewards[s, b]
                discount *= gamma
                if done[s, b]:
                    ended = True
                    break
            if not ended:
                best = int(np.argmax(online_q[s, b]))
                value = target_q[s, b, best]
                if rescaled:  # invert h numerically: bisection on the monotone h
                    lo, hi = -1e6, 1e6
                    for _ in range(200):
                        mid = (lo + hi) / 2
                        lo, hi = (mid, hi) if slow_h(mid) < value else (lo, mid)
                    value = (lo + hi) / 2
                total += discount * value
            out[t, b] = slow_h(total) if rescaled else total
    return out
