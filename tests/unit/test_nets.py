"""Agents: shapes, heads by the algorithm's names, the LSTM reset on `done`, determinism,
lookup by name."""

import pytest
import torch
from torch import nn

from impala import checkpoint, nets
from impala.algorithm import Head
from impala.envs import random_play_observations

ATARI = (4, 84, 84)
# Heads as an algorithm would name them: the agents know no algorithm's names.
HEADS = (Head("logits", per_action=True, init_gain=0.01), Head("value", per_action=False))


def inputs(T, B, obs_shape, dtype=torch.uint8):
    if dtype == torch.uint8:
        observation = torch.randint(0, 255, (T, B, *obs_shape), dtype=torch.uint8)
    else:
        observation = torch.randn(T, B, *obs_shape)
    return (observation, torch.zeros(T, B, dtype=torch.long), torch.zeros(T, B),
            torch.zeros(T, B, dtype=torch.bool))


@pytest.mark.parametrize("name,obs_shape,dtype", [
    ("SimpleConvNetAgent", ATARI, torch.uint8),
    ("ResNetAgent", ATARI, torch.uint8),
    ("ResNetLSTMAgent", ATARI, torch.uint8),
    ("SimpleConvNetLSTMAgent", ATARI, torch.uint8),
    ("MLPAgent", (4,), torch.float32),
])
@pytest.mark.parametrize("T", [1, 3])
def test_output_shapes(name, obs_shape, dtype, T):
    B, A = 2, 6
    agent = nets.create_agent(name, obs_shape, A, HEADS)
    output, state = agent(*inputs(T, B, obs_shape, dtype), agent.initial_state(B))
    assert list(output.heads) == ["logits", "value"]
    assert output.heads["logits"].shape == (T, B, A)
    assert output.heads["value"].shape == (T, B)
    if name == "ResNetLSTMAgent":
        assert [s.shape for s in state] == [(1, B, 256), (1, B, 256)]
    elif name == "SimpleConvNetLSTMAgent":  # R2D2's: an LSTM of 512
        assert [s.shape for s in state] == [(1, B, 512), (1, B, 512)]
    else:
        assert state == ()


def test_lstm_state_resets_where_done_is_set():
    torch.manual_seed(0)
    agent = nets.create_agent("ResNetLSTMAgent", (1, 24, 24), 3, HEADS)
    observation, last_action, reward, done = inputs(1, 2, (1, 24, 24))
    nonzero = tuple(torch.randn_like(s) for s in agent.initial_state(2))
    done[0, 0] = True  # env 0 starts a new episode, env 1 continues
    with torch.no_grad():
        from_state, _ = agent(observation, last_action, reward, done, nonzero)
        from_zero, _ = agent(observation, last_action, reward, done, agent.initial_state(2))
    # Env 0 ignores the carried state; env 1 does not.
    torch.testing.assert_close(from_state.heads["logits"][:, 0], from_zero.heads["logits"][:, 0])
    assert not torch.allclose(from_state.heads["logits"][:, 1], from_zero.heads["logits"][:, 1])


def test_lstm_reset_inside_an_unroll():
    """A done at step 2 of 3 makes steps 2.. independent of everything before."""
    torch.manual_seed(0)
    agent = nets.create_agent("ResNetLSTMAgent", (1, 24, 24), 3, HEADS)
    observation, last_action, reward, done = inputs(3, 1, (1, 24, 24))
    done[2, 0] = True
    other = observation.clone()
    other[:2] = torch.randint(0, 255, other[:2].shape, dtype=torch.uint8)
    with torch.no_grad():
        a, _ = agent(observation, last_action, reward, done, agent.initial_state(1))
        b, _ = agent(other, last_action, reward, done, agent.initial_state(1))
    torch.testing.assert_close(a.heads["logits"][2], b.heads["logits"][2])
    assert not torch.allclose(a.heads["logits"][1], b.heads["logits"][1])


def lstm_step_by_step(lstm, features, done, core_state):
    """The reference: one LSTM step at a time, the state zeroed where done is set."""
    h, c = core_state
    outputs = []
    for t in range(len(features)):
        keep = (~done[t]).float().view(1, -1, 1)
        out, (h, c) = lstm(features[t:t + 1], (h * keep, c * keep))
        outputs.append(out)
    return torch.cat(outputs), (h, c)


