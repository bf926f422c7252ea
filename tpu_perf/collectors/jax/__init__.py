"""The JAX collector: installed when the script imports jax, removed when the recording ends."""

from tpu_perf.collectors.jax.collector import install

__all__ = ["install"]
