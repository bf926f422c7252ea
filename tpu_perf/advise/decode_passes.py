"""Decode rules on what surrounds and fills a decode step: prompts prefilled apart from decoding,
and attention that passes over the KV cache more than once. Gains are generated tokens/s over the
requests' time, bounded by the part the fix touches (Amdahl), as the other decode rules'.
"""

from __future__ import annotations

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.decode import amdahl
from tpu_perf.advise.finding import Finding, Fix, Gain, Rule, ev, fired, not_evaluable, passed
from tpu_perf.advise.signals import Signals

PREFILL_STALL = Rule(
    id="prefill-stall", title="Prompts are prefilled apart from decoding and hold much of the requests' time", family="decode", severity="medium",
    fix=Fix(
        summary="Overlap prompt processing with decoding: split long prompts into chunks that run in the same steps as the running requests' decode (chunked prefill), "
                "and prefill waiting prompts together rather than one request at a time between decode steps; serving engines (vLLM, SGLang, JetStream) schedule both.",
        jax="for chunk in jnp.split(prompt, len(prompt) // 256):  # chunked prefill\n"
            "    tokens, cache = mixed_step(params, chunk, running_tokens, cache, positions)  # one call: a prompt chunk + one token of every running request",
        pytorch="llm = vllm.LLM(model, enable_chunked_prefill=True, max_num_batched_tokens=512)  # or a hand-written server: one padded prefill call for the waiting prompts",
    ),
    docs=("https://docs.vllm.ai/en/latest/configuration/optimization.html", "https://jax-ml.github.io/scaling-book/inference/"),
)

UNFUSED_ATTENTION = Rule(
    id="unfused-attention", title="The decode step's attention passes over the KV cache more than once", family="decode", severity="medium",
    fix=Fix(
        summary="Attend over the cache with one fused kernel that reads each K and V array once, in the cache's own layout, instead of einsum-softmax-einsum "
                "(which makes the compiler copy the cache into its matmul's layout and read it again).",
        jax="out = jax.nn.dot_product_attention(q, k_cache, v_cache, mask=valid)  # cuDNN on GPU\n"
            "# on TPU: jax.experimental.pallas.ops.tpu.ragged_paged_attention (as tpu-inference serves), or paged_attention",
        pytorch="out = torch.nn.functional.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=valid)  # flash / memory-efficient kernels",
    ),
    docs=("https://docs.jax.dev/en/latest/_autosummary/jax.nn.dot_product_attention.html", "https://github.com/jax-ml/jax/tree/main/jax/experimental/pallas/ops/tpu"),
)


def prefill_stall(s: Signals) -> Finding:
    i = s.inference
    if i is None:
        return not_evaluable(PREFILL_STALL, "no generation requests were recorded (an inference run only)")
    if i.ttft_s is None or i.e2e_s is None or not i.e2e_s.p50 > 0:
        return not_evaluable(PREFILL_STALL, "no request's first token was seen apart from the rest (a whole request inside one compiled loop): prefill and decode are not told apart")
    # a typical request's split (medians): the first request's TTFT holds its programs' compiles, warm-up rather than prefill
    p, per_call = min(1.0, i.ttft_s.p50 / i.e2e_s.p50), i.requests / max(1, i.calls)
    prompt = i.prompt_tokens / i.requests if i.prompt_tokens is not None and i.requests else None
    itl = i.itl_s.p99 / i.itl_s.p50 if i.itl_s is not None and i.itl_s.p50 > 0 else None
    evidence = [ev("typical_prefill_share_fraction", p, "inference", "inference.ttft_s.p50 / inference.e2e_s.p50"), ev("prefill_share_fraction", i.prefill_share, "inference", "inference.prefill_share (compiles included)"),
                ev("prompt_tokens_per_request", prompt, "inference", "inference.prompt_tokens / inference.requests"),
                ev("generated_tokens_per_request", i.generated_tokens / i.requests if i.requests else None, "inference", "inference.generated_tokens / inference.requests"),
                ev("ttft_p50_s", i.ttft_s.p50 if i.ttft_s else None, "inference", "inference.ttft_s.p50"), ev("tpot_p50_s", i.tpot_s.p50 if i.tpot_s else None, "inference", "inference.tpot_s.p50"),
                ev("sequences_per_call", per_call, "inference", "inference.requests / inference.calls"),
                ev("stalled_token_gaps_count", i.stalled_gaps, "inference", "inference.stalled_gaps"), ev("stall_share_fraction", i.stall_share, "inference", "inference.stall_share"),
                ev("itl_p99_over_p50_ratio", itl, "inference", "inference.itl_s.p99 / inference.itl_s.p50")]
    stalled = i.stall_share is not None and i.stall_share >= T.PREFILL_STALL_SHARE
    if p < T.PREFILL_SHARE and not stalled:
        return passed(PREFILL_STALL, f"prefill holds {p:.0%} of a typical request's time (the bar: {T.PREFILL_SHARE:.0%})"
                      + (f"; other requests' tokens waited on a prefill {i.stalled_gaps} time(s), {i.stall_share:.1%} of the requests' time" if i.stalled_gaps else ""), evidence)
    what = [f"prefill holds {p:.0%} of a typical request's time" + (f" ({prompt:.0f} prompt tokens a request for {i.generated_tokens / i.requests:.0f} generated, TTFT p50 {i.ttft_s.p50 * 1e3:.3g} ms against a TPOT p50 of {i.tpot_s.p50 * 1e3:.3g} ms)" if prompt and i.ttft_s and i.tpot_s else "")]
    if i.stalled_gaps:
        what.append(f"{i.stalled_gaps} gap(s) between a request's tokens held another request's prefill, {i.stall_share:.1%} of the requests' time beyond a plain gap" + (f" (inter-token latency p99 {itl:.1f}x its p50)" if itl else ""))
    else:
        what.append(f"one request at a time ({per_call:.0f} sequence(s) a call): each prompt is processed while no token is decoded")
    gain = 1 / max(p, 1 - p)
    return fired(PREFILL_STALL, "; ".join(what), evidence,
                 Gain(factor=None, basis=f"at most: with prefill chunks run inside decode steps (prefill is compute-bound, decode memory-bound), the smaller of the two parts ({min(p, 1 - p):.0%}) hides under the other, "
                      f"{gain:.2f}x generated tokens/s; it needs requests in flight together, so batch them (decode-small-batch) where they are served one at a time",
                      kind="upper_bound", benefit="throughput", amount=gain, unit="tokens_per_s_factor"))


