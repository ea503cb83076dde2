"""Which torch device a model runs on."""

from __future__ import annotations


def pick_device(requested: str) -> str:
    """`auto` is CUDA when a GPU is visible, else the CPU; asking for CUDA without one is an error."""
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("learner.device is 'cuda' but no CUDA device is visible to the learner")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested
