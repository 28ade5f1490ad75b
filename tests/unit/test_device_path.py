"""The data path a GPU learner runs, checked on the CPU (it is the same code): the losses
make no host read, an update reads the device once for its statistics, the weights are
published from a snapshot by a second thread, in order, and never when non-finite. The
CUDA-only checks (pinned batches, a snapshot copied from the GPU) skip without a GPU."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from impala.algorithm import IMPORTANCE_WEIGHT, REPLAYED
from impala.distributed import SingleLearner
from impala.envs import describe_env
from impala.nets import build_agent
from impala.optim import RMSpropTF
from impala.publisher import WeightPublisher
from impala.unroll.batches import Batch, core_state, with_stacks
from impala.unroll.framestack import rebuild_stacks, stacks_from_frames
from impala.unroll.layout import EPISODE_START, FRAMES, OBSERVATION
from impala.unroll.replay import UnrollReplay
from impala.update import Update, UpdateConfig, read_to_host, tensor_operations
from tests.batches import B, T, pong_learner, random_batch

NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
_FORBIDDEN = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__")


@contextmanager
def host_reads(forbid: bool) -> Iterator[Counter]:
    """Count (or, with `forbid`, refuse) every way a tensor's values reach the host: the
    reads that make a GPU learner wait for its device. Indexing by a boolean tensor is
    one too (the result's size is only known on the device)."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in (*_FORBIDDEN, "cpu",
                                                                  "__getitem__")}

    def watched(name):
        def method(self, *args, **kwargs):
            if name == "__getitem__":
                index = args[0] if isinstance(args[0], tuple) else (args[0],)
                if not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                           for i in index):
                    return originals[name](self, *args, **kwargs)
            counts[name] += 1
            if forbid:
                raise AssertionError(f"a host read: Tensor.{name}")
            return originals[name](self, *args, **kwargs)
        return method

    for name in originals:
        setattr(torch.Tensor, name, watched(name))
    try:
        yield counts
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)


@pytest.mark.parametrize("algorithm", ["impala", "apex"])
def test_no_loss_reads_the_device_so_a_gpu_learner_queues_the_whole_update(algorithm):
    """Fresh and replayed columns, importance weights and (IMPALA) LASER's trust region:
    the loss, its statistics and its column errors stay tensors. (R2D2's LSTM core reads
    its episode starts to cut the unroll into stretches: nets.lstm_core.)"""
    cfg, algo, model, layout = pong_learner(algorithm)
    batch = random_batch(layout, None)
    tensors = batch.columns(B) | {IMPORTANCE_WEIGHT: torch.tensor([1.0, 0.5, 0.25]),
                                  REPLAYED: torch.tensor([False, True, True])}
    learning = algo.learning(model)
    with host_reads(forbid=True):
        result = learning.loss(model, tensors, core_state(tensors))
        result.total_loss.backward()
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in result.scalars.values())
    assert result.column_errors.shape == (B,)


def test_an_update_reads_the_device_once_for_its_statistics_and_once_per_step_for_its_norm():
    """The gradient norm decides on the host whether the step is applied (every rank skips
    a non-finite one); everything else the update reports comes in one read."""
    cfg, algo, model, layout = pong_learner("impala")
    replay = UnrollReplay(layout, B, cfg.replay_schedule, 16, 0.6, 0.4, seed=0)
    batch = random_batch(layout, replay)
    for _ in range(6):
        replay.keep(batch)
    settings = UpdateConfig.of(cfg)
    settings = UpdateConfig(settings.learning_rate, settings.total_frames,
                              settings.lr_hold_fraction, 2, settings.max_grad_norm)
    update = Update(model, RMSpropTF(model.parameters(), lr=1e-4), SingleLearner(),
                    algo.learning(model), replay, torch.device("cpu"), settings)
    with host_reads(forbid=False) as counts:
        stats = update(batch, 0, 0, 100)
    # Two passes' norms; one read of the rest (`.cpu()`, then the host copy as an array).
    assert counts == Counter({"__float__": 2, "cpu": 1, "numpy": 1})
    assert stats.replay["replayed_share"] > 0 and np.isfinite(stats.total_loss)
    assert set(stats.scalars) == set(algo.log_scalars)


def test_one_read_returns_each_statistic_and_the_column_errors_in_place():
    values = {"a": torch.tensor(1.5), "b": 2.0, ("c", "d"): torch.tensor(-3.25)}
    read, errors = read_to_host(values, torch.tensor([0.5, 0.75]))
    assert read == {"a": 1.5, "b": 2.0, ("c", "d"): -3.25}
    np.testing.assert_array_equal(errors, np.array([0.5, 0.75], np.float32))
    assert read_to_host({"a": 1.0}, None) == ({"a": 1.0}, None)
    mixed = {"a": torch.tensor(1.5, dtype=torch.float64), "b": torch.tensor(2, dtype=torch.int64),
             "c": torch.tensor(0.5, requires_grad=True) * 2}
    assert read_to_host(mixed, None) == ({"a": 1.5, "b": 2.0, "c": 1.0}, None)


def test_reading_more_statistics_dispatches_no_more_tensor_operations():
    """On a GPU each operation is a launch: the read takes a few whatever the count."""
    def operations(count: int) -> int:
        values = {i: torch.tensor(float(i)) for i in range(count)}
        return tensor_operations(lambda: read_to_host(values, torch.ones(4)))
    assert 0 < operations(2) == operations(20)  # 0 would be a profiler that saw nothing


