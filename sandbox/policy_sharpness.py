"""Is an IMPALA policy's spread costing it score? Play a run's checkpoint on the same seeds
in three ways: as it is evaluated and trained (actions sampled from the policy), greedily
(its most likely action) and uniformly at random, and report each one's returns and how
sharp the distribution it acted with was over the steps played: its mean entropy (nats, of
log(A) for a uniform choice) and the mean probability of its most likely action.

  .venv/bin/python sandbox/policy_sharpness.py --run_dir=runs/suite/impala-battlezone-v5-s1

A greedy return well above the sampled one, from a policy near uniform, says the policy
ranks its actions well but the entropy bonus keeps it from acting on that ranking. A third
row plays uniformly random actions on the same seeds, the floor both stand on: where the
trained policy's games last no longer than these, it has not learned to stay alive.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from impala.algorithms.impala import POLICY  # noqa: E402
from impala.algorithms.impala.loss import sample_actions  # noqa: E402
from impala.diagnose import run_config  # noqa: E402
from impala.envs import create_env  # noqa: E402
from impala.evaluate import play_agent, play_episodes  # noqa: E402

ACTINGS = ("sampled", "greedy", "uniform")


class Sharpness:
    """The evaluation action, sampled from the policy, its most likely action, or uniformly
    random, noting at each step the sharpness of the distribution it acts with."""

    def __init__(self, acting: str) -> None:
        self.acting = acting
        self.entropies: list[float] = []
        self.top_probabilities: list[float] = []

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = heads[POLICY]  # [1, B, A]
        if self.acting == "uniform":
            logits = torch.zeros_like(logits)
        probabilities = torch.softmax(logits, dim=-1)
        entropy = -(probabilities * torch.log_softmax(logits, dim=-1)).sum(dim=-1)
        self.entropies.extend(entropy.flatten().tolist())
        self.top_probabilities.extend(probabilities.amax(dim=-1).flatten().tolist())
        if self.acting == "greedy":
            return logits.argmax(dim=-1)
        return sample_actions(logits)  # the draw IMPALA evaluates and acts with


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run_dir", type=Path, required=True)
    parser.add_argument("--episodes", type=int, default=10, help="games per way of acting")
    parser.add_argument("--seed", type=int, default=1000)
    args = parser.parse_args(argv)
    cfg = run_config(args.run_dir)
    if cfg.algorithm != "impala":
        parser.error(f"{args.run_dir} is a {cfg.algorithm} run; this reads IMPALA's policy")
    parts, frames = play_agent(cfg)
    torch.manual_seed(args.seed)
    seeds = [args.seed + i for i in range(args.episodes)]
    uniform = math.log(parts.model.num_actions)
    print(f"{args.run_dir}: {frames} frames; a uniform policy's entropy {uniform:.3f} nats")
    print("| acting | mean return | std | mean length | mean entropy | mean top probability |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in ACTINGS:
        acting = Sharpness(name)
        games = []
        for seed in seeds:  # one at a time: only steps of a game still playing are noted
            env = create_env(cfg.env_config)
            with torch.no_grad():
                games += play_episodes(parts.model, acting, [env], [seed])
            env.close()
        returns = np.array([r for r, _ in games])
        print(f"| {name} | {returns.mean():.1f} | "
              f"{returns.std():.1f} | {np.mean([n for _, n in games]):.0f} | "
              f"{np.mean(acting.entropies):.3f} | {np.mean(acting.top_probabilities):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
