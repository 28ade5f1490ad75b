"""Defaults that use the machine: which torch build `make setup` installs, where a learner
and actors compute, and how many actors fill the cores. CUDA paths share this code; the
tests that need a GPU skip, saying so, where torch sees none."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from impala import cores as cores_module
from impala import devices
from impala.algorithms.impala import Impala
from impala.config import Config
from impala.cores import default_actor_count, learner_io_threads
from impala.devices import resolve_device, use_tf32
from impala.flags import parse_config
from impala.nets import create_agent
from tests.helpers import ROOT

SETUP = ROOT / "scripts" / "setup.sh"
NO_GPU = "torch sees no GPU on this machine"


def torch_build(tmp_path: Path, nvidia_smi: str | None, **env: str) -> str:
    """What setup.sh would install, with `nvidia_smi` as the fake driver's script (None:
    no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "nvidia-smi"
    if nvidia_smi is not None:
        fake.write_text("#!/bin/sh\n" + nvidia_smi)
        fake.chmod(0o755)
    # A PATH of the fake and the tools the choice uses, and nothing else: on a GPU machine
    # /usr/bin holds the real nvidia-smi, which would answer for the "no nvidia-smi" case.
    for tool in ("dirname", "grep"):
        link = bin_dir / tool
        if not link.exists():
            link.symlink_to(shutil.which(tool))
    result = subprocess.run([shutil.which("bash"), str(SETUP), "--torch-build"],
                            capture_output=True, text=True, timeout=30, check=True,
                            env={"PATH": str(bin_dir), "HOME": str(tmp_path), **env})
    return result.stdout.strip()


def test_setup_installs_a_cuda_build_where_nvidia_smi_lists_a_gpu(tmp_path):
    assert torch_build(tmp_path, 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"') == "cuda"


@pytest.mark.parametrize("driver", [None, "echo 'NVIDIA-SMI has failed'; exit 9", "exit 0"])
def test_setup_installs_the_cpu_build_without_a_gpu(tmp_path, driver):
    """No nvidia-smi, one that fails (a driver without a GPU), or one that lists nothing."""
    assert torch_build(tmp_path, driver) == "cpu"


def test_the_build_can_be_chosen_by_hand(tmp_path):
    assert torch_build(tmp_path, 'echo "GPU 0: x"', TORCH_BUILD="cpu") == "cpu"


def test_auto_takes_the_gpu_where_torch_sees_one_and_the_cpu_elsewhere():
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert str(resolve_device("auto")) == expected
    assert str(Config().device_for(0)) == expected  # the learner's default is auto
    assert str(resolve_device("cpu", local_rank=3)) == "cpu"
    with pytest.raises(ValueError, match="must be one of auto, cpu, cuda"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine "
                    "without a GPU")
def test_cuda_where_torch_sees_no_gpu_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="--actor_device=cuda, but torch sees no GPU.*use "
                                         "--actor_device=cpu"):
        resolve_device("cuda", flag="--actor_device")


def float32_precisions() -> tuple[str, str, str]:
    """cuDNN convolutions', cuDNN LSTM's and matrix products' float32 precision."""
    backends = torch.backends
    if hasattr(backends.cudnn, "conv"):  # torch >= 2.9
        return (backends.cudnn.conv.fp32_precision, backends.cudnn.rnn.fp32_precision,
                backends.cuda.matmul.fp32_precision)
    cudnn = "tf32" if backends.cudnn.allow_tf32 else "ieee"
    return cudnn, cudnn, "tf32" if backends.cuda.matmul.allow_tf32 else "ieee"


@pytest.fixture
def float32_precision():
    """`float32_precisions`, and torch's defaults again afterwards."""
    yield float32_precisions
    use_tf32(True)


