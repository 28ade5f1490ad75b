"""V-trace against a slow NumPy version written from the paper's definition (eq. 1):

  v_s = V(x_s) + sum_{t=s}^{s+n-1} (prod_{i=s}^{t-1} gamma_i c_i) * delta_t,
  delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),  rho_t = min(rho_bar, pi/mu),
  c_i = min(1, pi/mu);  pg_adv_s = min(rho_pg_bar, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s)).

The sum of products is evaluated term by term in loops; vtrace.py builds the same products as
one [T, T, B] table (a cumulative product) and sums them in one matrix product.
"""

import numpy as np
import pytest
import torch

from impala.algorithms.impala import vtrace
from impala.update import tensor_operations


def reference_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar, pg_rho_bar):
    """[T, B] NumPy arrays (bootstrap [B]) -> (vs, pg_advantages), by the definition."""
    T = values.shape[0]
    rhos = np.exp(log_rhos)
    clipped = rhos if rho_bar is None else np.minimum(rho_bar, rhos)
    cs = np.minimum(1.0, rhos)
    values_next = np.concatenate([values[1:], bootstrap[None]], axis=0)
    deltas = clipped * (rewards + discounts * values_next - values)
    vs = np.zeros_like(values)
    for s in range(T):
        total = np.zeros_like(bootstrap)
        for t in range(s, T):
            weight = np.ones_like(bootstrap)
            for i in range(s, t):
                weight = weight * discounts[i] * cs[i]
            total = total + weight * deltas[t]
        vs[s] = values[s] + total
    vs_next = np.concatenate([vs[1:], bootstrap[None]], axis=0)
    pg_rhos = rhos if pg_rho_bar is None else np.minimum(pg_rho_bar, rhos)
    return vs, pg_rhos * (rewards + discounts * vs_next - values)


def make_inputs(T, B, seed=0):
    rng = np.random.default_rng(seed)
    # log-rhos from -2.5 to 2.5: rhos from 0.08 to 12, both sides of every threshold used.
    log_rhos = np.linspace(-2.5, 2.5, T * B).reshape(T, B)
    rng.shuffle(log_rhos.reshape(-1))
    discounts = 0.9 * (rng.random((T, B)) > 0.15)  # some episode ends
    rewards = rng.normal(size=(T, B))
    values = rng.normal(size=(T, B))
    bootstrap = rng.normal(size=B)
    return log_rhos, discounts, rewards, values, bootstrap