class Recorder:
    """A receiver's `publish`: what it was handed, optionally slow."""

    def __init__(self, delay: threading.Event | None = None) -> None:
        self.delay = delay
        self.versions: list[int] = []
        self.first_weights: dict[int, float] = {}

    def __call__(self, version: int, arrays: dict[str, np.ndarray], run_frames: int) -> None:
        if self.delay is not None:
            self.delay.wait(timeout=10)
        self.versions.append(version)
        self.first_weights[version] = float(next(iter(arrays.values())).reshape(-1)[0])


def test_every_version_is_published_in_order_as_it_was_when_submitted():
    model = torch.nn.Linear(3, 2)
    slow = threading.Event()
    recorder = Recorder(delay=slow)
    publisher = WeightPublisher(recorder)
    publisher.start()
    submitted = {}
    for version in range(1, 6):
        with torch.no_grad():
            model.weight.fill_(float(version))  # what the optimizer does in place
        submitted[version] = float(version)
        if version == 3:
            slow.set()  # until now the first snapshot was held up: the others waited
        publisher.submit(model, version, run_frames=100 * version)
    publisher.close()
    assert recorder.versions == [1, 2, 3, 4, 5] and publisher.published == 5
    assert recorder.first_weights == submitted


def test_non_finite_weights_are_never_published_and_the_training_thread_hears_of_it():
    model = torch.nn.Linear(3, 2)
    recorder = Recorder()
    publisher = WeightPublisher(recorder)
    publisher.start()
    publisher.submit(model, 1, 0)
    with torch.no_grad():
        model.bias[1] = float("inf")
    publisher.submit(model, 2, 0)
    publisher.join(timeout=10)  # the thread stops at the bad snapshot
    with pytest.raises(FloatingPointError, match=r"non-finite \(bias\) by update 2"):
        publisher.submit(model, 3, 0)
    publisher.close()
    assert recorder.versions == [1]


@NO_CUDA
def test_a_gpu_learners_batches_are_pinned_its_snapshots_copied_and_its_stacks_gathered():
    cfg, algo, model, layout = pong_learner("impala")
    assert all(t.is_pinned() for t in Batch(layout, B, pinned=True).tensors.values())
    model = model.cuda()
    recorder = Recorder()
    publisher = WeightPublisher(recorder)
    publisher.start()
    publisher.submit(model, 7, 0)
    publisher.close()
    assert recorder.versions == [7]
    assert recorder.first_weights[7] == float(next(iter(model.state_dict().values()))
                                              .reshape(-1)[0])
    frames = torch.randint(0, 255, (T + 4, B, 5, 5), dtype=torch.uint8)
    starts = torch.rand(T + 1, B) < 0.3
    on_gpu = stacks_from_frames(frames.cuda(), starts.cuda())
    assert torch.equal(on_gpu.cpu(), stacks_from_frames(frames, starts))


def test_stacks_gathered_from_a_batch_of_frames_are_the_hosts_rebuild_of_each_column():
    rng = np.random.default_rng(1)
    steps, stack, columns = T + 1, 4, 5
    frames = rng.integers(0, 255, (steps + stack - 1, columns, 3, 2), dtype=np.uint8)
    starts = rng.random((steps, columns)) < 0.3
    starts[:, 0] = False  # a column without any reset, and one reset at every step
    starts[:, 1] = True
    gathered = stacks_from_frames(torch.from_numpy(frames), torch.from_numpy(starts))
    assert gathered.shape == (steps, columns, stack, 3, 2)
    for b in range(columns):
        expected = np.empty((steps, stack, 3, 2), np.uint8)
        rebuild_stacks(frames[:, b], starts[:, b], expected)
        np.testing.assert_array_equal(gathered[:, b].numpy(), expected)


@pytest.mark.parametrize("algorithm", ["impala", "apex"])
def test_an_update_on_a_batch_of_frames_is_the_update_on_a_batch_of_stacks(algorithm):
    """--stack_frames=device against host: the same fresh and replayed unrolls, the same
    parameters afterwards, bit for bit (the gather copies; nothing is computed)."""
    cfg, algo, _, layout = pong_learner(algorithm)
    after = []
    for on_device in (False, True):
        torch.manual_seed(0)
        model = build_agent(cfg.agent_name, describe_env(cfg.env_config), algo)
        replay = UnrollReplay(layout, B, cfg.replay_schedule, 16, 0.6, 0.4, seed=0)
        batch = random_batch(layout, replay, stacks_on_device=on_device)
        assert (FRAMES in batch.arrays) == on_device == (OBSERVATION not in batch.arrays)
        for _ in range(4):
            replay.keep(batch)
        update = Update(model, RMSpropTF(model.parameters(), lr=1e-3), SingleLearner(),
                        algo.learning(model), replay, torch.device("cpu"),
                        UpdateConfig.of(cfg))
        for number in range(2):
            update(batch, number, 1000 * number, 1000 * (number + 1))
        after.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*after, strict=True))


def test_a_batch_without_frames_is_left_as_it_is():
    tensors = {OBSERVATION: torch.zeros(T + 1, B, 4)}
    assert with_stacks(tensors) is tensors
    frames = {FRAMES: torch.zeros(T + 4, B, 2, 2, dtype=torch.uint8),
              EPISODE_START: torch.zeros(T + 1, B, dtype=torch.bool)}
    assert set(with_stacks(frames)) == {OBSERVATION}
