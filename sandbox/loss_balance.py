"""How hard does each term of IMPALA's loss pull on the network, game by game? Play a run's
checkpoint as its actors do (actions sampled from the policy), cut the steps into unrolls of
the run's length, and over batches of the run's size measure the gradient of the policy
gradient term and of the weighted entropy bonus, each alone, with respect to the network's
weights: their norms, the ratio of the two, and the cosine between them, for each batch
(what one update sees: mostly the policy gradient's noise) and for their mean over all the
batches (what many updates add up to, the noise shrunk by the square root of their count), and
for the expectation of each gradient, estimated without the noise from the two halves of
the steps played.

  .venv/bin/python sandbox/loss_balance.py --run_dir=runs/suite/impala-breakout-v5-s1

The entropy weight is a fixed number against a policy gradient whose size is the size of
the game's advantages (rewards clipped to [-1, 1], so a game with rare rewards has small
ones). A ratio far below the other games' says the bonus, not the return, steers that
game's policy. The batch is on-policy (the checkpoint acted), so V-trace's weights are 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import common  # noqa: E402

from impala.algorithms.impala import BASELINE, POLICY, vtrace  # noqa: E402
from impala.algorithms.impala.loss import (  # noqa: E402
    baseline_loss,
    entropy_loss,
    policy_gradient_loss,
    sample_actions,
)
from impala.diagnose import run_config  # noqa: E402
from impala.environment_loop import EnvironmentLoop, agent_step  # noqa: E402
from impala.envs import create_env  # noqa: E402
from impala.evaluate import play_agent  # noqa: E402
from impala.rewards import clip_rewards  # noqa: E402

FIELDS = ("observation", "last_action", "reward", "done")


@torch.no_grad()
def play(model, cfg, envs: int, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """`steps` steps of `envs` games, actions sampled from the policy: each field
    [steps, envs, ...], with `action` [steps, envs] the action taken at each step."""
    loop = EnvironmentLoop([create_env(cfg.env_config) for _ in range(envs)])
    step = loop.reset([seed + i for i in range(envs)])
    core = model.initial_state(envs)
    seen: dict[str, list[np.ndarray]] = {name: [] for name in (*FIELDS, "action")}
    for _ in range(steps):
        output, core = agent_step(model, step, core)
        action = sample_actions(output.heads[POLICY])[0].numpy()
        for name in FIELDS:
            seen[name].append(getattr(step, name))
        seen["action"].append(action)
        step = loop.step(action)
    loop.close()
    return {name: torch.from_numpy(np.stack(values)) for name, values in seen.items()}


def unrolls(played: dict[str, torch.Tensor], length: int) -> list[dict[str, torch.Tensor]]:
    """Unrolls of `length` + 1 steps, each starting on the last step of the one before (the
    learner's convention), one per environment and time slice: fields [length + 1, 1, ...]."""
    total, envs = played["action"].shape
    return [{name: values[start:start + length + 1, env:env + 1]
             for name, values in played.items()}
            for start in range(0, total - length, length) for env in range(envs)]


def batch_of(pieces: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {name: torch.cat([piece[name] for piece in pieces], dim=1) for name in pieces[0]}


def gradient(term: torch.Tensor, model, keep: bool = False) -> torch.Tensor:
    """d term / d weights, flat; zeros for the weights it does not reach (the value head)."""
    weights = list(model.parameters())
    grads = torch.autograd.grad(term, weights, retain_graph=keep, allow_unused=True)
    return torch.cat([(torch.zeros_like(w) if g is None else g).flatten()
                      for w, g in zip(weights, grads, strict=True)])


def pulls(model, cfg, batch: dict[str, torch.Tensor]
          ) -> tuple[dict[str, float], torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of the three terms over one batch [T + 1, B, ...], each alone: figures
    of the batch, and the flat gradients [weights] of the policy gradient, the weighted
    entropy bonus and the weighted baseline loss."""
    output, _ = model(*(batch[name] for name in FIELDS),
                      model.initial_state(batch["action"].shape[1]))
    logits, values = output.heads[POLICY], output.heads[BASELINE]
    rewards = clip_rewards(batch["reward"][1:].float(), cfg.reward_clipping)
    discounts = (~batch["done"][1:].bool()).float() * cfg.discounting
    returns = vtrace.from_logits(
        behavior_policy_logits=logits[:-1].detach(), target_policy_logits=logits[:-1].detach(),
        actions=batch["action"][:-1], discounts=discounts, rewards=rewards,
        values=values[:-1].detach(), bootstrap_value=values[-1].detach())
    pg = policy_gradient_loss(logits[:-1], batch["action"][:-1], returns.pg_advantages)
    neg_entropy = entropy_loss(logits[:-1])
    bonus = cfg.algorithm_flags.entropy_cost * neg_entropy
    value = cfg.algorithm_flags.baseline_cost * baseline_loss(returns.vs - values[:-1])
    g_pg, g_bonus = gradient(pg, model, keep=True), gradient(bonus, model, keep=True)
    g_value = gradient(value, model)
    figures = {"abs_advantage": float(returns.pg_advantages.abs().mean()),
               "reward_steps": float((rewards != 0).float().mean()),
               "entropy": float(-neg_entropy.detach() / rewards.numel()),
               **compare(g_pg, g_bonus), **against_value(g_pg, g_value)}
    return figures, g_pg, g_bonus, g_value


def against_value(g_pg: torch.Tensor, g_value: torch.Tensor) -> dict[str, float]:
    """The weighted baseline term's pull beside the policy gradient's: under one global
    clip of their sum, the larger one sets how far the other may move the weights."""
    return {"value_norm": float(g_value.norm()),
            "value_ratio": float(g_value.norm() / g_pg.norm())}


def compare(g_pg: torch.Tensor, g_bonus: torch.Tensor) -> dict[str, float]:
    return {"pg_norm": float(g_pg.norm()), "bonus_norm": float(g_bonus.norm()),
            "ratio": float(g_pg.norm() / g_bonus.norm()),
            "cosine": float(torch.nn.functional.cosine_similarity(g_pg, g_bonus, dim=0))}


class Halves:
    """One term's gradient summed over the batches of each half of the steps played. The
    halves are hundreds of steps apart, so their noise is independent: the product of the
    two halves' means estimates |E g|^2 without the noise that inflates the norm of a mean
    of few batches (adjacent batches come from the same games moments apart)."""

    def __init__(self) -> None:
        self.sums, self.counts = [0.0, 0.0], [0, 0]

    def add(self, half: int, gradient: torch.Tensor) -> None:
        self.sums[half] = self.sums[half] + gradient
        self.counts[half] += 1

    def means(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.sums[0] / self.counts[0], self.sums[1] / self.counts[1]

    def norm_of_mean(self) -> float:
        """|E g| (nan when the noise left exceeds it)."""
        first, second = self.means()
        estimate = float(first @ second)
        return float(np.sqrt(estimate)) if estimate > 0 else float("nan")

    def dot_of_means(self, other: Halves) -> float:
        """E g . E h of this term's gradient and the other's."""
        (g1, g2), (h1, h2) = self.means(), other.means()
        return float(g1 @ h2 + g2 @ h1) / 2


def append_rows(path: Path, rows: list[dict]) -> None:
    new = pd.DataFrame(rows)
    table = pd.concat([pd.read_csv(path), new]) if path.exists() else new
    table.to_csv(path, index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run_dir", type=Path, required=True)
    parser.add_argument("--envs", type=int, default=8, help="games played side by side")
    parser.add_argument("--steps", type=int, default=1000, help="agent steps per game")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--csv", type=Path, help="append the three rows to this table")
    args = parser.parse_args(argv)
    cfg = run_config(args.run_dir)
    if cfg.algorithm != "impala":
        parser.error(f"{args.run_dir} is a {cfg.algorithm} run; this reads IMPALA's loss")
    parts, frames = play_agent(cfg)
    torch.manual_seed(args.seed)
    played = play(parts.model, cfg, args.envs, args.steps, args.seed)
    pieces = unrolls(played, cfg.unroll_length)
    size = cfg.batch_size
    rows, pg_grads, bonus_grads, value_grads = [], Halves(), Halves(), Halves()
    starts = range(0, len(pieces) - size + 1, size)
    if len(starts) < 2:
        parser.error(f"{len(pieces)} unrolls make {len(starts)} batch of {size}: the two "
                     f"halves need two at least (more --steps or --envs)")
    for i in starts:
        figures, g_pg, g_bonus, g_value = pulls(parts.model, cfg, batch_of(pieces[i:i + size]))
        rows.append(figures)
        half = int(i >= starts[len(starts) // 2])
        pg_grads.add(half, g_pg)
        bonus_grads.add(half, g_bonus)
        value_grads.add(half, g_value)
    per_batch = {name: float(np.mean([row[name] for row in rows])) for name in rows[0]}
    mean_pg = sum(pg_grads.sums) / len(rows)
    mean = {**compare(mean_pg, sum(bonus_grads.sums) / len(rows)),
            **against_value(mean_pg, sum(value_grads.sums) / len(rows))}
    systematic = {"pg_norm": pg_grads.norm_of_mean(), "bonus_norm": bonus_grads.norm_of_mean(),
                  "value_norm": value_grads.norm_of_mean()}
    systematic["ratio"] = systematic["pg_norm"] / systematic["bonus_norm"]
    systematic["value_ratio"] = systematic["value_norm"] / systematic["pg_norm"]
    systematic["cosine"] = pg_grads.dot_of_means(bonus_grads) / (
        systematic["pg_norm"] * systematic["bonus_norm"])
    print(f"{args.run_dir.name}: {frames} frames, entropy_cost "
          f"{cfg.algorithm_flags.entropy_cost:g}, {len(rows)} batches of {size} unrolls of "
          f"{cfg.unroll_length} steps; policy entropy {per_batch['entropy']:.2f} nats, mean "
          f"|advantage| {per_batch['abs_advantage']:.4f}, steps with a reward "
          f"{per_batch['reward_steps']:.3f}")
    print("| gradients | pg norm | bonus norm | ratio pg / bonus | cosine | value norm | "
          "ratio value / pg |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    estimates = {"each batch (mean)": per_batch, "their mean over the batches": mean,
                 "their expectation, the noise taken out": systematic}
    for name, row in estimates.items():
        print(f"| {name} | {row['pg_norm']:.3f} | {row['bonus_norm']:.3f} | "
              f"{row['ratio']:.2f} | {row['cosine']:.3f} | {row['value_norm']:.3f} | "
              f"{row['value_ratio']:.2f} |")
    if args.csv:
        context = {"run": args.run_dir.name, "frames": frames,
                   "entropy_cost": cfg.algorithm_flags.entropy_cost, "batches": len(rows),
                   **{name: round(per_batch[name], 4)
                      for name in ("entropy", "abs_advantage", "reward_steps")}}
        append_rows(args.csv, [{**context, "gradients": name,
                                **{k: round(row[k], 4) for k in (
                                    "pg_norm", "bonus_norm", "ratio", "cosine", "value_norm",
                                    "value_ratio")},
                                "command": " ".join(["sandbox/loss_balance.py", *sys.argv[1:]]),
                                "machine": common.machine_name(), "commit": common.git_commit()}
                               for name, row in estimates.items()])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
