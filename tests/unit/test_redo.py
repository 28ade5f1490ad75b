"""ReDo (impala/redo.py) against a score computed here by hand, layer by layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from impala.algorithms.impala import Impala
from impala.nets import MLPAgent, ResNetAgent, SimpleConvNetAgent, SimpleConvNetLSTMAgent
from impala.optim import RMSpropTF
from impala.redo import Recycler

SHAPE, ACTIONS = (4, 84, 84), 6


def conv_agent(cls=SimpleConvNetAgent) -> SimpleConvNetAgent:
    torch.manual_seed(0)
    return cls(SHAPE, ACTIONS, Impala.heads)


def frames(count: int = 24) -> torch.Tensor:
    """[T, B, 4, 84, 84] uint8 screens."""
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (count // 4, 4, *SHAPE), dtype=torch.uint8,
                         generator=generator)


def scores_by_hand(agent: SimpleConvNetAgent, observation: torch.Tensor) -> list[np.ndarray]:
    """Each layer's units' mean |activation| over its layer's mean, written from the paper's
    definition with the layers applied one by one (no hooks)."""
    x = observation.flatten(0, 1).float() / 255.0
    conv1, conv2, conv3 = (m for m in agent.convs if isinstance(m, torch.nn.Conv2d))
    fc = agent.fc[0]
    h1 = F.relu(conv1(x))
    h2 = F.relu(conv2(h1))
    h3 = F.relu(conv3(h2))
    h4 = F.relu(fc(h3.flatten(1)))
    per_unit = [h.abs().mean(dim=(0, 2, 3)) for h in (h1, h2, h3)] + [h4.abs().mean(dim=0)]
    return [(a / a.mean()).detach().numpy() for a in per_unit]


def silence(agent: SimpleConvNetAgent, conv_channel: int, fc_unit: int) -> None:
    """Make conv2's channel and the fc layer's unit output 0 on every input."""
    conv2 = agent.convs[2]
    with torch.no_grad():
        conv2.weight[conv_channel] = 0.0
        conv2.bias[conv_channel] = -1.0
        agent.fc[0].weight[fc_unit] = 0.0
        agent.fc[0].bias[fc_unit] = -1.0


def no_sum(values: np.ndarray) -> np.ndarray:
    return values


def outputs(agent, observation: torch.Tensor) -> dict[str, torch.Tensor]:
    T, B = observation.shape[:2]
    zeros = torch.zeros(T, B)
    with torch.no_grad():
        out, _ = agent(observation, zeros.long(), zeros, zeros.bool(), agent.initial_state(B))
    return out.heads


def test_the_dormant_units_are_those_the_paper_scores_and_only_they_are_recycled():
    """tau 0.1: exactly the units whose score by hand is at or below it are recycled (the two
    silenced ones among them): their incoming weights drawn afresh, bias 0, their outgoing
    ones zero, and every other weight as it was."""
    agent = conv_agent()
    silence(agent, conv_channel=5, fc_unit=17)
    observation = frames()
    expected = [np.flatnonzero(s <= 0.1) for s in scores_by_hand(agent, observation)]
    assert 5 in expected[1] and 17 in expected[3]
    before = {name: p.detach().clone() for name, p in agent.named_parameters()}
    recycler = Recycler(agent, threshold=0.1, interval_frames=1000, seed=3)
    recycled = recycler(observation, RMSpropTF(agent.parameters()), 1000, no_sum)
    assert recycled == sum(len(e) for e in expected)
    assert recycler.last_dormant == pytest.approx(recycled / (32 + 64 + 64 + 512))
    fc, conv2, conv3 = agent.fc[0], agent.convs[2], agent.convs[4]
    assert fc.weight[17].abs().sum() > 0 and fc.bias[17] == 0  # drawn again
    assert conv2.weight[5].abs().sum() > 0 and conv2.bias[5] == 0
    kept_rows = [c for c in range(64) if c not in expected[2]]  # recycled rows are new
    assert (conv3.weight[kept_rows, 5] == 0).all()  # what read channel 5
    for name in ("policy_logits", "baseline"):
        assert (agent.heads[name].weight[:, 17] == 0).all()  # what read feature 17
    kept = fc.weight[[u for u in range(512) if u not in expected[3]]]
    kept_before = before["fc.0.weight"][[u for u in range(512) if u not in expected[3]]]
    read = [c for c in range(64 * 49) if c // 49 not in expected[2]]  # from kept channels
    assert torch.equal(kept[:, read], kept_before[:, read])
    assert (kept[:, [c for c in range(64 * 49) if c // 49 in expected[2]]] == 0).all()


def test_recycling_silent_units_leaves_the_agents_outputs_as_they_were():
    """A unit that outputs 0 on every input contributes nothing, and after recycling its
    outgoing weights are 0: the policy and the values do not move at the recycling."""
    agent = conv_agent()
    silence(agent, conv_channel=5, fc_unit=17)
    observation = frames()
    heads_before = outputs(agent, observation)
    silent = [np.flatnonzero(s == 0) for s in scores_by_hand(agent, observation)]
    recycled = Recycler(agent, threshold=1e-9, interval_frames=1000, seed=3)(
        observation, RMSpropTF(agent.parameters()), 1000, no_sum)
    assert recycled == sum(len(units) for units in silent) and 17 in silent[3]
    for name, value in outputs(agent, observation).items():
        torch.testing.assert_close(value, heads_before[name], rtol=0, atol=1e-6)


def test_the_optimizer_state_of_recycled_weights_is_fresh_and_the_rest_kept():
    agent = conv_agent()
    silence(agent, conv_channel=5, fc_unit=17)
    optimizer = RMSpropTF(agent.parameters(), momentum=0.9)
    for param in agent.parameters():
        param.grad = torch.randn_like(param)
    optimizer.step()
    fc = agent.fc[0]
    silent = [np.flatnonzero(s == 0) for s in scores_by_hand(agent, frames())]
    live = next(u for u in range(512) if u not in silent[3])
    kept = {name: optimizer.state[fc.weight][name][live].clone()
            for name in ("mean_square", "momentum")}
    Recycler(agent, threshold=1e-9, interval_frames=1000, seed=3)(
        frames(), optimizer, 1000, no_sum)
    state = optimizer.state[fc.weight]
    assert (state["mean_square"][17] == 1).all() and (state["momentum"][17] == 0).all()
    head_state = optimizer.state[agent.heads["baseline"].weight]
    assert (head_state["mean_square"][:, 17] == 1).all()
    assert (head_state["momentum"][:, 17] == 0).all()
    read = [c for c in range(64 * 49) if c // 49 not in silent[2]]  # kept conv3 channels
    for name, value in kept.items():  # a unit that was not recycled
        assert torch.equal(state[name][live][read], value[read])


def test_every_rank_draws_the_same_weights_and_another_recycling_other_ones():
    """Same seed and frame count: the same new weights (ranks agree without a broadcast)."""
    draws = []
    for frames_at in (1000, 1000, 2000):
        agent = conv_agent()
        silence(agent, conv_channel=5, fc_unit=17)
        Recycler(agent, 0.1, 1000, seed=3)(frames(), RMSpropTF(agent.parameters()),
                                            frames_at, no_sum)
        draws.append(agent.fc[0].weight[17].clone())
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], draws[2])


def test_recycling_falls_due_where_the_run_crosses_a_multiple_of_the_interval():
    recycler = Recycler(conv_agent(), 0.1, 16_000, seed=1)
    assert recycler.due(15_400, 16_040) and recycler.due(31_999, 32_000)
    assert not recycler.due(16_000, 16_640) and not recycler.due(0, 15_999)


def test_the_features_read_by_an_lstm_are_recycled_in_its_input_weights():
    agent = conv_agent(SimpleConvNetLSTMAgent)
    silence(agent, conv_channel=5, fc_unit=17)
    Recycler(agent, 0.1, 1000, seed=3)(frames(), RMSpropTF(agent.parameters()), 1000, no_sum)
    assert (agent.lstm.weight_ih_l0[:, 17] == 0).all()
    assert agent.lstm.weight_ih_l0[:, 18].abs().sum() > 0


def test_an_mlp_torso_is_scored_on_its_tanh_units():
    torch.manual_seed(0)
    agent = MLPAgent((4,), 2, Impala.heads)
    with torch.no_grad():
        agent.mlp[0].weight[3] = 0.0
        agent.mlp[0].bias[3] = 0.0  # tanh(0) = 0 on every input
    observation = torch.randn(5, 4, 4)
    Recycler(agent, 0.1, 1000, seed=1)(observation, RMSpropTF(agent.parameters()), 1000,
                                       no_sum)
    assert agent.mlp[0].weight[3].abs().sum() > 0
    assert (agent.mlp[2].weight[:, 3] == 0).all()


def test_a_torso_that_is_not_a_chain_of_layers_is_refused_by_name():
    agent = ResNetAgent(SHAPE, ACTIONS, Impala.heads)
    with pytest.raises(ValueError, match="ResNetAgent.*SimpleConvNetAgent"):
        Recycler(agent, 0.1, 1000, seed=1)
