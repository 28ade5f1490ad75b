"""Loss terms and reward clipping on small hand-computed cases; LASER's trust region and
the replay weights in the loss."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from impala.algorithms.impala import loss as losses
from impala.flags import parse_config
from impala.presets import config_from_flags


def test_abs_one_clipping():
    rewards = torch.tensor([-3.0, -0.5, 0.0, 0.5, 7.0])
    assert losses.clip_rewards(rewards, "abs_one").tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0]


def test_soft_asymmetric_clipping():
    rewards = torch.tensor([-5.0, 5.0, 0.0])
    clipped = losses.clip_rewards(rewards, "soft_asymmetric")
    # 5 * tanh(r / 5), negatives scaled by 0.3.
    assert clipped[0].item() == pytest.approx(0.3 * 5 * math.tanh(-1.0))
    assert clipped[1].item() == pytest.approx(5 * math.tanh(1.0))
    assert clipped[2].item() == 0.0


def test_no_clipping_and_unknown_mode():
    rewards = torch.tensor([-30.0, 12.5])
    assert torch.equal(losses.clip_rewards(rewards, "none"), rewards)
    with pytest.raises(ValueError, match="reward_clipping must be one of"):
        losses.clip_rewards(rewards, "abs_two")


def test_policy_gradient_loss_by_hand():
    # Two actions with equal logits: log pi = log 0.5 for either action.
    logits = torch.zeros(1, 2, 2)
    actions = torch.tensor([[0, 1]])
    advantages = torch.tensor([[2.0, -1.0]])
    expected = -(math.log(0.5) * 2.0 + math.log(0.5) * -1.0)
    assert losses.policy_gradient_loss(logits, actions, advantages).item() == pytest.approx(
        expected)


def test_policy_gradient_does_not_flow_into_advantages():
    advantages = torch.tensor([[1.0]], requires_grad=True)
    logits = torch.zeros(1, 1, 3, requires_grad=True)
    losses.policy_gradient_loss(logits, torch.tensor([[1]]), advantages).backward()
    assert advantages.grad is None and logits.grad is not None


def test_baseline_loss_by_hand():
    assert losses.baseline_loss(torch.tensor([[1.0, -2.0], [3.0, 0.0]])).item() == 7.0


def test_entropy_loss_is_negative_entropy():
    # Uniform over 4 actions: entropy log 4 per step, 3 steps.
    logits = torch.zeros(3, 1, 4)
    assert losses.entropy_loss(logits).item() == pytest.approx(-3 * math.log(4))


def test_impala_loss_combines_terms_with_costs():
    T, B, A = 3, 2, 3
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(T + 1, B, A, generator=generator, requires_grad=True)
    baseline = torch.randn(T + 1, B, generator=generator, requires_grad=True)
    actions = torch.randint(0, A, (T + 1, B), generator=generator)
    rewards = torch.randn(T + 1, B, generator=generator) * 3
    done = torch.zeros(T + 1, B, dtype=torch.bool)
    only_pg = losses.impala_loss(logits, baseline, logits.detach(), actions, rewards, done,
                                 losses.ImpalaLossConfig(baseline_cost=0.0, entropy_cost=0.0))
    full = losses.impala_loss(logits, baseline, logits.detach(), actions, rewards, done,
                              losses.ImpalaLossConfig(baseline_cost=0.5, entropy_cost=0.01))
    expected = float(only_pg.pg_loss + 0.5 * full.baseline_loss
                     - 0.01 * full.entropy * T * B)
    assert full.total_loss.item() == pytest.approx(expected, rel=1e-5)
    full.total_loss.backward()
    assert logits.grad is not None and baseline.grad is not None


def test_impala_loss_cuts_the_return_at_episode_ends():
    """With done set at step 1 (a new episode starts there), step 0's value target is just
    its reward: the bootstrap of the next episode must not leak into it."""
    T, B, A = 2, 1, 2
    logits = torch.zeros(T + 1, B, A)
    baseline = torch.tensor([[0.0], [100.0], [100.0]], requires_grad=True)
    actions = torch.zeros(T + 1, B, dtype=torch.long)
    rewards = torch.tensor([[0.0], [1.0], [0.0]])  # reward on arriving at step 1
    done = torch.tensor([[False], [True], [False]])
    stats = losses.impala_loss(logits, baseline, logits, actions, rewards, done,
                               losses.ImpalaLossConfig(baseline_cost=1.0, entropy_cost=0.0))
    # Step 0: target 1 (no bootstrap across the end), value 0 -> advantage 1.
    # Step 1: target 0 + 0.99 * 100, value 100 -> advantage -1.
    assert stats.baseline_loss == pytest.approx(0.5 * (1.0**2 + 1.0**2))


def test_policy_kl_by_hand():
    # mu = (0.5, 0.5), pi = (0.8, 0.2): KL(mu || pi) = 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2).
    behaviour = torch.zeros(1, 1, 2)
    target = torch.log(torch.tensor([[[0.8, 0.2]]]))
    expected = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)
    assert losses.mean_kl(behaviour, target) == pytest.approx(expected, rel=1e-5)
    assert losses.mean_kl(target, target) == pytest.approx(0.0, abs=1e-7)


def test_impala_loss_reports_clipped_importance_weights():
    # T=2, B=1, two actions; the target prefers action 0, the behaviour was uniform, so the
    # step that took action 0 has rho > 1 (clipped) and the one that took action 1 has not.
    T, B, A = 2, 1, 2
    target = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]], [[0.0, 0.0]]])
    stats = losses.impala_loss(
        target_logits=target, baseline=torch.zeros(T + 1, B),
        behavior_logits=torch.zeros(T + 1, B, A), actions=torch.tensor([[0], [1], [0]]),
        rewards=torch.zeros(T + 1, B), done=torch.zeros(T + 1, B, dtype=torch.bool),
        config=losses.ImpalaLossConfig(),
    )
    assert stats.rho_clipped == pytest.approx(0.5)
    assert stats.policy_kl > 0


def _batch(seed: int, logit_scale: float):
    """Loss inputs of a 4-step, 3-column batch over 5 actions, logits scaled so that the
    policy is near uniform (small scale) or sharp (large)."""
    T, B, A = 4, 3, 5
    generator = torch.Generator().manual_seed(seed)
    logits = (torch.randn(T + 1, B, A, generator=generator) * logit_scale).requires_grad_()
    baseline = torch.randn(T + 1, B, generator=generator).requires_grad_()
    actions = torch.randint(0, A, (T + 1, B), generator=generator)
    rewards = torch.randn(T + 1, B, generator=generator)
    return logits, baseline, actions, rewards, torch.zeros(T + 1, B, dtype=torch.bool)


def _gradients(inputs, config: losses.ImpalaLossConfig):
    logits, baseline, actions, rewards, done = inputs
    stats = losses.impala_loss(logits, baseline, logits.detach(), actions, rewards, done, config)
    grads = torch.autograd.grad(stats.total_loss, (logits, baseline))
    return stats, grads


@pytest.mark.parametrize("logit_scale, mean_entropy_is_below_floor", [(0.1, False), (5.0, True)])
def test_the_entropy_floor_applies_the_bonus_only_to_batches_below_it(
        logit_scale, mean_entropy_is_below_floor):
    """The floor is a fraction of log A; above it the gradient is that of the loss without
    the bonus, below it that of the loss with the whole bonus."""
    inputs = _batch(seed=3, logit_scale=logit_scale)
    floor = 0.8
    probabilities = torch.softmax(inputs[0][:-1].detach().double(), dim=-1).numpy()
    entropy = -(probabilities * np.log(probabilities)).sum(axis=-1).mean()
    assert (entropy < floor * math.log(5)) == mean_entropy_is_below_floor
    stats, floored = _gradients(inputs, losses.ImpalaLossConfig(entropy_cost=0.3,
                                                                entropy_floor=floor))
    reference = losses.ImpalaLossConfig(entropy_cost=0.3 if mean_entropy_is_below_floor
                                        else 0.0)
    _, expected = _gradients(inputs, reference)
    for got, want in zip(floored, expected, strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    assert stats.entropy.item() == pytest.approx(entropy, rel=1e-5)
    assert stats.entropy_bonus_on.item() == float(mean_entropy_is_below_floor)


def test_without_a_floor_the_bonus_always_applies():
    inputs = _batch(seed=4, logit_scale=0.1)
    stats, plain = _gradients(inputs, losses.ImpalaLossConfig(entropy_cost=0.3))
    _, without = _gradients(inputs, losses.ImpalaLossConfig(entropy_cost=0.0))
    assert stats.entropy_bonus_on.item() == 1.0
    assert not torch.allclose(plain[0], without[0], atol=1e-6)


@pytest.mark.parametrize("value", ["1.0", "-0.1", "nan"])
def test_an_entropy_floor_outside_0_to_1_is_refused_with_the_flag_named(value):
    with pytest.raises(SystemExit):
        parse_config(["--level_name=CartPole-v1", f"--entropy_floor={value}"])
    with pytest.raises(ValueError, match=r"--entropy_floor must be in \[0, 1\)"):
        config_from_flags({"level_name": "CartPole-v1", "entropy_floor": float(value)})


# ------------------------------------------------------------------ trust region and loss
def test_the_trust_region_uses_the_kl_of_the_softmax_distributions():
    behaviour = torch.tensor([[[0.0, 0.0, 0.0]], [[2.0, 0.0, 0.0]]])  # [T=2, B=1, A=3]
    # Step 0: the same distribution with every logit shifted by 5: KL 0, inside. Raw logits
    # taken as log-probabilities would give a KL of about 15 here.
    # Step 1: a different distribution.
    target = torch.tensor([[[5.0, 5.0, 5.0]], [[-2.0, 0.0, 0.0]]])
    log_pi = F.log_softmax(target, -1)
    log_mu = F.log_softmax(behaviour, -1)
    kl = (log_pi.exp() * (log_pi - log_mu)).sum(-1)  # by hand: [0, ~0.78]
    assert kl[0, 0] == pytest.approx(0.0, abs=1e-6) and kl[1, 0] > 0.5
    mask = losses.trust_region_mask(target, behaviour, threshold=0.5)
    assert mask.tolist() == [[True], [False]]
    assert losses.trust_region_mask(target, behaviour, float(kl[1, 0]) + 1e-4).all()


def loss_inputs(seed: int = 0, T: int = 4, B: int = 3, A: int = 3):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T + 1, B, A, generator=g, requires_grad=True)
    baseline = torch.randn(T + 1, B, generator=g, requires_grad=True)
    behaviour = torch.randn(T + 1, B, A, generator=g)
    actions = torch.randint(0, A, (T + 1, B), generator=g)
    rewards = torch.randn(T + 1, B, generator=g)
    done = torch.zeros(T + 1, B, dtype=torch.bool)
    return logits, baseline, behaviour, actions, rewards, done


def test_replay_weights_and_mask_scale_each_unroll_and_fresh_data_alone_gives_the_entropy():
    logits, baseline, behaviour, actions, rewards, done = loss_inputs()
    settings = losses.ImpalaLossConfig(entropy_cost=0.0, trust_region_threshold=1e-9)
    replayed = torch.tensor([False, True, True])
    weights = torch.tensor([1.0, 0.25, 0.5])
    stats = losses.impala_loss(logits, baseline, behaviour, actions, rewards, done, settings,
                               column_weights=weights, replayed=replayed)
    stats.total_loss.backward()
    # A threshold of ~0 masks every replayed step (random logits differ): only column 0
    # gets a gradient, and the masked share says all of the replayed steps.
    assert stats.trust_region_masked == 1.0
    assert logits.grad[:-1, 1:].abs().sum() == 0 and baseline.grad[:-1, 1:].abs().sum() == 0
    assert logits.grad[:-1, 0].abs().sum() > 0
    # Without the mask each column's terms scale with its weight: compare per column with
    # the unweighted loss of that column alone.
    plain = losses.ImpalaLossConfig(entropy_cost=0.0)
    weighted = losses.impala_loss(logits, baseline, behaviour, actions, rewards, done, plain,
                                  column_weights=weights, replayed=replayed)
    alone = [losses.impala_loss(logits[:, [b]], baseline[:, [b]], behaviour[:, [b]],
                                actions[:, [b]], rewards[:, [b]], done[:, [b]], plain)
             for b in range(3)]
    expected = float(sum(w * (s.pg_loss + 0.5 * s.baseline_loss)
                         for w, s in zip(weights.tolist(), alone, strict=True)))
    assert weighted.total_loss.item() == pytest.approx(expected, rel=1e-5)
    # Entropy, KL and clipping shares come from the fresh column only.
    assert weighted.entropy == pytest.approx(float(alone[0].entropy), rel=1e-6)
    assert weighted.policy_kl == pytest.approx(float(alone[0].policy_kl), rel=1e-6)
    # Errors per unroll: mean |v_s - V(x_s)| over T, the same with or without weights.
    np.testing.assert_allclose(weighted.unroll_errors.numpy(),
                               [s.unroll_errors.item() for s in alone], rtol=1e-5)


def test_the_entropy_bonus_of_the_fresh_unrolls_weighs_as_if_over_the_whole_batch():
    """With one fresh column of three, the bonus is that column's entropy times 3: as
    strong against the policy gradient (summed over all columns) as without replay."""
    logits, baseline, behaviour, actions, rewards, done = loss_inputs(seed=2)
    replayed = torch.tensor([False, True, True])

    def total(entropy_cost: float) -> float:
        settings = losses.ImpalaLossConfig(entropy_cost=entropy_cost)
        return losses.impala_loss(logits, baseline, behaviour, actions, rewards, done,
                                  settings, replayed=replayed).total_loss.item()

    fresh_neg_entropy = losses.entropy_loss(logits[:-1, [0]]).item()
    assert total(0.5) - total(0.0) == pytest.approx(0.5 * 3 * fresh_neg_entropy, rel=1e-5)


def test_without_replay_the_loss_is_unchanged_bit_for_bit():
    inputs = loss_inputs(seed=1)
    settings = losses.ImpalaLossConfig()
    plain = losses.impala_loss(*inputs, settings)
    all_fresh = losses.impala_loss(*inputs, settings, column_weights=torch.ones(3),
                                   replayed=torch.zeros(3, dtype=torch.bool))
    assert plain.total_loss.item() == all_fresh.total_loss.item()
    assert plain.trust_region_masked == 0.0


# ------------------------------------------------------------------------------- flags
