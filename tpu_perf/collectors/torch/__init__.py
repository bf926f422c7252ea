"""The PyTorch collector (CPU, CUDA, torch-tpu): installed when the script imports torch."""

from tpu_perf.collectors.torch.collector import install

__all__ = ["install"]
