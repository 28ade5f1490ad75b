"""PopArt (impala/popart.py) against its definitions in van Hasselt et al. 2016 and Hessel et
al. 2019: statistics as running moments of the targets, values preserved exactly when they
move, and the losses measured in units of sigma."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from impala import checkpoint
from impala.algorithms.impala import Impala, ImpalaFlags
from impala.algorithms.impala import loss as losses
from impala.algorithms.impala.behaviour import ImpalaLearning
from impala.config import Config
from impala.nets import create_agent
from impala.popart import ScaledHead

POPART = ImpalaFlags(value_normalization="popart")
POPART_HEADS = Impala(Config(level_name="CartPole-v1", agent_name="MLPAgent",
                             algorithm_flags=POPART)).heads


def values_of(head: ScaledHead, features: torch.Tensor) -> np.ndarray:
    """sigma * n(x) + mu for features [N, F], as float64 [N]."""
    mean, sigma = head.scale()
    return (sigma.double() * head(features).double().squeeze(-1) + mean.double()
            ).detach().numpy()


def test_the_statistics_are_running_moments_of_the_targets_and_the_values_never_move():
    torch.manual_seed(0)
    head = ScaledHead(6)
    features = torch.randn(50, 6)
    before = values_of(head, features)
    assert np.allclose(before, head(features).detach().squeeze(-1).numpy())  # sigma 1, mu 0
    mean, square, beta = 0.0, 1.0, 0.2
    for batch_mean, batch_square in [(10.0, 140.0), (30.0, 1000.0), (-5.0, 80.0)]:
        head.track(batch_mean, batch_square, beta)
        mean = (1 - beta) * mean + beta * batch_mean
        square = (1 - beta) * square + beta * batch_square
        assert head.mean.item() == pytest.approx(mean, rel=1e-6)
        assert head.mean_square.item() == pytest.approx(square, rel=1e-6)
        assert head.scale()[1].item() == pytest.approx(np.sqrt(square - mean**2), rel=1e-5)
        np.testing.assert_allclose(values_of(head, features), before, rtol=1e-5, atol=1e-4)
    assert head.scale()[1].item() > 3  # the scale did move: the check above is not idle


def test_the_spread_is_held_above_its_floor_when_the_targets_do_not_vary():
    head = ScaledHead(3)
    head.track(2.0, 4.0, 1.0)  # every target 2: no spread at all
    assert head.scale()[1].item() == pytest.approx(1e-4)


def random_batch(T=5, B=3, A=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(T + 1, B, A, generator=generator)
    normalized = torch.randn(T + 1, B, generator=generator)
    actions = torch.randint(0, A, (T + 1, B), generator=generator)
    rewards = torch.randn(T + 1, B, generator=generator) * 3
    done = torch.rand(T + 1, B, generator=generator) < 0.2
    return logits, normalized, actions, rewards, done


def test_the_losses_are_the_raw_ones_measured_in_units_of_sigma():
    """With the value sigma * n + mu, the targets are the raw loss's; the policy gradient's
    advantages shrink by sigma and the squared value errors by sigma squared."""
    logits, normalized, actions, rewards, done = random_batch()
    behaviour = logits + 0.3 * torch.randn_like(logits)
    config = losses.ImpalaLossConfig(reward_clipping="none", entropy_cost=0.0)
    mean, sigma = torch.tensor(4.0), torch.tensor(2.5)
    scaled = losses.impala_loss(logits, normalized, behaviour, actions, rewards, done, config,
                                value_scale=(mean, sigma))
    raw = losses.impala_loss(logits, sigma * normalized + mean, behaviour, actions, rewards,
                             done, config)
    assert torch.allclose(scaled.target_moments, raw.target_moments)
    assert scaled.pg_loss.item() == pytest.approx(raw.pg_loss.item() / 2.5, rel=1e-5)
    assert scaled.baseline_loss.item() == pytest.approx(raw.baseline_loss.item() / 2.5**2,
                                                        rel=1e-5)
    identity = losses.impala_loss(logits, normalized, behaviour, actions, rewards, done,
                                  config, value_scale=(torch.tensor(0.0), torch.tensor(1.0)))
    plain = losses.impala_loss(logits, normalized, behaviour, actions, rewards, done, config)
    assert identity.total_loss.item() == pytest.approx(plain.total_loss.item(), rel=1e-6)


def test_a_skipped_update_leaves_the_statistics_as_they_were():
    """A NaN loss on one rank makes every rank skip the update (update.py); the sum of the
    ranks' target moments is then NaN as well, and the statistics must not take it in."""
    model = create_agent("MLPAgent", (4,), 2, POPART_HEADS)
    learning = ImpalaLearning(losses.ImpalaLossConfig(), popart_step=0.1)
    head = model.heads["baseline"]
    for moments, expected_mean in [([float("nan"), 4.0], 0.0), ([2.0, 5.0], 0.2)]:
        learning.target_moments = torch.tensor(moments)
        learning.after_update(model, 0, 100, lambda values: values)
        assert float(head.mean) == pytest.approx(expected_mean)
        assert all(torch.isfinite(p).all() for p in head.parameters())


def saved_run(tmp_path, heads, flags=None):
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent", algorithm_flags=flags)
    model = create_agent("MLPAgent", (4,), 2, heads)
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, model, None, {"frames": 1000, "updates": 5}, cfg.to_dict())
    return model, path, cfg


def outputs(model, observation: torch.Tensor) -> torch.Tensor:
    return model(observation, torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 1),
                 torch.zeros(4, 1, dtype=torch.bool))[0].heads["baseline"]


def test_a_run_without_popart_goes_on_with_it_from_the_same_values(tmp_path):
    """A checkpoint of raw values branches into a PopArt run: sigma 1 and mu 0 give the
    same values, and the statistics move from there."""
    raw, path, cfg = saved_run(tmp_path, Impala.heads)
    popart = create_agent("MLPAgent", (4,), 2, POPART_HEADS)
    checkpoint.restore_model(popart, checkpoint.load(path, cfg.to_dict()), path)
    observation = torch.randn(4, 1, 4)
    assert torch.equal(outputs(popart, observation), outputs(raw, observation))
    assert popart.heads["baseline"].scale()[1].item() == 1.0


def test_a_popart_checkpoint_is_refused_without_the_flag_by_name(tmp_path):
    _, path, cfg = saved_run(tmp_path, POPART_HEADS, POPART)
    raw = create_agent("MLPAgent", (4,), 2, Impala.heads)
    with pytest.raises(checkpoint.CheckpointError, match="--value_normalization=popart"):
        checkpoint.restore_model(raw, checkpoint.load(path, cfg.to_dict()), path)
