"""Decode rules, for runs that served generation requests (the report's `inference` section): a
decode step is memory-bound, reading every weight and the KV cache to make one token per sequence,
so its fixes change bytes per token, not FLOPs. Gains are tokens/s (throughput), bounded by the
decode share of the requests' time (Amdahl): the prefill is untouched.
"""

from __future__ import annotations

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.finding import (
    Evidence,
    Finding,
    Fix,
    Gain,
    Rule,
    ev,
    fired,
    not_evaluable,
    passed,
)
from tpu_perf.advise.signals import Signals
from tpu_perf.analyzers.inference import InferenceStats

DECODE_BATCH = Rule(
    id="decode-small-batch", title="Decode reads every weight for a few sequences: batch more requests", family="decode", severity="medium",
    fix=Fix(
        summary="Serve more sequences per decode step: batch concurrent requests (continuous batching), or pass several prompts to one generate() call.",
        jax="tokens, cache = decode_step(params, tokens[B], cache[B], position)  # B sequences per call: the weights are read once for all",
        pytorch="out = model.generate(**tokenizer(prompts, return_tensors='pt', padding=True), max_new_tokens=n)  # several prompts per call; vLLM/SGLang batch continuously",
    ),
    docs=("https://docs.vllm.ai/en/latest/", "https://jax-ml.github.io/scaling-book/inference/"),
)

FP32_KV_CACHE = Rule(
    id="fp32-kv-cache", title="The KV cache is kept in float32", family="decode", severity="low",
    fix=Fix(
        summary="Keep the KV cache in bfloat16: half the bytes each decode step reads for it, half its memory.",
        jax="cache = jnp.zeros((batch, max_len, heads, head_dim), jnp.bfloat16)",
        pytorch="model = model.to(torch.bfloat16)  # the cache takes the model's dtype; or generate(..., cache_implementation='static') with a bf16 model",
    ),
    docs=("https://huggingface.co/docs/transformers/kv_cache",),
)


def _amdahl(i: InferenceStats, decode_factor: float) -> float | None:
    """Overall tokens/s factor when the decode part speeds up by `decode_factor` (prefill unchanged)."""
    if i.decode_share is None:
        return None
    return 1 / ((1 - i.decode_share) + i.decode_share / decode_factor)


def _bytes_evidence(i: InferenceStats) -> list[Evidence]:
    return [ev("weight_bytes", i.weight_bytes, "inference", "inference.weight_bytes"), ev("kv_cache_bytes", i.kv_cache_bytes, "inference", "inference.kv_cache_bytes"),
            ev("decode_share_fraction", i.decode_share, "inference", "inference.decode_share"), ev("mbu_fraction", i.mbu, "inference", "inference.mbu")]


def decode_small_batch(s: Signals) -> Finding:
    i = s.inference
    if i is None:
        return not_evaluable(DECODE_BATCH, "no generation requests were recorded (an inference run only)")
    if i.weight_bytes is None or i.kv_cache_bytes is None:
        return not_evaluable(DECODE_BATCH, "the bytes a decode step reads are unknown (" + (i.decode_bytes_source or "no model arrays seen") + ")")
    rows = i.requests / max(1, i.calls)
    evidence = [ev("sequences_per_call", rows, "inference", "inference.requests / inference.calls"), *_bytes_evidence(i)]
    if rows > T.DECODE_SMALL_BATCH or i.kv_cache_bytes >= i.weight_bytes:
        return passed(DECODE_BATCH, f"{rows:.0f} sequences per call; KV cache {i.kv_cache_bytes / i.weight_bytes:.0%} of the weights' bytes", evidence)
    # twice the sequences: the weights once, the KV cache twice, at the same bandwidth -> tokens per byte
    per_step = 2 * (i.weight_bytes + i.kv_cache_bytes) / (i.weight_bytes + 2 * i.kv_cache_bytes)
    gain = _amdahl(i, per_step)
    return fired(DECODE_BATCH, f"{rows:.0f} sequence(s) per decode step read {i.weight_bytes:.3g} bytes of weights for {rows:.0f} token(s); the KV cache is only {i.kv_cache_bytes / i.weight_bytes:.0%} of that", evidence,
                 Gain(factor=None, basis=f"at most, where the decode step is memory-bound: twice the sequences per call make {per_step:.2f}x the tokens per decode step at the same bytes/s, {gain:.2f}x generated tokens/s over the requests' time (the prefill's {1 - (i.decode_share or 0):.0%} share unchanged); a step bound by host overhead gains less (measured 1.07-1.28x on a 2-core CPU)" if gain else "decode share unknown",
                      kind="upper_bound", benefit="throughput", amount=gain, unit="tokens_per_s_factor"))


def fp32_kv_cache(s: Signals) -> Finding:
    i = s.inference
    if i is None:
        return not_evaluable(FP32_KV_CACHE, "no generation requests were recorded (an inference run only)")
    if not s.kv_dtypes:
        return not_evaluable(FP32_KV_CACHE, "the KV cache's dtype was not seen (Hugging Face generate() records it)")
    evidence = [ev("kv_dtype", ", ".join(s.kv_dtypes), "inference", "requests.kv_dtype"), *_bytes_evidence(i)]
    share = i.kv_cache_bytes / i.decode_bytes_per_step if i.kv_cache_bytes is not None and i.decode_bytes_per_step else None
    if "float32" not in s.kv_dtypes or share is None or share < T.DECODE_KV_MIN_SHARE:
        return passed(FP32_KV_CACHE, f"KV cache in {', '.join(s.kv_dtypes)}" + (f", {share:.1%} of a decode step's bytes" if share is not None else ""), evidence)
    gain = _amdahl(i, 1 / (1 - share / 2))
    return fired(FP32_KV_CACHE, f"the KV cache is float32, {share:.1%} of the bytes each decode step reads", evidence,
                 Gain(factor=None, basis=f"bf16 halves its bytes: a memory-bound decode step {1 / (1 - share / 2):.2f}x faster, {gain:.2f}x generated tokens/s (prefill unchanged)" if gain else "decode share unknown",
                      kind="upper_bound", benefit="throughput", amount=gain, unit="tokens_per_s_factor"))
