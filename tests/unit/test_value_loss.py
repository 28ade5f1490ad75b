"""The value-based learner's loss (Ape-X, R2D2) against a slow version written from the
papers: per step, per column, with Python loops. What it must get right:
- the loss is 0.5 w_b delta_t^2 averaged over the trained steps, each column weighted by
  its importance weight w_b (Schaul et al. 2015);
- the burn-in (Kapturowski et al. 2019) only warms the recurrent state up: no gradient
  flows through it, and its steps are neither trained nor counted in the priorities;
- each column's priority is eta max|delta| + (1 - eta) mean|delta| over its trained steps;
- the target network is copied each time the run's frames pass a multiple of the period.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from impala.algorithm import IMPORTANCE_WEIGHT
from impala.algorithms.apex import ApeX
from impala.algorithms.value import QLossConfig
from impala.algorithms.value.behaviour import EpsilonGreedy, ValueLearning
from impala.algorithms.value.qlearning import exploration_epsilons, trained_steps
from impala.nets import create_agent
from tests.references import slow_targets

OBS, ACTIONS = 3, 4

APEX = QLossConfig(discounting=0.9, n_step=3, burn_in=0, reward_clipping="abs_one",
                   rescaled=False, priority_eta=0.0, target_update_frames=32_000)
R2D2 = QLossConfig(discounting=0.97, n_step=2, burn_in=4, reward_clipping="none",
                   rescaled=True, priority_eta=0.9, target_update_frames=32_000)


def make(settings: QLossConfig, agent_name: str, T: int, seed: int = 0):
    """(model, the trained steps, the learner's half) for value-based `settings`."""
    torch.manual_seed(seed)
    model = create_agent(agent_name, (OBS,), ACTIONS, ApeX.heads, action_reward_inputs=False)
    trained = trained_steps(T, settings.burn_in, settings.overlap)
    learning = ValueLearning(settings, trained, model)
    # A target network unlike the online one, so double Q's two roles can be told apart.
    with torch.no_grad():
        for p in learning.target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model, trained, learning


def random_batch(T: int, B: int, seed: int, big_burn_in_reward_at: int | None = None):
    rng = np.random.default_rng(seed)
    batch = {
        "observation": torch.from_numpy(rng.normal(size=(T + 1, B, OBS)).astype(np.float32)),
        "reward": torch.from_numpy(rng.normal(size=(T + 1, B)).astype(np.float32) * 2),
        "done": torch.from_numpy(rng.random((T + 1, B)) < 0.15),
        "last_action": torch.from_numpy(rng.integers(0, ACTIONS, (T + 1, B))),
        "action": torch.from_numpy(rng.integers(0, ACTIONS, (T + 1, B))),
        IMPORTANCE_WEIGHT: torch.from_numpy(rng.uniform(0.1, 1.0, B).astype(np.float32)),
    }
    if big_burn_in_reward_at is not None:
        batch["reward"][big_burn_in_reward_at] = 1000.0
    return batch


def slow_q(model, batch, core, burn_in: int, detach_at_burn_in: bool):
    """Q(x_t, .) for t = 0..T, one step at a time, the state zeroed where an episode
    starts; with `detach_at_burn_in`, the state is cut from the graph where training
    starts and the burn-in runs without gradient."""
    steps = batch["observation"].shape[0]
    state = core
    rows = []
    for t in range(steps):
        if t == burn_in and detach_at_burn_in and state:
            state = tuple(s.detach() for s in state)
        inputs = [batch[k][t:t + 1] for k in ("observation", "last_action", "reward", "done")]
        with torch.set_grad_enabled(not (detach_at_burn_in and t < burn_in)):
            output, state = model(*inputs, state)
        values, advantages = output.heads["value"][0], output.heads["advantage"][0]
        rows.append(values[:, None] + advantages - advantages.mean(dim=-1, keepdim=True))
    return torch.stack(rows)  # [T+1, B, A]


def slow_loss(model, learning, settings: QLossConfig, batch, core, first: int, end: int,
              detach_at_burn_in: bool = True):
    """(loss with gradient, priorities [B]) from the papers' formulas."""
    online = slow_q(model, batch, core, settings.burn_in, detach_at_burn_in)
    with torch.no_grad():
        target = slow_q(learning.target, batch, core, settings.burn_in, detach_at_burn_in=True)
    rewards = batch["reward"].numpy()
    if settings.reward_clipping == "abs_one":
        rewards = np.clip(rewards, -1, 1)
    y = slow_targets(rewards, batch["done"].numpy(), online.detach().numpy(), target.numpy(),
                     settings.discounting, settings.n_step, settings.rescaled)
    weights = batch[IMPORTANCE_WEIGHT]
    B = rewards.shape[1]
    squares, priorities = [], []
    for b in range(B):
        errors = [float(y[t, b]) - online[t, b, int(batch["action"][t, b])]
                  for t in range(first, end)]
        squares += [0.5 * weights[b] * e**2 for e in errors]
        magnitudes = [abs(float(e.detach())) for e in errors]
        priorities.append(settings.priority_eta * max(magnitudes)
                          + (1 - settings.priority_eta) * float(np.mean(magnitudes)))
    return torch.stack(squares).mean(), np.array(priorities)


def gradients(model, loss):
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("settings,agent_name,T", [(APEX, "MLPAgent", 10),
                                                   (R2D2, "MLPLSTMAgent", 12)])
def test_the_loss_gradient_and_priorities_match_the_papers(settings, agent_name, T):
    model, trained, learning = make(settings, agent_name, T)
    B = 3
    # A huge reward inside R2D2's burn-in: counted anywhere but the trained steps' targets,
    # it would swamp the priorities.
    batch = random_batch(T, B, seed=1, big_burn_in_reward_at=2 if settings.burn_in else None)
    core = model.initial_state(B)
    if core:  # a stored recurrent state that is not zero, as the actors send it
        core = tuple(torch.randn_like(s) * 0.5 for s in core)
    result = learning.loss(model, batch, core)
    first, end = trained
    assert (first, end) == (settings.burn_in, T + 1 - settings.overlap + settings.burn_in)
    want_loss, want_priorities = slow_loss(model, learning, settings, batch, core, first, end)
    assert result.total_loss.item() == pytest.approx(want_loss.item(), rel=1e-4)
    np.testing.assert_allclose(result.column_errors.numpy(), want_priorities, rtol=1e-4)
    assert want_priorities.max() < 100  # the burn-in's reward of 1000 is in none of them
    got, want = gradients(model, result.total_loss), gradients(model, want_loss)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_no_gradient_flows_through_the_burn_in():
    """The slow version with the gradient let through the burn-in differs from the loss's
    gradient, so the test above would catch a burn-in that trains."""
    model, trained, learning = make(R2D2, "MLPLSTMAgent", 12)
    batch = random_batch(12, 3, seed=2)
    core = tuple(torch.randn_like(s) for s in model.initial_state(3))
    got = gradients(model, learning.loss(model, batch, core).total_loss)
    leaky, _ = slow_loss(model, learning, R2D2, batch, core, *trained,
                         detach_at_burn_in=False)
    through = gradients(model, leaky)
    assert any(not torch.allclose(a, b, rtol=1e-3) for a, b in zip(got, through, strict=True))


def test_importance_weights_scale_each_columns_share_of_the_loss():
    model, _, learning = make(APEX, "MLPAgent", 10)
    batch = random_batch(10, 2, seed=3)
    batch[IMPORTANCE_WEIGHT] = torch.tensor([1.0, 0.0])
    only_first = learning.loss(model, batch, ()).total_loss.item()
    batch[IMPORTANCE_WEIGHT] = torch.tensor([0.0, 1.0])
    only_second = learning.loss(model, batch, ()).total_loss.item()
    batch[IMPORTANCE_WEIGHT] = torch.tensor([0.5, 0.25])
    mixed = learning.loss(model, batch, ()).total_loss.item()
    assert mixed == pytest.approx(0.5 * only_first + 0.25 * only_second, rel=1e-5)


def test_the_target_network_is_copied_when_the_frames_pass_each_period():
    """Counted in the run's frames (all learners), so the period means the same whatever
    the batch, unroll length or number of learners: a copy at 1,000 and 2,000 frames only,
    even when one update brings more than a period's frames."""
    settings = dataclasses.replace(APEX, target_update_frames=1000)
    model, _, learning = make(settings, "MLPAgent", 10)

    def target_is_online() -> bool:
        return all(torch.equal(a, b) for a, b in
                   zip(learning.target.parameters(), model.parameters(), strict=True))

    def update_then_check(frames_before: int, frames_after: int) -> bool:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        # one process: the sum over ranks is the value itself
        learning.after_update(model, frames_before, frames_after, lambda values: values)
        return target_is_online()

    assert not update_then_check(0, 400)
    assert not update_then_check(400, 800)
    assert update_then_check(800, 1200)  # 1,000 passed
    assert not update_then_check(1200, 1600)
    assert update_then_check(1600, 2000)  # exactly at 2,000
    assert update_then_check(2000, 4500)  # one big update passes 3,000 and 4,000: one copy
    assert not update_then_check(4500, 4999)


def test_the_exploration_floor_anneals_from_one_to_each_environments_own_epsilon():
    """--exploration_frames: every environment explores at least with 1 - frames / F (DQN's
    linear anneal) until its own Ape-X epsilon is the larger, then with that alone."""

    own = exploration_epsilons(0, 4, 4)  # 0.4 down to 0.4^8
    floored = EpsilonGreedy(own, APEX, (0, 8), 0, 4, exploration_frames=1000)
    expected = {0: [1.0] * 4, 500: [0.5] * 4, 900: [0.4, 0.1, 0.1, 0.1],
                1000: own.tolist(), 5000: own.tolist()}
    for frames, epsilons in expected.items():
        floored.at_frames(frames)
        np.testing.assert_allclose(floored.epsilons, np.maximum(epsilons, own.numpy()),
                                   rtol=1e-6)
    plain = EpsilonGreedy(own, APEX, (0, 8), 0, 4)  # no floor: Ape-X's from the first frame
    plain.at_frames(0)
    np.testing.assert_allclose(plain.epsilons, own.numpy())
    assert "at least 1 - frames / 1000" in floored.describe()


@pytest.mark.parametrize("algorithm, flag, rescaled", [
    ("r2d2", "auto", True), ("r2d2", "off", False), ("apex", "auto", False),
    ("apex", "on", True)])
def test_value_rescaling_is_the_algorithms_own_unless_the_flag_says(algorithm, flag, rescaled):
    from impala.presets import config_from_flags
    from impala.registry import algorithm_class

    cfg = config_from_flags({"algorithm": algorithm, "level_name": "CartPole-v1",
                             "value_rescaling": flag})
    assert algorithm_class(algorithm)(cfg).loss_config.rescaled is rescaled


def test_r2d2s_atari_preset_learns_in_raw_returns_with_clipped_rewards():
    from impala.algorithms.r2d2 import R2D2
    from impala.presets import config_from_flags

    cfg = config_from_flags({"algorithm": "r2d2", "level_name": "PongNoFrameskip-v4"})
    assert cfg.preset == "r2d2_atari" and cfg.reward_clipping == "abs_one"
    assert R2D2(cfg).loss_config.rescaled is False
