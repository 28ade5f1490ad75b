"""Checkpoints: round trip, and refusal of another run's or a corrupt file."""

import pytest
import torch

from impala import checkpoint
from impala.algorithms.impala import Impala
from impala.assembly import build_optimizer
from impala.config import Config
from impala.nets import create_agent
from impala.optim import RMSpropTF
from impala.registry import algorithm_class


def make(tmp_path, **flags):
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent", **flags)
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=0.01)
    model(torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1),
          torch.zeros(1, 1, dtype=torch.bool))[0].heads["baseline"].sum().backward()
    optimizer.step()
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, model, optimizer, {"frames": 1000, "updates": 5},
                    cfg.to_dict())
    return cfg, model, path


def test_round_trip(tmp_path):
    cfg, model, path = make(tmp_path)
    state = checkpoint.load(path, cfg.to_dict())
    fresh = create_agent("MLPAgent", (4,), 2, Impala.heads)
    checkpoint.restore_model(fresh, state, path)
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)
    assert state["counters"] == {"frames": 1000, "updates": 5}
    assert state["optimizer"]["state"]  # RMSProp's running averages travel too
    assert not (tmp_path / "checkpoint.pt.tmp").exists()


def test_a_checkpoint_of_an_older_version_with_a_version_counter_loads(tmp_path):
    cfg, _, path = make(tmp_path)
    state = torch.load(path, weights_only=True)
    state["counters"]["version"] = 5  # older versions kept it beside "updates"
    torch.save(state, path)
    assert checkpoint.load(path, cfg.to_dict())["counters"]["updates"] == 5


@pytest.mark.parametrize("algorithm", ["impala", "apex"])
def test_a_checkpoint_from_before_heads_were_named_by_algorithms_resumes(tmp_path, algorithm):
    """Before, every agent had a `policy` and a `baseline` head (Ape-X read its advantages
    and values out of them); each algorithm says which of its heads they were. The
    optimizer's state is kept by parameter order, which did not change."""
    cls = algorithm_class(algorithm)
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent", algorithm=algorithm)
    model = create_agent("MLPAgent", (4,), 2, cls.heads)
    optimizer = RMSpropTF(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    new_to_old = {f"heads.{new}.": f"{old}." for old, new in cls.old_head_names.items()}
    old_weights = {}
    for key, value in model.state_dict().items():
        prefix = next((p for p in new_to_old if key.startswith(p)), None)
        old_weights[new_to_old[prefix] + key[len(prefix):] if prefix else key] = value
    assert {"policy.weight", "baseline.bias"} <= old_weights.keys()
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": checkpoint.FORMAT, "model": old_weights,
                "optimizer": optimizer.state_dict(), "counters": {"frames": 7, "updates": 1},
                "flags": {k: v for k, v in cfg.to_dict().items() if k != "algorithm"}}, path)
    fresh = create_agent("MLPAgent", (4,), 2, cls.heads)
    fresh_optimizer = RMSpropTF(fresh.parameters(), lr=0.01)
    assert checkpoint.resume(path, fresh, fresh_optimizer, cfg.to_dict(),
                             cls.old_head_names) == {"frames": 7, "updates": 1}
    for key, value in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key
    with pytest.raises(checkpoint.CheckpointError, match="weights do not fit this agent"):
        checkpoint.resume(path, create_agent("MLPAgent", (4,), 2, cls.heads),
                          fresh_optimizer, cfg.to_dict())  # no renaming: refused, clearly


def test_another_algorithms_checkpoint_is_refused(tmp_path):
    _, _, path = make(tmp_path)
    apex = Config(level_name="CartPole-v1", agent_name="MLPAgent", algorithm="apex")
    with pytest.raises(checkpoint.CheckpointError,
                       match="algorithm: checkpoint has 'impala', this run 'apex'"):
        checkpoint.load(path, apex.to_dict())


def test_another_agent_or_game_is_refused(tmp_path):
    _, _, path = make(tmp_path)
    other = Config(level_name="Acrobot-v1", agent_name="MLPAgent").to_dict()
    with pytest.raises(checkpoint.CheckpointError,
                       match="level_name: checkpoint has 'CartPole-v1', this run 'Acrobot-v1'"):
        checkpoint.load(path, other)


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04broken zip"])
def test_corrupt_file_is_refused(tmp_path, content):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(content)
    with pytest.raises(checkpoint.CheckpointError, match="is corrupt or not a checkpoint"):
        checkpoint.load(path, Config().to_dict())


