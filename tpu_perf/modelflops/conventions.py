"""Named model-FLOPs conventions: training FLOPs (forward + backward) per token.

Published MFU figures differ mostly by what they count. Each function here reproduces one
source's formula for an `Architecture`, so a number can be recomputed the way its source did.
Symbols: L layers, d d_model, H query heads, K kv heads, Q head dim, T sequence length, V vocab,
F MLP width (expert width for MoE, times top-k active experts), N parameters.

The default is `maxtext` (see `DEFAULT_CONVENTION`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from tpu_perf.errors import UsageError
from tpu_perf.modelflops.arch import Architecture


@dataclass(frozen=True, kw_only=True)
class TokenFlops:
    flops_per_token: float
    """Training FLOPs (forward + backward) per token."""
    params_counted: float | None
    """The N the formula used, for 6N-style conventions; None for matmul-sum conventions."""


def _seq(arch: Architecture) -> int:
    if arch.seq_len is None:
        raise UsageError("--seq-len: the sequence length is needed for the attention FLOPs")
    return arch.seq_len


def _attention_6n(arch: Architecture, n: float) -> TokenFlops:
    """6N + 12·L·H·Q·T: the PaLM form (Chowdhery et al. 2022, appendix B)."""
    return TokenFlops(flops_per_token=6.0 * n + 12.0 * arch.layers * arch.heads * arch.q_dim * _seq(arch), params_counted=n)


def palm(arch: Architecture) -> TokenFlops:
    """PaLM: 6·N + 12·L·H·Q·T, N = all parameters (active ones for MoE), attention not halved.

    Source: PaLM, https://arxiv.org/abs/2204.02311 appendix B. 540B on 6144 TPU v4 at 238.3k tok/s
    is 46.2 % MFU.
    """
    return _attention_6n(arch, arch.active_params)


def torchtitan(arch: Architecture) -> TokenFlops:
    """torchtitan: the PaLM form with N excluding the input embedding (kept when tied).

    Source: torchtitan `get_nparams_and_flops` (models/llama3/model/args.py,
    https://github.com/pytorch/torchtitan), 6·(nparams − nparams_embedding) + 12·l·h·q·t; MoE counts
    active experts. Its peak is per GPU (per device).
    """
    n = arch.active_params - (0 if arch.tied_embeddings else arch.embedding_params)
    return _attention_6n(arch, n)


def torchtitan_2024(arch: Architecture) -> TokenFlops:
    """torchtitan as of its 2024 docs/performance.md tables: the PaLM form with N = all parameters.

    Source: https://github.com/pytorch/torchtitan/blob/main/docs/performance.md (Llama 3 8B on
    64 A100 at 2904 tok/s per GPU = 56.8 %), reproduced only when the embedding is counted.
    """
    return _attention_6n(arch, arch.active_params)


def nanogpt(arch: Architecture) -> TokenFlops:
    """nanoGPT `estimate_mfu`: 6·N + 12·L·H·Q·T with N = parameters minus position embeddings.

    Source: https://github.com/karpathy/nanoGPT/blob/master/model.py (`get_num_params(non_embedding=True)`
    drops `wpe`; the token embedding is tied to lm_head and kept). Peak: A100 bf16 312 TFLOP/s per GPU.
    """
    return _attention_6n(arch, arch.active_params - arch.position_params)


def llm_foundry(arch: Architecture) -> TokenFlops:
    """llm-foundry: 3·(2·N·T + 4·L·d·T²) per sequence, i.e. 6·N + 12·L·d·T per token.

    Source: MPT `flops_per_batch` in https://github.com/mosaicml/llm-foundry (llmfoundry/models/mpt/
    modeling_mpt.py) and scripts/train/benchmarking; N = all (active) parameters, attention uses
    d_model rather than heads × head dim, not halved.
    """
    n = arch.active_params
    return TokenFlops(flops_per_token=6.0 * n + 12.0 * arch.layers * arch.d_model * _seq(arch), params_counted=n)


def _matmul_forward_per_layer(arch: Architecture) -> float:
    """Forward FLOPs per token of one layer's weight matmuls: QKV, output, MLP (top-k experts + router)."""
    d, hq, kv = arch.d_model, arch.heads * arch.q_dim, arch.n_kv * arch.q_dim
    attn = 2.0 * d * (hq + 2 * kv) + 2.0 * hq * d
    if arch.is_moe:
        mlp = 2.0 * d * (arch.experts or 0) + (arch.top_k or 0) * 2.0 * d * (arch.expert_d_ff or 0) * arch.mlp_mats
    else:
        mlp = 2.0 * d * (arch.d_ff or 0) * arch.mlp_mats
    return attn + mlp


def _maxtext(arch: Architecture, *, causal: bool) -> TokenFlops:
    weights = arch.layers * _matmul_forward_per_layer(arch) + 2.0 * arch.d_model * arch.vocab
    attention = 4.0 * _seq(arch) * arch.heads * arch.q_dim * arch.layers * (0.5 if causal else 1.0)
    return TokenFlops(flops_per_token=3.0 * (weights + attention), params_counted=None)