@pytest.mark.parametrize("episode_starts", ["none", "first step", "scattered", "every step"])
def test_the_lstm_run_by_stretches_equals_one_step_at_a_time(episode_starts):
    """lstm_core calls the LSTM once per stretch without an episode start: its outputs,
    final state and gradients must be those of stepping one frame at a time."""
    torch.manual_seed(0)
    T, B, F, H = 17, 5, 6, 8
    lstm = nn.LSTM(F, H)
    done = torch.zeros(T, B, dtype=torch.bool)
    if episode_starts == "first step":
        done[0, 1:3] = True
    elif episode_starts == "scattered":
        done[[0, 3, 3, 4, 9, 16], [0, 1, 4, 1, 2, 3]] = True
    elif episode_starts == "every step":
        done[:] = True
    state = (torch.randn(1, B, H), torch.randn(1, B, H))
    results = []
    for core in (nets.lstm_core, lstm_step_by_step):
        features = torch.randn(T, B, F, generator=torch.Generator().manual_seed(1),
                               requires_grad=True)
        lstm.zero_grad()
        out, (h, c) = core(lstm, features, done, state)
        (out.square().sum() + h.sum() + c.sum()).backward()
        results.append([out, h, c, features.grad, *(p.grad for p in lstm.parameters())])
    for fast, slow in zip(*results, strict=True):
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)


def test_deterministic_under_a_seed():
    def build_and_run():
        torch.manual_seed(42)
        agent = nets.create_agent("SimpleConvNetAgent", ATARI, 4, HEADS)
        torch.manual_seed(7)
        return agent(*inputs(2, 3, ATARI))[0]

    first, second = build_and_run(), build_and_run()
    torch.testing.assert_close(first.heads["logits"], second.heads["logits"])


def test_uint8_observations_are_scaled_inside_the_net():
    agent = nets.create_agent("SimpleConvNetAgent", ATARI, 4, HEADS)
    observation, *rest = inputs(1, 1, ATARI)
    with torch.no_grad():
        from_uint8 = agent(observation, *rest)[0].heads["logits"]
        from_float = agent(observation.float() / 255.0, *rest)[0].heads["logits"]
    torch.testing.assert_close(from_uint8, from_float)


def test_lookup_is_case_insensitive_and_lists_valid_names():
    assert nets.agent_class("simpleconvnetagent") is nets.SimpleConvNetAgent
    assert nets.agent_class("ResNetLSTMAgent") is nets.ResNetLSTMAgent
    with pytest.raises(ValueError, match="valid names: SimpleConvNetAgent, ResNetAgent"):
        nets.agent_class("ConvLSTMAgent")


def test_wrong_observation_rank_is_a_clear_error():
    agent = nets.create_agent("MLPAgent", (4,), 2, HEADS)
    with pytest.raises(ValueError, match=r"observation must be \[T, B"):
        agent(torch.zeros(3, 4), torch.zeros(3, dtype=torch.long), torch.zeros(3),
              torch.zeros(3, dtype=torch.bool))


def test_a_new_conv_agent_sees_the_game_and_starts_near_uniform():
    """Pong's screens differ only in the ball and paddles. Under PyTorch's default init the
    512 features varied by ~3e-4 between frames (beside the one-hot last action's 1.0) and
    Pong was not learned for 9M frames; the ReLU-preserving init gives ~8e-3. The policy
    head starts near uniform so no action is favoured before any learning."""
    torch.manual_seed(0)
    agent = nets.create_agent("SimpleConvNetAgent", (4, 84, 84), 6, HEADS)
    frames = torch.from_numpy(random_play_observations("PongNoFrameskip-v4", 100, seed=3))
    with torch.no_grad():
        features = agent.torso(frames.float() / 255.0)
        steps = torch.zeros(len(frames), 1)
        output, _ = agent(frames[:, None], steps.long(), steps, steps.bool())
    variation = features.std(dim=0).mean().item()
    assert variation > 2e-3, f"features barely change between Pong frames: {variation:.2e}"
    probabilities = torch.softmax(output.heads["logits"], dim=-1)
    assert (probabilities - 1 / 6).abs().max() < 0.01


@pytest.mark.parametrize("name,obs_shape,dtype", [
    ("SimpleConvNetAgent", ATARI, torch.uint8),
    ("MLPAgent", (4,), torch.float32),
    ("MLPLSTMAgent", (4,), torch.float32),
])
def test_without_action_reward_inputs_the_agent_sees_only_its_observations(name, obs_shape,
                                                                            dtype):
    """Ape-X's network (frames only) cannot carry anything in its own last action; the
    default agent's output does depend on it."""
    torch.manual_seed(0)
    observation, last_action, reward, done = inputs(2, 3, obs_shape, dtype)
    other_action, other_reward = torch.ones_like(last_action), torch.ones_like(reward)
    for action_reward_inputs in (False, True):
        agent = nets.create_agent(name, obs_shape, 2, HEADS, action_reward_inputs)
        with torch.no_grad():
            a, _ = agent(observation, last_action, reward, done, agent.initial_state(3))
            b, _ = agent(observation, other_action, other_reward, done, agent.initial_state(3))
        same = all(torch.equal(a.heads[head], b.heads[head]) for head in a.heads)
        assert same is not action_reward_inputs