def test_tf32_is_off_by_default_and_on_is_torchs_default(float32_precision):
    use_tf32(False)
    assert float32_precision() == ("ieee", "ieee", "ieee")
    use_tf32(True)
    assert float32_precision() == ("tf32", "tf32", "ieee")
    assert Config().tf32 == "off"
    with pytest.raises(SystemExit):
        parse_config(["--tf32=maybe"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_a_learner_convolves_in_float32_on_the_gpu_by_default(float32_precision):
    """Against float64 on the CPU: TF32's 10-bit mantissa would be off by ~1e-3."""
    device = parse_config([]).device_for(0)
    frames = torch.rand(32, 4, 84, 84, generator=torch.Generator().manual_seed(0))
    filters = torch.randn(32, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    exact = torch.nn.functional.conv2d(frames.double(), filters.double(), stride=4)
    on_gpu = torch.nn.functional.conv2d(frames.to(device), filters.to(device), stride=4)
    error = (on_gpu.cpu().double() - exact).abs().max() / exact.abs().max()
    assert error < 1e-5


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_each_rank_on_a_host_takes_its_own_gpu():
    count = torch.cuda.device_count()
    assert [str(resolve_device("cuda", rank)) for rank in range(count + 1)] == [
        *(f"cuda:{i}" for i in range(count)), "cuda:0"]


def test_channels_last_is_chosen_where_it_was_measured_faster(capsys):
    """auto: on for a CPU learner's convolutions, and for a CPU actor only with the ResNet
    torso (Nature's is level or slower at an actor's batch); a GPU keeps the default layout
    until measured; on/off win; an agent without convolutions never."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    auto, on, off = (Config(channels_last=c) for c in ("auto", "on", "off"))
    nature, resnet, mlp = (create_agent(n, (4, 84, 84) if n != "MLPAgent" else (4,), 6,
                                        Impala.heads)
                           for n in ("SimpleConvNetLSTMAgent", "ResNetAgent", "MLPAgent"))
    chosen = {(agent_name, training): auto.uses_channels_last(cpu, agent, training)
              for agent_name, agent in (("nature", nature), ("resnet", resnet), ("mlp", mlp))
              for training in (True, False)}
    assert chosen == {("nature", True): True, ("nature", False): False,
                      ("resnet", True): True, ("resnet", False): True,
                      ("mlp", True): False, ("mlp", False): False}
    assert not auto.uses_channels_last(gpu, resnet, training=True)
    assert on.uses_channels_last(gpu, nature, training=False)
    assert not off.uses_channels_last(cpu, resnet, training=True)
    assert not on.uses_channels_last(cpu, mlp, training=True)
    with pytest.raises(SystemExit):
        parse_config(["--channels_last=yes"])
    assert "--channels_last: invalid choice: 'yes'" in capsys.readouterr().err


def test_local_runs_start_as_many_actors_as_the_cores_take():
    cores = len(os.sched_getaffinity(0))
    assert default_actor_count() == max(2, cores - 2)
    assert Config().num_actors == default_actor_count()  # 0, the default, means that
    assert Config(num_actors=5).num_actors == 5


@pytest.mark.parametrize("cores,threads", [(1, 1), (2, 1), (15, 1), (16, 2), (32, 4), (96, 4)])
def test_a_learners_io_threads_grow_with_the_actor_cores_of_its_host(monkeypatch, cores,
                                                                      threads):
    """0 (the default): one ZeroMQ I/O thread per 8 cores, 1 to 4: the weights a learner
    serves to a host full of actors need ~one thread's CURVE per 8-16 actor cores."""
    monkeypatch.setattr(cores_module, "usable_cores", lambda: cores)
    assert learner_io_threads(0) == threads
    assert learner_io_threads(3) == 3  # asked for: as asked
    with pytest.raises(ValueError, match="--learner_io_threads must be in 0..64, got -1"):
        Config(learner_io_threads=-1)


def test_a_bfloat16_torso_is_chosen_where_it_was_measured(monkeypatch):
    """auto: on for a CPU learner whose CPU has native bfloat16 (read from its cpuinfo),
    off on a GPU and on a CPU without; on/off win. R2D2's Atari preset asks for auto; the
    other presets keep off, where Atari learning with it is unmeasured."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    plain = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n"
    assert not devices.cpu_has_bf16(plain)
    assert devices.cpu_has_bf16(plain.replace("avx512f", "avx512f avx512_bf16"))
    assert devices.cpu_has_bf16(plain.replace("avx2", "amx_bf16 avx2"))
    assert not devices.cpu_has_bf16("")
    for has_bf16 in (True, False):
        monkeypatch.setattr(devices, "cpu_has_bf16", lambda has=has_bf16: has)
        assert devices.uses_bf16_torso("auto", cpu) == has_bf16
        assert not devices.uses_bf16_torso("auto", gpu)
        assert devices.uses_bf16_torso("on", gpu) and not devices.uses_bf16_torso("off", cpu)
    pong = ["--level_name=PongNoFrameskip-v4"]
    assert parse_config(["--algorithm=r2d2", *pong]).bf16_torso == "auto"
    assert parse_config(["--algorithm=r2d2", *pong, "--bf16_torso=off"]).bf16_torso == "off"
    assert parse_config(["--algorithm=apex", *pong]).bf16_torso == "off"
    assert parse_config(pong).bf16_torso == "off"