def maxtext(arch: Architecture) -> TokenFlops:
    """MaxText (since July 2025): 3 × the matmul FLOPs, causal attention halved.

    Sum of FFN (one matrix per activation + output), QKV with (H + 2K)·Q, output projection, the
    unembedding (not the input embedding lookup), attention 4·T·H·Q per layer halved for the
    causal mask; MoE = router + top-k experts. Source: `calculate_tflops_training_per_device` in
    https://github.com/AI-Hypercomputer/maxtext (maxtext_utils.py), PR #1988 for the halving.
    """
    return _maxtext(arch, causal=True)


def maxtext_legacy(arch: Architecture) -> TokenFlops:
    """MaxText before July 2025: as `maxtext` but attention not halved.

    Reproduces MaxText's published tables (docs/reference/models/tiering.md: Llama 3.1 8B on
    v6e-256 at 7207 tok/s/chip = 45.46 %).
    """
    return _maxtext(arch, causal=False)


def megatron_2021(arch: Architecture) -> TokenFlops:
    """Megatron-LM 2021: 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration, per token without B·s.

    Includes one full forward recomputation (activation checkpointing), so it is closer to HFU.
    Assumes d_ff = 4h and multi-head attention (the paper's GPT models). Source: Narayanan et al.,
    https://arxiv.org/abs/2104.04473 appendix (e.g. 1T GPT on 3072 A100: 163 TFLOP/s/GPU, 52 %).
    """
    h, s, n_l, v = arch.d_model, _seq(arch), arch.layers, arch.vocab
    return TokenFlops(flops_per_token=96.0 * n_l * h * h * (1 + s / (6 * h) + v / (16 * n_l * h)), params_counted=None)


def megatron_2022(arch: Architecture) -> TokenFlops:
    """Megatron-LM 2022 model FLOPs: 72·B·s·l·h²·(1 + s/6h + V/12lh), no recomputation counted.

    Source: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    https://arxiv.org/abs/2205.05198 section 6 (d_ff = 4h, multi-head attention assumed).
    """
    h, s, n_l, v = arch.d_model, _seq(arch), arch.layers, arch.vocab
    return TokenFlops(flops_per_token=72.0 * n_l * h * h * (1 + s / (6 * h) + v / (12 * n_l * h)), params_counted=None)


def megatron_2024(arch: Architecture) -> TokenFlops:
    """Megatron-LM `num_floating_point_operations` (2024): the 2022 form generalised.

    12·l·h²·[(1 + K/H + s/h)·(H·Q/h) + (F/h)·top_k·(mats/2) + V/(2·l·h)] per token: GQA, SwiGLU
    (3/2 multiplier), MoE top-k (router not counted), attention not halved. Source:
    https://github.com/NVIDIA/Megatron-LM megatron/training/training.py (the vocab there is the
    padded vocab: pass it as --vocab to match exactly).
    """
    h, s, n_l = arch.d_model, _seq(arch), arch.layers
    ffn = arch.expert_d_ff if arch.is_moe else arch.d_ff
    routed = arch.top_k if arch.is_moe else 1
    attn = (1 + arch.n_kv / arch.heads + s / h) * (arch.heads * arch.q_dim / h)
    mlp = (ffn or 0) / h * (routed or 1) * (arch.mlp_mats / 2)
    return TokenFlops(flops_per_token=12.0 * n_l * h * h * (attn + mlp + arch.vocab / (2 * n_l * h)), params_counted=None)


@dataclass(frozen=True)
class Convention:
    name: str
    fn: Callable[[Architecture], TokenFlops]
    includes_recompute: bool = False

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip().splitlines()[0]


CONVENTIONS: dict[str, Convention] = {
    c.name: c
    for c in (
        Convention("maxtext", maxtext),
        Convention("maxtext-legacy", maxtext_legacy),
        Convention("palm", palm),
        Convention("torchtitan", torchtitan),
        Convention("torchtitan-2024", torchtitan_2024),
        Convention("megatron-2021", megatron_2021, includes_recompute=True),
        Convention("megatron-2022", megatron_2022),
        Convention("megatron-2024", megatron_2024),
        Convention("llm-foundry", llm_foundry),
        Convention("nanogpt", nanogpt),
    )
}

DEFAULT_CONVENTION = "maxtext"
"""Counts the matmuls the architecture needs (GQA, gated MLPs, MoE top-k), the unembedding but not
the embedding lookup, and halves causal attention as flash kernels skip masked blocks: it does not
depend on how parameters are counted, and it is the formula of the reference TPU trainer."""


def get_convention(name: str, *, flag: str = "--convention") -> Convention:
    key = name.strip().lower().replace("_", "-")
    if key in CONVENTIONS:
        return CONVENTIONS[key]
    close = difflib.get_close_matches(key, list(CONVENTIONS), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UsageError(f"{flag} {name!r}: unknown convention{hint} (known: {', '.join(CONVENTIONS)})")


def hfu_factor(recompute: float) -> float:
    """Hardware FLOPs / model FLOPs when a fraction `recompute` of the forward pass is rerun.

    Model FLOPs are 3 forward passes' worth (forward + 2× backward); rematerialising a fraction r of
    the forward adds r: HFU = MFU · (3 + r) / 3. Full recomputation (r = 1) gives 4/3; PaLM 540B's
    57.8 % HFU vs 46.2 % MFU corresponds to r ≈ 0.75 (https://arxiv.org/abs/2204.02311 table 3).
    """
    if not 0 <= recompute <= 1:
        raise UsageError(f"--recompute {recompute}: must be a fraction of the forward pass in [0, 1]")
    return (3.0 + recompute) / 3.0
