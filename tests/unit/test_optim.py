"""RMSpropTF against a NumPy version written from TensorFlow 1's RMSProp update rule."""

import numpy as np
import pytest
import torch

from impala.config import OPTIMIZERS
from impala.distributed import synced_tensors
from impala.optim import RMSpropTF, build
from impala.update import tensor_operations


def numpy_rmsprop(w, grads, lr, decay, momentum, epsilon):
    """ms starts at 1; mom <- momentum*mom + lr*g/sqrt(ms+eps); w <- w - mom."""
    ms, mom = np.ones_like(w), np.zeros_like(w)
    for g in grads:
        ms = decay * ms + (1 - decay) * g * g
        mom = momentum * mom + lr * g / np.sqrt(ms + epsilon)
        w = w - mom
    return w


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_matches_the_tensorflow_update_rule(momentum):
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(3, 4))
    grads = [rng.normal(scale=s, size=(3, 4)) for s in (0.01, 1.0, 30.0, 0.1, 5.0)]
    param = torch.nn.Parameter(torch.tensor(w0))
    optimizer = RMSpropTF([param], lr=0.01, decay=0.9, momentum=momentum, epsilon=0.1)
    for g in grads:
        param.grad = torch.tensor(g)
        optimizer.step()
    expected = numpy_rmsprop(w0, grads, 0.01, 0.9, momentum, 0.1)
    np.testing.assert_allclose(param.detach().numpy(), expected, rtol=1e-12)


def test_every_parameter_of_a_group_steps_by_the_rule_and_one_without_a_gradient_stays():
    """The step updates a group's parameters together (one operation over all of them);
    each must still follow the rule on its own gradients, whatever its shape."""
    rng = np.random.default_rng(1)
    shapes = [(32, 4, 8, 8), (32,), (512, 3136), (6,)]
    starts = [rng.normal(size=shape) for shape in shapes]
    grads = [[rng.normal(scale=s, size=shape) for s in (0.5, 20.0, 0.01)] for shape in shapes]
    params = [torch.nn.Parameter(torch.tensor(w)) for w in starts]
    frozen = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    optimizer = RMSpropTF([*params, frozen], lr=0.02, decay=0.95, momentum=0.5, epsilon=0.01)
    for step in range(3):
        for param, per_step in zip(params, grads, strict=True):
            param.grad = torch.tensor(per_step[step])
        optimizer.step()
    for param, w0, per_step in zip(params, starts, grads, strict=True):
        expected = numpy_rmsprop(w0, per_step, 0.02, 0.95, 0.5, 0.01)
        # atol: a few of 1.6M weights land within 1e-5 of 0, where w - mom cancels.
        np.testing.assert_allclose(param.detach().numpy(), expected, rtol=1e-12, atol=1e-15)
    assert torch.equal(frozen.detach(), torch.ones(3, dtype=torch.float64))
    assert frozen not in optimizer.state


def test_first_step_is_small_unlike_torch_rmsprop():
    """The reason it exists: torch's zero-initialised mean square makes the first step
    about lr / sqrt(1 - decay) = 10 lr whatever the gradient's size."""
    grad = torch.full((1000,), 0.03)
    steps = {}
    for name, make in (("tf", lambda p: RMSpropTF([p], lr=6e-4, epsilon=0.01)),
                       ("torch", lambda p: torch.optim.RMSprop([p], lr=6e-4, alpha=0.99,
                                                              eps=0.01))):
        param = torch.nn.Parameter(torch.zeros(1000))
        param.grad = grad.clone()
        make(param).step()
        steps[name] = param.detach().abs().max().item()
    mean_square = 0.99 * 1 + 0.01 * 0.03**2  # TF starts it at 1, torch at 0
    assert steps["tf"] == pytest.approx(6e-4 * 0.03 / np.sqrt(mean_square + 0.01), rel=1e-6)
    assert steps["torch"] == pytest.approx(6e-4 * 0.03 / (np.sqrt(0.01 * 0.03**2) + 0.01),
                                           rel=1e-6)
    assert steps["torch"] > 70 * steps["tf"]