def test_truncated_checkpoint_is_refused(tmp_path):
    cfg, _, path = make(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(checkpoint.CheckpointError, match="corrupt"):
        checkpoint.load(path, cfg.to_dict())


def test_a_foreign_pickle_is_not_executed(tmp_path):
    """weights_only=True: a checkpoint that would run code on load is refused."""
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "checkpoint.pt"
    torch.save({"format": "impala-mlma/1", "x": Evil()}, path)
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.load(path, Config().to_dict())


def rewrite(path, change) -> None:
    """Load a checkpoint as data, apply `change` to it, save it back."""
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


def first_weight(state) -> torch.Tensor:
    return next(iter(state["model"].values()))


@pytest.mark.parametrize("change, message", [
    (lambda s: first_weight(s).view(-1).__setitem__(0, float("nan")), "NaN or infinite"),
    (lambda s: first_weight(s).view(-1).__setitem__(0, float("inf")), "NaN or infinite"),
    (lambda s: next(iter(s["optimizer"]["state"].values()))["square_avg"].fill_(float("nan")),
     "NaN or infinite values in optimizer"),
    (lambda s: s.pop("counters"), "'counters' must hold"),
    (lambda s: s["counters"].update(frames="1000"), "'counters' must hold"),
    (lambda s: s["counters"].update(frames=-1), "'counters' must hold"),
    (lambda s: s.update(model=[1, 2]), "'model' must map names to tensors"),
    (lambda s: s.update(optimizer="adam"), "'optimizer' must be"),
    (lambda s: s.update(flags=None), "'flags' must be a dict"),
])
def test_a_damaged_or_poisoned_checkpoint_is_refused_with_a_reason(tmp_path, change, message):
    cfg, _, path = make(tmp_path)
    rewrite(path, change)
    with pytest.raises(checkpoint.CheckpointError, match=message) as refused:
        checkpoint.load(path, cfg.to_dict())
    assert str(path) in str(refused.value)


def test_non_finite_weights_are_never_saved_over_a_good_checkpoint(tmp_path):
    cfg, model, path = make(tmp_path)
    good = path.read_bytes()
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(checkpoint.CheckpointError, match="not saving"):
        checkpoint.save(path, model, None, {"frames": 2000, "updates": 9},
                        cfg.to_dict())
    assert path.read_bytes() == good


def trained_with(tmp_path, optimizer_name: str):
    """A checkpoint of one step of `--optimizer=<optimizer_name>`, built as a learner's."""
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent", optimizer=optimizer_name)
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    optimizer = build_optimizer(cfg, model)
    model(torch.zeros(1, 1, 4), torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1),
          torch.zeros(1, 1, dtype=torch.bool))[0].heads["baseline"].sum().backward()
    optimizer.step()
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, model, optimizer, {"frames": 1000, "updates": 1}, cfg.to_dict())
    return model, optimizer, path


def resumed_with(path, optimizer_name: str):
    cfg = Config(level_name="CartPole-v1", agent_name="MLPAgent", optimizer=optimizer_name)
    model = create_agent("MLPAgent", (4,), 2, Impala.heads)
    optimizer = build_optimizer(cfg, model)
    checkpoint.resume(path, model, optimizer, cfg.to_dict())
    return model, optimizer


def test_adams_state_resumes_with_the_run(tmp_path):
    _, saved, path = trained_with(tmp_path, "adam")
    _, optimizer = resumed_with(path, "adam")
    assert isinstance(optimizer, torch.optim.Adam)
    for before, after in zip(saved.state.values(), optimizer.state.values(), strict=True):
        assert torch.equal(before["exp_avg_sq"], after["exp_avg_sq"])


def test_a_run_switched_to_adam_keeps_its_weights_and_starts_adams_state_fresh(tmp_path,
                                                                               caplog):
    """RMSProp's mean squares mean nothing to Adam: a checkpoint of the other optimizer
    branches into the new one with its weights and a fresh optimizer state, and says so."""
    trained, _, path = trained_with(tmp_path, "rmsprop")
    model, optimizer = resumed_with(path, "adam")
    assert all(torch.equal(a, b) for a, b in zip(trained.parameters(), model.parameters(),
                                                 strict=True))
    assert not optimizer.state
    assert "--optimizer=rmsprop's state; --optimizer=adam starts from a fresh" in caplog.text
    _, optimizer = resumed_with(path, "rmsprop")  # the same optimizer takes its state
    assert optimizer.state