def unfused_attention(s: Signals) -> Finding:
    i, c = s.inference, s.cache_reads
    if i is None:
        return not_evaluable(UNFUSED_ATTENTION, "no generation requests were recorded (an inference run only)")
    if c is None:
        return not_evaluable(UNFUSED_ATTENTION, "no compiled decode step carrying a KV cache was read (a JAX decode loop that donates its cache); "
                                                "Hugging Face generate() and PyTorch loops run eager kernels (scaled_dot_product_attention is one)")
    evidence = [ev("cache_passes_count", c.passes, "hlo", "step program HLO: top-level ops' whole-array reads and writes of the donated cache (analyzers/cache_reads.py)"),
                ev("cache_arrays_count", c.arrays, "hlo", "step signature: donated arguments"), ev("cache_bytes", c.cache_bytes, "hlo", "step signature: donated arguments' bytes"),
                ev("cache_ops_share_fraction", c.op_share, "trace", "ops.parquet: time of those ops / the step program's op time"),
                ev("decode_share_fraction", i.decode_share, "inference", "inference.decode_share")]
    if c.passes is None:
        return not_evaluable(UNFUSED_ATTENTION, f"the decode step's KV cache goes into {c.ops[0]} (layers scanned over a stacked cache, or a called computation): its passes inside are not counted", evidence)
    if c.passes < T.CACHE_PASSES:
        return passed(UNFUSED_ATTENTION, f"the decode step passes over each KV cache array {c.passes:.1f} time(s) a step ({len(c.ops)} ops)", evidence)
    shown = ", ".join(c.ops[:4]) + (f" and {len(c.ops) - 4} more" if len(c.ops) > 4 else "")
    what = (f"the decode step passes over each of its {c.arrays} KV cache arrays {c.passes:.1f} times a step ({shown}: copies into the matmuls' layout and the matmuls), where a fused attention kernel reads it once"
            + (f"; those ops take {c.op_share:.0%} of the step program's op time" if c.op_share is not None else ""))
    if s.platform == "cpu":
        gain = Gain(factor=None, basis="none promised on the CPU backend: XLA:CPU lays out and fuses the program unlike a TPU (its count may differ there), and a CPU decode step this small is not bound by "
                    "memory bandwidth (a one-pass attention measured slower here); judge it from a TPU or GPU run", kind="none", benefit="throughput")
    elif c.op_share is None or i.decode_share is None:
        gain = Gain(factor=None, basis="the ops over the cache were not timed in a trace window", kind="none", benefit="throughput")
    else:
        step = 1 / (1 - c.op_share * (1 - 1 / c.passes))
        amount = amdahl(i, step)
        gain = Gain(factor=None, basis=f"at most, where those ops are bound by memory bandwidth: one pass instead of {c.passes:.1f} makes them {c.passes:.1f}x faster, the decode step {step:.2f}x, "
                    f"{amount:.2f}x generated tokens/s over the requests' time (the prefill unchanged)", kind="upper_bound", benefit="throughput", amount=amount, unit="tokens_per_s_factor")
    return fired(UNFUSED_ATTENTION, what, evidence, gain, severity="low" if s.platform == "cpu" else None)  # on CPU: another backend's program
