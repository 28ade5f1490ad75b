"""Every script in sandbox/ runs, on a tiny input. (slurm.sbatch runs in tests/e2e/test_slurm.py
and local_workers_example.csv in tests/e2e/test_frontend.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest
import torch

from impala import checkpoint
from impala.algorithm import Algorithm
from impala.assembly import assemble
from impala.envs import describe_env
from impala.flags import parse_config
from impala.nets import build_agent
from impala.optim import RMSpropTF
from impala.registry import algorithm_class
from results import scores
from tests.helpers import ROOT

PONG = "PongNoFrameskip-v4"


def test_torso_check_reports_each_relu_layer_of_a_checkpoint(tmp_path):
    env = describe_env(parse_config([f"--level_name={PONG}"]).env_config)
    model = build_agent("SimpleConvNetAgent", env, algorithm_class("impala"))
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, model, None, {"frames": 1234},
                    {"level_name": PONG, "agent_name": "SimpleConvNetAgent",
                     "algorithm": "impala"})
    out = subprocess.run([sys.executable, "sandbox/torso_check.py", str(path), "--steps", "20"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert re.search(r"1234 frames; never-active share per ReLU layer \(conv1, conv2, conv3, "
                     r"fc\): [0-9.]+, [0-9.]+, [0-9.]+, [0-9.]+; feature variation [0-9.]+",
                     out.stdout), out.stdout + out.stderr


@pytest.mark.parametrize("variant", ["R2D2Frames", "R2D2ApexTargets"])
def test_each_r2d2_variant_builds_with_its_preset_and_acts(variant):
    cfg = parse_config([f"--algorithm=sandbox.r2d2_variants:{variant}", f"--level_name={PONG}",
                        "--preset=auto"])
    # its recorded preset, not today's
    assert cfg.batch_size == 2 and cfg.algorithm_flags.n_step == 5
    parts = assemble(cfg, describe_env(cfg.env_config), training=False)
    assert isinstance(parts.algorithm, Algorithm) and not parts.model.action_reward_inputs
    observation = torch.zeros(1, 1, *parts.layout.observation_shape, dtype=torch.uint8)
    zeros = torch.zeros(1, 1, dtype=torch.long)
    with torch.no_grad():  # as an actor acts
        output, _ = parts.model(observation, zeros, zeros.float(), zeros.bool(),
                                parts.model.initial_state(1))
    actions, recorded = parts.algorithm.exploration(0, 1, 1).act(output.heads)
    assert actions.shape == (1,) and recorded.shape == (1, 6)


def test_policy_sharpness_plays_a_checkpoint_sampled_greedily_and_beside_uniform_play(tmp_path):
    # An untrained policy is near uniform, but how near depends on its initial weights: the
    # helper's fixed draw keeps the entropy and top probability inside the ranges below.
    run_dir, model, cfg = _cartpole_run_dir(tmp_path)
    checkpoint.save(run_dir / "checkpoint.pt", model, None, {"frames": 321, "updates": 2},
                    cfg.to_dict())
    out = subprocess.run([sys.executable, "sandbox/policy_sharpness.py",
                          f"--run_dir={run_dir}", "--episodes=2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert "321 frames; a uniform policy's entropy 0.693 nats" in out.stdout, out.stdout
    for acting in ("sampled", "greedy"):
        assert re.search(rf"\| {acting} \| [0-9.]+ \| [0-9.]+ \| \d+ \| 0\.6\d\d \| 0\.5\d\d \|",
                         out.stdout), out.stdout + out.stderr
    # the random baseline acts with exactly the uniform choice, whatever the weights say
    assert re.search(r"\| uniform \| [0-9.]+ \| [0-9.]+ \| \d+ \| 0\.693 \| 0\.500 \|",
                     out.stdout), out.stdout + out.stderr


def test_learner_trace_averages_logs_and_scores_over_the_suites_frame_spans(tmp_path):
    # Spans are (end - 1M, end], as the suite scores: a row at exactly 1M is the first span's.
    (tmp_path / "logs.csv").write_text(
        "frames,learning_rate,entropy\n"
        "400000,0.001,1.0\n1000000,0.001,2.0\n1500000,0.0005,3.0\n2000000,0.0001,5.0\n")
    (tmp_path / "episodes-0.csv").write_text(
        "time,frames,episode_return,episode_length\n"
        "0,900000,10,100\n0,1000000,20,100\n0,1800000,-4,100\n")
    out = subprocess.run([sys.executable, "sandbox/learner_trace.py", str(tmp_path),
                          "--columns=learning_rate,entropy"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == [
        "| | 1M | 2M |", "| --- | ---: | ---: |", "| score | 15 | -4 |",
        "| learning_rate | 0.001 | 0.0003 |", "| entropy | 1.5 | 4 |"], out.stdout
    refused = subprocess.run([sys.executable, "sandbox/learner_trace.py", str(tmp_path),
                              "--columns=grad_nrom"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "no column grad_nrom" in refused.stderr


def test_learner_trace_takes_a_quantile_of_the_logged_rows_and_still_the_mean_score(tmp_path):
    (tmp_path / "logs.csv").write_text(
        "frames,entropy\n200000,1.0\n400000,2.0\n1000000,9.0\n1500000,3.0\n2000000,5.0\n")
    (tmp_path / "episodes-0.csv").write_text(
        "time,frames,episode_return,episode_length\n"
        "0,900000,10,100\n0,1000000,20,100\n0,1800000,-4,100\n0,1900000,0,100\n")
    tables = {}
    for statistic in ("q1", "q0.5", "median"):
        out = subprocess.run([sys.executable, "sandbox/learner_trace.py", str(tmp_path),
                              "--columns=entropy", f"--statistic={statistic}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
        tables[statistic] = out.stdout.splitlines()[2:]
    assert tables["q1"] == ["| score | 15 | -2 |", "| entropy | 9 | 5 |"]
    assert tables["q0.5"] == tables["median"] == ["| score | 15 | -2 |", "| entropy | 2 | 4 |"]
    refused = subprocess.run([sys.executable, "sandbox/learner_trace.py", str(tmp_path),
                              "--statistic=q99"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode != 0 and "'q99'" in refused.stderr


def test_learner_trace_of_a_suite_row_scores_as_the_suites_page_does():
    run_id = "impala-namethisgame-v5-s1"  # its logs and episodes are kept in results/
    out = subprocess.run([sys.executable, "sandbox/learner_trace.py", run_id,
                          "--columns=learning_rate"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    score_row = next(line for line in out.stdout.splitlines() if line.startswith("| score |"))
    episodes = pd.read_csv(ROOT / "results" / "episodes" / f"{run_id}.csv")
    for column, frames in ((6, 6_000_000), (10, 10_000_000)):
        assert float(score_row.split("|")[column + 1]) == pytest.approx(
            scores.score_at(episodes, frames), rel=1e-3), score_row


def _cartpole_run_dir(tmp_path, **flags) -> tuple:
    """A CartPole run directory with an untrained checkpoint (seeded weights): the run
    directory, its model and Config."""
    run_dir = tmp_path / "CartPole-v1_MLPAgent"
    flags = {"level_name": "CartPole-v1", "agent_name": "MLPAgent", "algorithm": "impala",
             **flags}
    cfg = parse_config([f"--{k}={v}" for k, v in flags.items()])
    torch.manual_seed(0)
    model = build_agent("MLPAgent", describe_env(cfg.env_config), algorithm_class("impala"))
    run_dir.mkdir(parents=True)
    (run_dir / "meta.json").write_text(json.dumps({"flags": flags}))
    return run_dir, model, cfg


def test_step_scale_reads_the_share_of_weights_below_epsilon_and_the_logged_clip(tmp_path):
    run_dir, model, cfg = _cartpole_run_dir(tmp_path)
    optimizer = RMSpropTF(model.parameters(), epsilon=0.01)
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()
    first, *rest = model.parameters()
    ms = optimizer.state[first]["mean_square"].view(-1)
    ms.zero_()
    ms[:ms.numel() // 2] = 1.0  # half of the first layer above epsilon, half at 0
    for param in rest:
        optimizer.state[param]["mean_square"].fill_(0.001)  # all below epsilon
    checkpoint.save(run_dir / "checkpoint.pt", model, optimizer, {"frames": 5000, "updates": 1},
                    cfg.to_dict())
    # Norms 80 and 20 within the span: mean 50; the clip of 40 scaled them by 0.5 and 1.
    (run_dir / "logs.csv").write_text("frames,grad_norm\n1000,1000\n4000,80\n5000,20\n")
    out = subprocess.run([sys.executable, "sandbox/step_scale.py", f"--run_dir={run_dir}",
                          "--span=2000"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in
            line][1:]
    shares = [row.split("|")[3].strip() for row in rows]
    assert shares == ["50%"] + ["100%"] * len(rest), out.stdout
    assert ("logged gradient norm before clipping 50 over the last 2,000 frames, scaled by "
            "0.750 on average to the clip of 40") in out.stdout, out.stdout


def test_loss_balance_weighs_the_baseline_term_by_its_cost(tmp_path):
    norms = {}
    for cost in (0.5, 1.0):
        run_dir, model, cfg = _cartpole_run_dir(tmp_path / str(cost), baseline_cost=cost)
        checkpoint.save(run_dir / "checkpoint.pt", model, None, {"frames": 100, "updates": 1},
                        cfg.to_dict())
        table = tmp_path / f"balance-{cost}.csv"
        subprocess.run([sys.executable, "sandbox/loss_balance.py", f"--run_dir={run_dir}",
                        "--envs=8", "--steps=200", f"--csv={table}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
        norms[cost] = pd.read_csv(table).iloc[1]  # the gradients' mean over the batches
    # The same games played (same seed and weights): the policy gradient is the same, and
    # the baseline term's gradient is linear in its weight.
    assert norms[1.0]["pg_norm"] == pytest.approx(norms[0.5]["pg_norm"], rel=1e-3)
    assert norms[0.5]["value_norm"] > 0
    assert norms[1.0]["value_norm"] == pytest.approx(2 * norms[0.5]["value_norm"], rel=1e-3)
    assert norms[1.0]["value_ratio"] == pytest.approx(
        norms[1.0]["value_norm"] / norms[1.0]["pg_norm"], rel=1e-3)
