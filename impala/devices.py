"""Which device a learner or an actor computes on. `auto` takes a GPU where torch sees one:
the same command uses the GPU of a GPU machine and the CPU elsewhere.

On a GPU, `--tf32` says whether cuDNN's convolutions and LSTM may round their float32
inputs to TensorFloat-32 (10-bit mantissa) on tensor cores. Off, the default, computes
float32 throughout, as the CPU does where the losses are tested against NumPy: on an H100
it was no slower for these networks (small, bound by kernel launches), and a value-based
agent learned no worse in float32. On is torch's default.

`--bf16_torso=auto` runs a learner's torso in bfloat16 only where that was measured to pay
and to learn: a CPU with bfloat16 instructions. A GPU keeps float32 until measured there."""

from __future__ import annotations

from pathlib import Path

import torch

# CPU flags (Linux /proc/cpuinfo) that give oneDNN native bfloat16 convolutions.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(choice: str, local_rank: int = 0, flag: str = "--learner_device",
                   tf32: bool = False) -> torch.device:
    """`cuda:<local rank>` (one GPU per rank on a host, wrapping round the GPUs there) or
    cpu; ValueError if `cuda` is asked for where torch sees no GPU. On a GPU, `tf32` sets
    this process's float32 precision (`use_tf32`)."""
    if choice not in DEVICE_CHOICES:
        raise ValueError(f"{flag} must be one of {', '.join(DEVICE_CHOICES)}, got {choice!r}")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"{flag}=cuda, but torch sees no GPU (torch {torch.__version__}, "
                         f"CUDA build: {torch.version.cuda or 'no'}); use {flag}=cpu, or "
                         "install a CUDA build (make setup does where nvidia-smi lists a GPU)")
    use_tf32(tf32)
    return torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")


def use_tf32(allowed: bool) -> None:
    """This process's float32 precision on a GPU: with `allowed`, torch's defaults (cuDNN's
    convolutions and LSTM in TensorFloat-32, matrix products in float32); without, float32
    throughout."""
    cudnn = "tf32" if allowed else "ieee"
    if hasattr(torch.backends.cudnn, "conv"):  # torch >= 2.9 sets each precision by name
        torch.backends.cudnn.conv.fp32_precision = cudnn
        torch.backends.cudnn.rnn.fp32_precision = cudnn
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = allowed
        torch.backends.cuda.matmul.allow_tf32 = False


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX), from `cpuinfo`'s
    text (this host's /proc/cpuinfo if None; False where there is none). Without these
    instructions a bfloat16 torso is emulated and may run slower than float32."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    flags = {word for line in cpuinfo.splitlines() if line.startswith("flags")
             for word in line.split(":", 1)[-1].split()}
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def uses_bf16_torso(choice: str, device: torch.device) -> bool:
    """Whether a learner on `device` runs its torso under bfloat16 (`--bf16_torso`): `on`,
    `off`, or `auto` (on for a CPU with native bfloat16, `cpu_has_bf16`)."""
    if choice != "auto":
        return choice == "on"
    return device.type == "cpu" and cpu_has_bf16()