def test_state_round_trips_through_a_state_dict():
    param = torch.nn.Parameter(torch.ones(5))
    optimizer = RMSpropTF([param], lr=0.1)
    param.grad = torch.ones(5)
    optimizer.step()
    again = RMSpropTF([param], lr=0.1)
    again.load_state_dict(optimizer.state_dict())
    assert torch.equal(again.state[param]["mean_square"], optimizer.state[param]["mean_square"])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="epsilon=0"):
        RMSpropTF([torch.nn.Parameter(torch.ones(1))], lr=0.1, epsilon=0)


def test_it_can_be_rebuilt_from_its_param_groups_as_horovod_does():
    """hvd.DistributedOptimizer calls the class with the param groups only; each group keeps
    its own settings (a required argument made every multi-learner run die at start)."""
    param = torch.nn.Parameter(torch.ones(3))
    original = RMSpropTF([param], lr=0.123, decay=0.5, epsilon=0.2)
    rebuilt = RMSpropTF(original.param_groups)
    assert rebuilt.param_groups[0]["lr"] == 0.123 and rebuilt.param_groups[0]["decay"] == 0.5


def test_the_rate_is_held_then_annealed_linearly_to_zero_at_the_budget():
    from impala.schedules import scheduled_learning_rate as rate

    # the paper's schedule: linear from the first frame
    assert rate(0.001, 0, 1000, 0.0) == 0.001
    assert rate(0.001, 250, 1000, 0.0) == pytest.approx(0.00075)
    # held for 80%, then linear: half way through the last fifth is half the rate
    assert rate(0.001, 800, 1000, 0.8) == 0.001
    assert rate(0.001, 900, 1000, 0.8) == pytest.approx(0.0005)
    assert rate(0.001, 1000, 1000, 0.8) == 0.0
    assert rate(0.001, 1200, 1000, 0.8) == 0.0  # frames past the budget (last batches)
    # never annealed
    assert rate(0.001, 1000, 1000, 1.0) == 0.001


def test_the_operations_of_a_step_do_not_grow_with_the_parameters():
    """One operation over all of a group's parameters, not ~8 per parameter: on a GPU each
    is a launch."""
    def operations(count):
        params = [torch.nn.Parameter(torch.ones(4)) for _ in range(count)]
        optimizer = RMSpropTF(params, lr=0.1)
        for param in params:
            param.grad = torch.ones(4)
        optimizer.step()  # the state is made on the first step
        return tensor_operations(optimizer.step)
    assert 0 < operations(2) == operations(20)  # 0 would be a profiler that saw nothing


def test_adam_is_torchs_with_the_runs_rate_and_epsilon():
    params = [torch.nn.Parameter(torch.ones(3))]
    adam = build("adam", params, lr=2.5e-4, decay=0.99, momentum=0.0, epsilon=3e-4)
    assert type(adam) is torch.optim.Adam
    assert adam.param_groups[0]["lr"] == 2.5e-4 and adam.param_groups[0]["eps"] == 3e-4
    assert type(build("rmsprop", params, 0.1, 0.99, 0.0, 0.01)) is RMSpropTF
    with pytest.raises(ValueError, match="rmsprop or adam, got .sgd."):
        build("sgd", params, 0.1, 0.99, 0.0, 0.01)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_made_for_the_ranks_broadcast_leaves_the_first_step_as_a_single_learners(name):
    """Before rank 0's broadcast, each rank's fresh optimizer gets its state tensors by a
    zero-gradient step; that step must not count (Adam's bias correction would take the
    first real step as the second, a quarter smaller)."""
    def first_step(prepared: bool) -> torch.Tensor:
        model = torch.nn.Linear(3, 2)
        torch.nn.init.constant_(model.weight, 0.5)
        optimizer = build(name, model.parameters(), lr=0.01, decay=0.99, momentum=0.0,
                          epsilon=1e-8)
        if prepared:
            synced_tensors(model, optimizer)
        model(torch.ones(4, 3)).sum().backward()
        optimizer.step()
        return model.weight.detach().clone()

    assert torch.allclose(first_step(prepared=True), first_step(prepared=False), rtol=0,
                          atol=0)