def test_a_state_dict_from_before_named_heads_loads_under_the_algorithms_names():
    """Checkpoints written before heads were named by algorithms hold `policy.*` and
    `baseline.*`; each algorithm says which of its heads they were."""
    agent = nets.create_agent("MLPAgent", (4,), 2, HEADS)
    old = {key.replace("heads.logits.", "policy.").replace("heads.value.", "baseline."): value
           for key, value in agent.state_dict().items()}
    assert "policy.weight" in old and "baseline.bias" in old
    renamed = checkpoint.renamed_old_heads(old, {"policy": "logits", "baseline": "value"})
    fresh = nets.create_agent("MLPAgent", (4,), 2, HEADS)
    fresh.load_state_dict(renamed)
    for key, value in agent.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key


def test_an_agent_needs_a_head():
    with pytest.raises(ValueError, match="at least one head"):
        nets.create_agent("MLPAgent", (4,), 2, ())


def heads_and_gradients(agent, batch) -> tuple[nets.AgentOutput, dict[str, torch.Tensor]]:
    """One forward and backward pass over `batch` from the initial state, as an update
    makes them: (the output, {parameter name: its gradient})."""
    agent.zero_grad()
    output, _ = agent(*batch, agent.initial_state(batch[0].shape[1]))
    (output.heads["logits"].pow(2).sum() + output.heads["value"].sum()).backward()
    return output, {n: p.grad.clone() for n, p in agent.named_parameters()}


@pytest.mark.parametrize("name", ["SimpleConvNetAgent", "ResNetAgent", "SimpleConvNetLSTMAgent"])
def test_channels_last_activations_change_no_output_or_gradient_and_no_parameters_layout(name):
    """The learner's default on a CPU: equal heads and gradients (to float rounding), and
    parameters and gradients in their own layout, so Horovod (which refuses tensors that
    are not contiguous), checkpoints and the wire see what they did."""
    T, B = 3, 4
    torch.manual_seed(0)
    agent = nets.create_agent(name, ATARI, 6, HEADS)
    batch = inputs(T, B, ATARI)
    first_conv = next(m for m in agent.modules() if isinstance(m, nn.Conv2d))
    layouts = []
    first_conv.register_forward_pre_hook(lambda _, args: layouts.append(
        args[0].is_contiguous(memory_format=torch.channels_last)))
    results = []
    for channels_last in (False, True):
        agent.channels_last = channels_last
        results.append(heads_and_gradients(agent, batch))
        assert all(p.is_contiguous() and p.grad.is_contiguous() for p in agent.parameters())
    assert layouts == [False, True]  # the convolutions saw the layout asked for
    (plain, plain_grads), (last, last_grads) = results
    for head in HEADS:
        torch.testing.assert_close(last.heads[head.name], plain.heads[head.name],
                                   rtol=1e-4, atol=1e-5)
    for param_name, grad in plain_grads.items():
        torch.testing.assert_close(last_grads[param_name], grad, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", ["SimpleConvNetAgent", "SimpleConvNetLSTMAgent"])
def test_a_bfloat16_torso_keeps_float32_parameters_heads_and_gradients_near_float32s(name):
    """`--bf16_torso=on` in a learner: the convolutions compute in bfloat16, while the
    parameters, their gradients (what Horovod averages and RMSProp steps), the core and the
    heads stay float32; heads and gradients agree with float32's to bfloat16's rounding."""
    T, B = 3, 4
    torch.manual_seed(0)
    agent = nets.create_agent(name, ATARI, 6, HEADS)
    batch = inputs(T, B, ATARI)
    conv_dtypes = []
    for conv in (m for m in agent.modules() if isinstance(m, nn.Conv2d)):
        conv.register_forward_hook(lambda _, args, out: conv_dtypes.append(out.dtype))
    results = []
    for bf16 in (False, True):
        agent.bf16_torso = bf16
        output, gradients = heads_and_gradients(agent, batch)
        results.append((output, torch.cat([g.flatten() for g in gradients.values()])))
        assert output.features.dtype == torch.float32
        assert all(h.dtype == torch.float32 for h in output.heads.values())
        assert all(p.dtype == p.grad.dtype == torch.float32 for p in agent.parameters())
    assert conv_dtypes == [torch.float32] * 3 + [torch.bfloat16] * 3
    (plain, plain_grad), (bf16, bf16_grad) = results
    for head in HEADS:
        torch.testing.assert_close(bf16.heads[head.name], plain.heads[head.name],
                                   rtol=0.02, atol=0.02)
    assert nn.functional.cosine_similarity(bf16_grad, plain_grad, dim=0) > 0.99


def test_only_a_learner_runs_its_torso_in_bfloat16():
    """Actors and evaluation act in float32 whatever `--bf16_torso` says."""
    from impala.assembly import assemble
    from impala.envs import create_env, env_info
    from impala.flags import parse_config

    cfg = parse_config(["--algorithm=apex", "--level_name=impala/DelayedCueLong-v0",
                        "--bf16_torso=on"])
    env = create_env(cfg.env_config)
    info = env_info(env, cfg.env_config)
    env.close()
    assert assemble(cfg, info, training=True).model.bf16_torso
    assert not assemble(cfg, info, training=False).model.bf16_torso
