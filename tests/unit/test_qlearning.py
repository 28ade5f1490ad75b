"""Value-based targets against slow NumPy versions written from the papers (Ape-X eq. 1,
double Q-learning, R2D2's value rescaling), step by step with Python loops."""


import numpy as np
import pytest
import torch

from impala.algorithms.value import qlearning
from tests.references import slow_h, slow_targets


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("rescaled", [False, True])
@pytest.mark.parametrize("batch", [1, 5])
def test_n_step_double_q_targets_match_a_slow_version(n, rescaled, batch):
    rng = np.random.default_rng(n * 10 + batch + rescaled)
    steps, actions = 9, 4
    rewards = rng.normal(size=(steps + 1, batch)).astype(np.float32) * 3
    done = rng.random((steps + 1, batch)) < 0.2
    online_q = rng.normal(size=(steps + 1, batch, actions)).astype(np.float32) * 5
    target_q = rng.normal(size=(steps + 1, batch, actions)).astype(np.float32) * 5
    got = qlearning.n_step_double_q_targets(
        torch.from_numpy(rewards), torch.from_numpy(done), torch.from_numpy(online_q),
        torch.from_numpy(target_q), 0.97, n, rescaled)
    want = slow_targets(rewards, done, online_q, target_q, 0.97, n, rescaled)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_double_q_bootstraps_with_the_target_value_of_the_online_argmax():
    # One step: the online net prefers action 1, the target net action 0.
    rewards = torch.tensor([[0.0], [1.0]])
    done = torch.tensor([[False], [False]])
    online = torch.tensor([[[0.0, 0.0]], [[0.0, 9.0]]])
    target = torch.tensor([[[0.0, 0.0]], [[5.0, 2.0]]])
    got = qlearning.n_step_double_q_targets(rewards, done, online, target, 0.5, 1, False)
    assert got.item() == pytest.approx(1.0 + 0.5 * 2.0)


def test_value_rescaling_matches_the_paper_and_inverts():
    x = torch.linspace(-1000, 1000, 20001, dtype=torch.float64)
    want = torch.tensor([slow_h(v) for v in x.tolist()], dtype=torch.float64)
    torch.testing.assert_close(qlearning.rescale(x), want)
    torch.testing.assert_close(qlearning.unrescale(qlearning.rescale(x)), x,
                               rtol=1e-9, atol=1e-7)
    torch.testing.assert_close(qlearning.rescale(qlearning.unrescale(x)), x,
                               rtol=1e-9, atol=1e-7)


def test_dueling_q_keeps_the_advantage_order_and_centres_it():
    values = torch.tensor([[2.0]])
    advantages = torch.tensor([[[1.0, 3.0, 5.0]]])
    q = qlearning.dueling_q(values, advantages)
    torch.testing.assert_close(q, torch.tensor([[[0.0, 2.0, 4.0]]]))


def test_trained_steps_cover_each_transition_once():
    # Apex: no burn-in, overlap n = 3; R2D2: burn-in 40 of 80 steps, overlap 41.
    assert qlearning.trained_steps(20, 0, 3) == (0, 18)
    assert qlearning.trained_steps(80, 40, 41) == (40, 80)
    # Stride T + 1 - overlap equals the trained length, so a stream's steps tile.
    for T, b, k in [(20, 0, 3), (80, 40, 41), (30, 10, 15)]:
        first, end = qlearning.trained_steps(T, b, k)
        assert end - first == T + 1 - k
    with pytest.raises(ValueError, match="no trainable steps"):
        qlearning.trained_steps(20, 20, 1)


def test_sequence_priority_mixes_max_and_mean():
    errors = torch.tensor([[1.0, -2.0], [-3.0, 0.0], [2.0, 2.0]])
    got = qlearning.sequence_priorities(errors, 0.9)
    torch.testing.assert_close(got, torch.tensor([0.9 * 3 + 0.1 * 2, 0.9 * 2 + 0.1 * 4 / 3]))


def test_exploration_epsilons_follow_the_apex_schedule():
    eps = qlearning.exploration_epsilons(0, 8, 8)
    for i in range(8):
        assert eps[i].item() == pytest.approx(0.4 ** (1 + 7 * i / 7), rel=1e-6)
    # An actor's slice of the run's environments.
    torch.testing.assert_close(qlearning.exploration_epsilons(4, 4, 8), eps[4:])
    assert qlearning.exploration_epsilons(0, 1, 1).item() == pytest.approx(0.4)
    with pytest.raises(ValueError, match="not among"):
        qlearning.exploration_epsilons(6, 4, 8)
