"""Which device a learner or an actor computes on. `auto` takes a GPU where torch sees one:
the same command uses the GPU of a GPU machine and the CPU elsewhere."""

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
    return torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
