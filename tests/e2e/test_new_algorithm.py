"""A new algorithm is one new module: this test file is that module. It declares a toy
policy-gradient algorithm (REINFORCE on each unroll's own returns) with a flag, a preset, a
logged scalar, a curve panel and a status item of its own, and shows it learning CartPole
end to end through
`experiment.py --job_name=local --algorithm=tests.e2e.test_new_algorithm:ToyPolicyGradient`,
without any shared module knowing it. Every process of the run (learner, actors, the curve
watcher) imports it by that path."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from impala.algorithm import (
    Algorithm,
    Exploration,
    Head,
    Learning,
    LossResult,
    Panel,
    Preset,
    StatusItem,
    flag,
)
from tests.helpers import EXPERIMENT, ROOT, free_port, read_csv, run

TOY = "tests.e2e.test_new_algorithm:ToyPolicyGradient"


@dataclass(frozen=True)
class ToySettings:
    toy_temperature: float = flag(1.0, "softmax temperature of the toy's actors")


class ToyPolicyGradient(Algorithm):
    name = "toy_pg"
    flags_class = ToySettings
    presets = (Preset("toy_classic", ("classic",),
                      {"agent_name": "MLPAgent", "batch_size": 4, "learning_rate": 0.003},
                      rule="small updates for a test", record=()),)
    heads = (Head("logits", per_action=True, init_gain=0.01),)
    recorded = "logits"
    log_scalars = ("toy_return",)
    panels = (Panel("toy: mean return to the unroll's end", ("toy_return",)),)
    status = (StatusItem("G", "toy_return", ".2f"),)

    def exploration(self, first_env: int, count: int, total: int) -> Exploration:
        return ToySampling(self.flags.toy_temperature)

    def learning(self, model) -> Learning:
        return ToyLearning(self.cfg.discounting)

    def evaluation_action(self, heads: dict[str, torch.Tensor]) -> torch.Tensor:
        return heads["logits"].argmax(dim=-1)


class ToySampling(Exploration):
    def __init__(self, temperature: float) -> None:
        self.temperature = temperature

    def act(self, heads: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        logits = heads["logits"][0]  # [N, A]
        actions = torch.multinomial(torch.softmax(logits / self.temperature, -1), 1)[:, 0]
        return actions.numpy(), logits.numpy()


class ToyLearning(Learning):
    def __init__(self, discounting: float) -> None:
        self.discounting = discounting

    def loss(self, model, batch, core_state) -> LossResult:
        output, _ = model(batch["observation"], batch["last_action"], batch["reward"],
                          batch["done"], core_state)
        logits = output.heads["logits"][:-1]  # [T, B, A]: the steps whose reward arrived
        rewards, alive = batch["reward"][1:], (~batch["done"][1:]).float()
        returns, later = torch.zeros_like(rewards), torch.zeros_like(rewards[0])
        for t in reversed(range(len(rewards))):  # to the unroll's end, cut at episode ends
            later = rewards[t] + self.discounting * alive[t] * later
            returns[t] = later
        taken = torch.log_softmax(logits, -1).gather(-1, batch["action"][:-1, :, None])[..., 0]
        advantage = returns - returns.mean()
        loss = -(taken * advantage).mean()
        return LossResult(loss, {"toy_return": returns.mean().item()},
                          advantage.abs().mean(dim=0), output.features.detach())


# 20 runs of this command (seeds 1-6 and 11-24, ~10 s each, some beside other work): the
# last 100 episodes averaged 34.7 to 54.1. Random play averages ~22 (the mean of 100
# episodes within about 1.5 of it).
TOY_FRAMES = 40_000
TOY_LEARNED = 30.0


@pytest.mark.slow
def test_an_algorithm_declared_outside_the_package_learns_end_to_end(tmp_path):
    result = run(["--job_name=local", f"--algorithm={TOY}", "--level_name=CartPole-v1",
                  f"--total_environment_frames={TOY_FRAMES}", "--toy_temperature=0.5",
                  "--log_interval_s=0.5", f"--logdir={tmp_path}",
                  f"--learner_host=127.0.0.1:{free_port()}"], timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "CartPole-v1_MLPAgent"  # the toy's preset chose the agent
    episodes = read_csv(run_dir / "episodes-0.csv")["episode_return"]
    assert episodes.iloc[-100:].mean() >= TOY_LEARNED, episodes.iloc[-100:].mean()
    logs = read_csv(run_dir / "logs.csv")
    assert logs["frames"].iloc[-1] >= TOY_FRAMES and logs["toy_return"].notna().all()
    assert "pg_loss" not in logs and "td_error" not in logs  # only its own scalars
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["flags"]["algorithm"] == TOY and meta["flags"]["toy_temperature"] == 0.5
    assert meta["flags"]["preset"] == "toy_classic" and meta["flags"]["batch_size"] == 4
    assert [p["title"] for p in meta["panels"]] == ["toy: mean return to the unroll's end"]
    assert (run_dir / "curve.png").stat().st_size > 10_000
    assert " | G " in result.stderr  # its status item
    played = run(["--mode=test", f"--algorithm={TOY}", "--level_name=CartPole-v1",
                  "--test_num_episodes=3", f"--logdir={tmp_path}"], timeout=120)
    assert played.returncode == 0 and "mean return" in played.stdout


def test_its_flags_are_in_the_help_and_another_algorithms_are_refused():
    def experiment(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, EXPERIMENT, f"--algorithm={TOY}", *argv],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    help_text = " ".join(experiment("--help").stdout.split())
    assert f"flags of --algorithm={TOY}: --toy_temperature" in help_text
    assert "softmax temperature of the toy's actors (default: 1.0)" in help_text
    refused = experiment("--level_name=CartPole-v1", "--n_step=5")
    assert refused.returncode == 2
    assert f"--n_step is a flag of --algorithm=apex/r2d2; --algorithm={TOY} has no use" \
           in refused.stderr
    missing = subprocess.run([sys.executable, EXPERIMENT, "--algorithm=no.such:Thing"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "cannot import it" in missing.stderr