@pytest.mark.parametrize("T,B", [(1, 1), (1, 5), (5, 1), (7, 5), (20, 32)])  # last: Pong's
@pytest.mark.parametrize("rho_bar,pg_rho_bar", [(3.7, 2.2), (0.7, 1.4), (None, None)])
def test_from_importance_weights_matches_definition(T, B, rho_bar, pg_rho_bar):
    inputs = make_inputs(T, B, seed=T * 10 + B)
    expected_vs, expected_pg = reference_vtrace(*inputs, rho_bar, pg_rho_bar)
    result = vtrace.from_importance_weights(
        *(torch.tensor(x, dtype=torch.float64) for x in inputs),
        clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar,
    )
    np.testing.assert_allclose(result.vs.numpy(), expected_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(result.pg_advantages.numpy(), expected_pg, rtol=1e-10, atol=1e-10)


def test_thresholds_are_used_on_both_sides():
    """The chosen log-rhos put rhos below and above both thresholds, so clipping matters."""
    inputs = make_inputs(7, 5)
    rhos = np.exp(inputs[0])
    for threshold in (3.7, 2.2, 0.7, 1.4):
        assert (rhos < threshold).any() and (rhos > threshold).any()
    clipped = reference_vtrace(*inputs, 3.7, 2.2)
    unclipped = reference_vtrace(*inputs, None, None)
    assert not np.allclose(clipped[0], unclipped[0])
    assert not np.allclose(clipped[1], unclipped[1])


def test_from_logits_matches_importance_weights():
    T, B, A = 6, 5, 4
    generator = torch.Generator().manual_seed(3)
    behaviour = torch.randn(T, B, A, generator=generator, dtype=torch.float64)
    target = torch.randn(T, B, A, generator=generator, dtype=torch.float64)
    actions = torch.randint(0, A, (T, B), generator=generator)
    _, discounts, rewards, values, bootstrap = (
        torch.tensor(x) for x in make_inputs(T, B, seed=4))
    result = vtrace.from_logits(behaviour, target, actions, discounts, rewards, values,
                                bootstrap, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2)

    def log_prob(logits):
        return torch.log_softmax(logits, -1).gather(-1, actions[..., None])[..., 0]

    expected_log_rhos = log_prob(target) - log_prob(behaviour)
    torch.testing.assert_close(result.log_rhos, expected_log_rhos)
    torch.testing.assert_close(result.target_action_log_probs, log_prob(target))
    torch.testing.assert_close(result.behavior_action_log_probs, log_prob(behaviour))
    direct = vtrace.from_importance_weights(expected_log_rhos, discounts, rewards, values,
                                            bootstrap, 3.7, 2.2)
    torch.testing.assert_close(result.vs, direct.vs)
    torch.testing.assert_close(result.pg_advantages, direct.pg_advantages)


def test_returns_carry_no_gradient():
    inputs = [torch.tensor(x, requires_grad=True) for x in make_inputs(4, 2)]
    result = vtrace.from_importance_weights(*inputs)
    assert not result.vs.requires_grad and not result.pg_advantages.requires_grad


def test_on_policy_without_discount_cuts_is_the_n_step_return():
    """rho = 1 and gamma = 1: v_s is the plain sum of rewards plus the bootstrap."""
    T, B = 5, 3
    rewards = torch.arange(T * B, dtype=torch.float64).view(T, B)
    values = torch.zeros(T, B, dtype=torch.float64)
    bootstrap = torch.full((B,), 10.0, dtype=torch.float64)
    result = vtrace.from_importance_weights(torch.zeros(T, B, dtype=torch.float64),
                                            torch.ones(T, B, dtype=torch.float64),
                                            rewards, values, bootstrap)
    expected = torch.flip(torch.cumsum(torch.flip(rewards, [0]), 0), [0]) + 10.0
    torch.testing.assert_close(result.vs, expected)


@pytest.mark.parametrize("bad", ["log_rhos", "bootstrap"])
def test_wrong_rank_is_a_clear_error(bad):
    log_rhos, discounts, rewards, values, bootstrap = (
        torch.tensor(x) for x in make_inputs(4, 2))
    if bad == "log_rhos":
        log_rhos = log_rhos[None]
    else:
        bootstrap = bootstrap[None]
    name = "log_rhos" if bad == "log_rhos" else "bootstrap_value"
    with pytest.raises(ValueError, match=f"{name} must have rank"):
        vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap)


def test_mismatched_shapes_are_a_clear_error():
    log_rhos, discounts, rewards, values, bootstrap = (
        torch.tensor(x) for x in make_inputs(4, 2))
    with pytest.raises(ValueError, match="share one"):
        vtrace.from_importance_weights(log_rhos[:3], discounts, rewards, values, bootstrap)
    with pytest.raises(ValueError, match="rank 3"):
        vtrace.from_logits(torch.zeros(4, 2), torch.zeros(4, 2, 3), torch.zeros(4, 2),
                           discounts, rewards, values, bootstrap)


def test_the_operations_do_not_grow_with_the_unroll_length():
    """No loop over time steps: on a GPU each operation is a launch, and a loop made ~8 per
    step (160 of a Pong update's ~650 at T = 20)."""
    def operations(T):
        inputs = [torch.tensor(x, dtype=torch.float32) for x in make_inputs(T, 8)]
        return tensor_operations(lambda: vtrace.from_importance_weights(*inputs))
    assert 0 < operations(5) == operations(80)  # 0 would be a profiler that saw nothing
