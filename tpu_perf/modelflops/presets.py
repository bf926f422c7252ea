"""Named model presets, with the config each number comes from.

Shapes are the published configs (Hugging Face `config.json` of the released weights, or the
paper); `seq_len` is the training sequence length the model card or paper gives, which is what
the attention FLOPs need (not the longest context the model supports).
"""

from __future__ import annotations

import difflib

from tpu_perf.errors import UsageError
from tpu_perf.modelflops.arch import Architecture

HF = "https://huggingface.co/{}/blob/main/config.json"

PRESETS: dict[str, tuple[Architecture, str]] = {
    "llama2-7b": (
        Architecture(name="llama2-7b", layers=32, d_model=4096, heads=32, d_ff=11008, vocab=32000, seq_len=4096),
        HF.format("meta-llama/Llama-2-7b-hf"),
    ),
    "llama2-13b": (
        Architecture(name="llama2-13b", layers=40, d_model=5120, heads=40, d_ff=13824, vocab=32000, seq_len=4096),
        HF.format("meta-llama/Llama-2-13b-hf"),
    ),
    "llama2-70b": (
        Architecture(name="llama2-70b", layers=80, d_model=8192, heads=64, kv_heads=8, d_ff=28672, vocab=32000, seq_len=4096),
        HF.format("meta-llama/Llama-2-70b-hf"),
    ),
    "llama3-8b": (
        Architecture(name="llama3-8b", layers=32, d_model=4096, heads=32, kv_heads=8, d_ff=14336, vocab=128256, seq_len=8192),
        HF.format("meta-llama/Meta-Llama-3-8B"),
    ),
    "llama3-70b": (
        Architecture(name="llama3-70b", layers=80, d_model=8192, heads=64, kv_heads=8, d_ff=28672, vocab=128256, seq_len=8192),
        HF.format("meta-llama/Meta-Llama-3-70B"),
    ),
    "llama3.1-405b": (
        Architecture(name="llama3.1-405b", layers=126, d_model=16384, heads=128, kv_heads=8, d_ff=53248, vocab=128256, seq_len=8192),
        HF.format("meta-llama/Llama-3.1-405B"),
    ),
    "qwen3-8b": (
        Architecture(name="qwen3-8b", layers=36, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=12288, vocab=151936, seq_len=4096),
        HF.format("Qwen/Qwen3-8B"),
    ),
    "gemma-7b": (
        Architecture(name="gemma-7b", layers=28, d_model=3072, heads=16, kv_heads=16, head_dim=256, d_ff=24576, vocab=256000, seq_len=8192, tied_embeddings=True),
        HF.format("google/gemma-7b"),
    ),
    "mixtral-8x7b": (
        Architecture(name="mixtral-8x7b", layers=32, d_model=4096, heads=32, kv_heads=8, vocab=32000, seq_len=4096, experts=8, top_k=2, moe_d_ff=14336),
        HF.format("mistralai/Mixtral-8x7B-v0.1"),
    ),
    "gpt2": (
        Architecture(name="gpt2", layers=12, d_model=768, heads=12, d_ff=3072, mlp_mats=2, vocab=50257, seq_len=1024, tied_embeddings=True, bias=True, position_embeddings=1024),
        HF.format("openai-community/gpt2"),
    ),
}
"""name -> (shapes, source of the numbers)."""


def preset(name: str, *, flag: str = "--model") -> Architecture:
    """The preset called `name`; a one-line UsageError with close names otherwise."""
    key = name.strip().lower()
    if key in PRESETS:
        return PRESETS[key][0]
    close = difflib.get_close_matches(key, list(PRESETS), n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UsageError(f"{flag} {name!r}: unknown model preset{hint} (known: {', '.join(PRESETS)})")
