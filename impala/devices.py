"""Which device a learner or an actor computes on. `auto` takes a GPU where torch sees one:
the same command uses the GPU of a GPU machine and the CPU elsewhere.

On a GPU every float32 operation is computed in float32: cuDNN's convolutions (and its
LSTM) would otherwise take TensorFloat-32 on Ampere and later, with a 10-bit mantissa.
The losses are tested against NumPy on the CPU, and a Q-learner's action gaps can be
smaller than TF32's rounding; this network is too small for tensor cores to save time."""

from __future__ import annotations

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(choice: str, local_rank: int = 0, flag: str = "--learner_device"
                   ) -> torch.device:
    """`cuda:<local rank>` (one GPU per rank on a host, wrapping round the GPUs there) or
    cpu; ValueError if `cuda` is asked for where torch sees no GPU."""
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
    exact_float32()
    return torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")


def exact_float32() -> None:
    """No TensorFloat-32 in this process: convolutions, recurrent layers and matrix products
    of float32 tensors round as float32 does (cuDNN's default on a GPU is TF32)."""
    if hasattr(torch.backends, "fp32_precision"):  # torch >= 2.9: one switch for all three
        torch.backends.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
