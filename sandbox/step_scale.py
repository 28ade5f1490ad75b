"""How far does one update move each layer of a run's network, per unit of its gradient?
Read the RMSProp state in a run's checkpoint and the gradient norms its learner logged.

  .venv/bin/python sandbox/step_scale.py --run_dir=runs/suite/impala-qbert-v5-s1

The learner clips the sum of the loss's gradients to one global norm (`--gradients_clipping`),
then RMSProp divides each weight's clipped gradient by sqrt(mean square + epsilon). Where a
weight's mean square is far below epsilon, that denominator is sqrt(epsilon) whatever the
gradient, so the optimizer does not undo the clip: the weight moves by
lr / sqrt(epsilon) * clip / (logged norm) times its share of the gradient, a step that
shrinks as the norm grows. The table says, per layer, what share of its weights are in that
regime; the last line, how much the clip scaled the gradient near the checkpoint's frames.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import common  # noqa: E402
from loss_balance import append_rows  # noqa: E402

from impala import checkpoint  # noqa: E402
from impala.diagnose import run_config  # noqa: E402
from impala.evaluate import play_agent  # noqa: E402


def layer_rows(names: list[str], state: dict, epsilon: float) -> list[dict]:
    """One row per weight tensor: its size, the share of its entries whose RMSProp mean
    square is below epsilon, and the median of RMSProp's denominator,
    sqrt(mean square + epsilon)."""
    rows = []
    for index, name in enumerate(names):
        mean_square = state[index]["mean_square"].flatten().float()
        rows.append({"layer": name, "weights": mean_square.numel(),
                     "below_epsilon": float((mean_square < epsilon).float().mean()),
                     "median_denominator": float((mean_square + epsilon).median().sqrt())})
    return rows


def logged_clip(run_dir: Path, frames: int, span: int, clip: float) -> tuple[float, float]:
    """The learner's mean pre-clip gradient norm over the `span` frames before `frames`,
    and the factor the clip scaled the gradient by (1 where it did not bind)."""
    logs = pd.read_csv(run_dir / "logs.csv")
    near = logs[(logs["frames"] > frames - span) & (logs["frames"] <= frames)]
    if near.empty:
        raise SystemExit(f"{run_dir / 'logs.csv'}: no row within {span} frames before "
                         f"the checkpoint's {frames}")
    norm = float(near["grad_norm"].mean())
    return norm, float((clip / near["grad_norm"]).clip(upper=1).mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run_dir", type=Path, required=True)
    parser.add_argument("--span", type=int, default=500_000,
                        help="frames of the learner's logs before the checkpoint to average")
    parser.add_argument("--csv", type=Path, help="append the run's line to this table")
    args = parser.parse_args(argv)
    cfg = run_config(args.run_dir)
    state = checkpoint.load(args.run_dir / checkpoint.CHECKPOINT_NAME, cfg.to_dict())
    frames = int(state["counters"]["frames"])
    parts, _ = play_agent(cfg, trained=False)  # the network's parameter order, not its weights
    names = [name for name, _ in parts.model.named_parameters()]
    optimizer = state["optimizer"]
    epsilon = float(optimizer["param_groups"][0]["epsilon"])
    rows = layer_rows(names, optimizer["state"], epsilon)
    norm, factor = logged_clip(args.run_dir, frames, args.span, cfg.gradients_clipping)
    print(f"{args.run_dir.name}: {frames} frames; RMSProp epsilon {epsilon:g}")
    print("| layer | weights | mean square below epsilon | median sqrt(mean square + eps) |")
    print("| --- | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['layer']} | {row['weights']:,} | {row['below_epsilon']:.0%} | "
              f"{row['median_denominator']:.3f} |")
    below = sum(row["below_epsilon"] * row["weights"] for row in rows)
    below /= sum(row["weights"] for row in rows)
    print(f"weights below epsilon: {below:.0%}; logged gradient norm before clipping "
          f"{norm:.0f} over the last {args.span:,} frames, scaled by {factor:.3f} on average "
          f"to the clip of {cfg.gradients_clipping:g}")
    if args.csv:
        policy = next(row for row in rows if row["layer"].endswith("policy_logits.weight"))
        summary = {"run": args.run_dir.name, "frames": frames, "epsilon": epsilon,
                   "weights_below_epsilon": round(below, 4),
                   "policy_weights_below_epsilon": round(policy["below_epsilon"], 4),
                   "logged_grad_norm": round(norm, 1), "clip_scale": round(factor, 4),
                   "command": " ".join(["sandbox/step_scale.py", *sys.argv[1:]]),
                   "machine": common.machine_name(), "commit": common.git_commit()}
        append_rows(args.csv, [summary])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
