"""One training step alone (seconds, no processes): what `learn_step` and the control
vector promise, checked on a real MLPAgent."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch

from impala.algorithms.impala import Impala
from impala.algorithms.impala.behaviour import ImpalaLearning
from impala.algorithms.impala.loss import ImpalaLossConfig
from impala.distributed import SingleLearner, clip_and_norm
from impala.learner import Control
from impala.nets import create_agent
from impala.optim import RMSpropTF
from impala.step import TorsoWatch, learn_step, torso_health
from tests.helpers import ROOT

T, B = 20, 4
SETTINGS = ImpalaLossConfig(discounting=0.99, baseline_cost=0.5, entropy_cost=0.01,
                        reward_clipping="abs_one")


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """A `[T+1, B, ...]` CartPole-shaped batch with random values."""
    rng = np.random.default_rng(seed)
    return {
        "observation": torch.from_numpy(rng.normal(size=(T + 1, B, 4)).astype(np.float32)),
        "reward": torch.from_numpy(rng.normal(size=(T + 1, B)).astype(np.float32)),
        "done": torch.from_numpy(rng.random((T + 1, B)) < 0.05),
        "last_action": torch.from_numpy(rng.integers(0, 2, (T + 1, B))),
        "action": torch.from_numpy(rng.integers(0, 2, (T + 1, B))),
        "policy_logits": torch.from_numpy(rng.normal(size=(T + 1, B, 2)).astype(np.float32)),
    }


def test_a_step_moves_every_parameter_and_reports_finite_scalars():
    torch.manual_seed(0)
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    optimizer = RMSpropTF(model.parameters(), lr=0.01)
    before = [p.detach().clone() for p in model.parameters()]
    stats = learn_step(model, optimizer, SingleLearner(), batch(), (), ImpalaLearning(SETTINGS),
                       40.0)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert not stats.skipped and np.isfinite(stats.grad_norm)
    assert np.isfinite(stats.loss.total_loss.item())
    for name in ("pg_loss", "baseline_loss", "entropy"):
        assert np.isfinite(float(stats.loss.scalars[name])), name
    for value in torso_health(stats.loss.features).values():
        assert np.isfinite(float(value))


def test_torso_health_tells_dead_and_constant_features_from_live_ones():
    """Feature 0 is zero at every step (a dead ReLU), feature 1 constant but alive, feature
    2 varies: one dead feature of three, and only feature 2 adds to the spread."""
    steps = torch.arange(T * B, dtype=torch.float32).view(T, B)
    features = torch.stack([torch.zeros(T, B), torch.full((T, B), 0.7), steps], dim=-1)
    health = torso_health(features)
    assert np.isclose(health["dead_features"], 1 / 3)
    assert np.isclose(health["feature_std"], steps.flatten().std().item() / 3)


def watch_states(values: np.ndarray) -> list[tuple[int, str]]:
    """(update, state) for every warning a fresh TorsoWatch gives over `values`."""
    watch = TorsoWatch()
    return [(i, state) for i, value in enumerate(values)
            if (state := watch.check(float(value))) is not None]


def test_the_torso_watch_warns_of_a_dying_torso_once_and_then_of_a_dead_one():
    """Shapes of real Pong runs (updates of ~640 frames, noise 20%): run L's live torso
    dipped from 0.006 to 0.0016 before rising to 0.03; runs N and K fell 30x and more."""
    rng = np.random.default_rng(0)
    noise = 1 + 0.2 * rng.standard_normal(3000)
    dip_then_rise = np.concatenate([np.geomspace(0.006, 0.0016, 700),
                                    np.geomspace(0.0016, 0.03, 2300)]) * noise
    assert watch_states(dip_then_rise) == []
    dying = np.concatenate([np.full(200, 0.006), np.geomspace(0.006, 2e-4, 1000),
                            np.full(1800, 2e-4)]) * noise
    states = watch_states(dying)
    assert [state for _, state in states] == ["dying"]
    assert 200 < states[0][0] < 1200  # before the fall ends, not after
    dead = np.concatenate([dying[:1500], np.zeros(1500)])
    assert [state for _, state in watch_states(dead)] == ["dying", "dead"]


def test_no_gradient_flows_into_the_behaviour_logits():
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    data = batch()
    data["policy_logits"].requires_grad_(True)
    learn_step(model, RMSpropTF(model.parameters(), lr=0.01), SingleLearner(), data, (),
               ImpalaLearning(SETTINGS), 40.0)
    assert data["policy_logits"].grad is None


def test_the_clip_scales_to_the_limit_and_reports_the_norm_before():
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    for p in model.parameters():
        p.grad = torch.full_like(p, 3.0)
    expected = 3.0 * np.sqrt(sum(p.numel() for p in model.parameters()))
    assert np.isclose(clip_and_norm(model, 1.0), expected, rtol=1e-5)
    after = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    assert np.isclose(float(after), 1.0, rtol=1e-4)
    for p in model.parameters():  # a limit <= 0 turns the clip off
        p.grad = torch.full_like(p, 3.0)
    assert np.isclose(clip_and_norm(model, 0.0), expected, rtol=1e-5)
    assert all(torch.all(p.grad == 3.0) for p in model.parameters())


def test_the_control_vector_sums_field_by_field_across_ranks():
    ranks = [Control(frames=640, return_sum=21.0, episodes=1, log_now=1.0),
             Control(stop=1.0, frames=0, length_sum=7.0)]
    summed = Control.from_array(sum(c.to_array() for c in ranks))
    assert summed == Control(stop=1.0, frames=640, return_sum=21.0, length_sum=7.0,
                             episodes=1, log_now=1.0, checkpoint_now=0.0)


def test_reading_flags_and_the_frontends_stop_import_no_torch(tmp_path):
    probe = ("import sys; from impala.launcher.frontend import main; "
             f"code = main(['--workers_csv_path=x.csv', '--logdir={tmp_path}', "
             "'--level_name=CartPole-v1', '--status']); "
             "print(code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert out == ["1", "False"]  # 1: nothing recorded there; and no torch loaded
