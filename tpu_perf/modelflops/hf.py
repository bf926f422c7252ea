"""Read a Hugging Face `config.json` into an `Architecture`.

Families: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma, gemma2, gpt2 (and
any config with the llama-style keys). `seq_len` is taken from `max_position_embeddings`
(`n_positions` for gpt2), the longest context, which is often longer than the training sequence:
pass `--seq-len` to set the one you train at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpu_perf.errors import UsageError
from tpu_perf.modelflops.arch import Architecture

GATED_MLP_FAMILIES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text"}
"""Model types whose MLP has gate, up and down matrices (SwiGLU/GeGLU)."""

TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text", "gpt2"}


def read_hf_config(path: str | Path, *, flag: str = "--hf-config") -> dict[str, Any]:
    """The JSON object in `path`, or a one-line UsageError naming the flag."""
    from tpu_perf.store.fs import filesystem, open_regular

    try:
        fs, local = filesystem(str(Path(path)))
        with open_regular(fs, local, limit=64 * 2**20) as f:  # a config.json is KBs: never /dev/zero or a FIFO
            data = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"{flag} {path}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{flag} {path}: expected a JSON object (a Hugging Face config.json)")
    return data.get("text_config", data) if "num_hidden_layers" not in data and isinstance(data.get("text_config"), dict) else data


def architecture_from_hf(config: dict[str, Any], *, flag: str = "--hf-config") -> Architecture:
    """Shapes from a parsed config.json."""
    kind = str(config.get("model_type", "")).lower()
    if kind == "gpt2" or "n_embd" in config:
        d = int(config["n_embd"])
        return Architecture(
            name=kind or "gpt2", layers=int(config["n_layer"]), d_model=d, heads=int(config["n_head"]),
            d_ff=int(config.get("n_inner") or 4 * d), mlp_mats=2, vocab=int(config["vocab_size"]),
            seq_len=int(config.get("n_positions") or config.get("n_ctx") or 1024), tied_embeddings=bool(config.get("tie_word_embeddings", True)),
            bias=True, position_embeddings=int(config.get("n_positions") or 0),
        )
    try:
        layers, d, heads = int(config["num_hidden_layers"]), int(config["hidden_size"]), int(config["num_attention_heads"])
        vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{flag}: model_type {kind or '?'} lacks {exc}; supported: llama, mistral, mixtral, qwen2/3, gemma, gpt2") from None
    experts = config.get("num_local_experts") or config.get("num_experts")
    moe_d_ff = config.get("moe_intermediate_size") or (config.get("intermediate_size") if experts else None)
    dense_d_ff = None if experts and not config.get("shared_expert_intermediate_size") else config.get("intermediate_size")
    return Architecture(
        name=config.get("_name_or_path") or kind or None,
        layers=layers, d_model=d, heads=heads,
        kv_heads=config.get("num_key_value_heads"), head_dim=config.get("head_dim"),
        d_ff=dense_d_ff if not experts else None,
        mlp_mats=3 if (kind in GATED_MLP_FAMILIES or not kind) else int(config.get("mlp_mats", 3)),
        vocab=vocab, seq_len=config.get("max_position_embeddings"),
        tied_embeddings=bool(config.get("tie_word_embeddings", kind in TIED_BY_DEFAULT)),
        experts=int(experts) if experts else None, top_k=config.get("num_experts_per_tok") if experts else None,
        moe_d_ff=int(moe_d_ff) if moe_d_ff else None,
    )
