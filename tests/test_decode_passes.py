"""The decode rules on what surrounds and fills a decode step (advise/decode_passes.py), on real
recordings: long prompts prefilled one request at a time (tests/scripts/advice_corpus/
jax_long_prompt.py --mode long) and another request's prefill run between a request's tokens
(two_slot_server.py) fire prefill-stall; the corpus's jax_decode and hf_generate, and short prompts,
pass. Attention as einsum-softmax-einsum over the cache (the long mode, and jax_decode as written)
passes over the KV cache three times a step and fires unfused-attention; one pass (the short mode)
passes it. Each run is recorded once per session (corpus_runs)."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.decode_passes import prefill_stall, unfused_attention
from tpu_perf.advise.rules import advise_signals
from tpu_perf.advise.signals import build_signals
from tpu_perf.analyzers.inference import Percentiles
from tpu_perf.store import load_run


def signals(corpus_runs, name: str):
    return build_signals(load_run(str(corpus_runs(name).dir)))


def test_prefill_stall_fires_on_long_prompts_and_passes_the_corpus(corpus_runs) -> None:
    """512-token prompts for 16 new tokens, one request at a time: prefill holds most of a typical
    request (median TTFT over median end-to-end), and the tokens/s bound is 1/max(p, 1 - p); the
    corpus's decoders and 16-token prompts pass. On the bar: 19 % passes, 21 % fires."""
    long = signals(corpus_runs, "jax_long_prompt")
    finding = prefill_stall(long)
    i = long.inference
    p = i.ttft_s.p50 / i.e2e_s.p50
    assert finding.outcome == "fired" and p > 0.3, (finding.reason, p)
    assert "512 prompt tokens a request for 16 generated" in finding.reason and "one request at a time" in finding.reason, finding.reason
    assert finding.expected_gain.amount == pytest.approx(1 / max(p, 1 - p)) and finding.expected_gain.benefit == "throughput"
    assert "training" not in finding.reason + finding.title + finding.fix.summary
    for name in ("jax_decode", "hf_generate", "jax_short_prompt"):
        assert prefill_stall(signals(corpus_runs, name)).outcome == "passed", name
    e2e = i.e2e_s.p50
    at = {share: prefill_stall(replace(long, inference=replace(i, ttft_s=Percentiles(p50=share * e2e, p90=e2e, p99=e2e, mean=e2e), stall_share=0.0))).outcome for share in (0.19, 0.21)}
    assert at == {0.19: "passed", 0.21: "fired"}
    assert prefill_stall(replace(long, inference=replace(i, ttft_s=None))).outcome == "not_evaluable"  # a whole request in one loop
    assert prefill_stall(replace(long, inference=None)).outcome == "not_evaluable"


def test_prefill_stall_counts_tokens_that_waited_on_another_requests_prefill(corpus_runs) -> None:
    """Two slots sharing one device: slot B's 1024-token prefills run between slot A's tokens. The
    requests are the script's marks (its jitted decode step, found as the step, restarts after each
    prefill too: those restarts are not a second set of requests). The gaps of A that held a whole prefill are the script's own count (±1 at the edges: a mark is a
    clock read off the script's), their time beyond a plain gap within 15 %; the rule cites them.
    On the stall bar (short prefills otherwise): 4.9 % passes, 5.1 % fires."""
    run = corpus_runs("two_slot_server")
    s = build_signals(load_run(str(run.dir)))
    i, truth = s.inference, run.truth
    assert truth["held_gaps"] >= 3, truth  # the script did make the stall it is about
    assert (i.source, i.requests) == ("explicit", truth["requests"]), (i.source, i.requests)  # the marks, not the decode step's restarts too
    assert abs(i.stalled_gaps - truth["held_gaps"]) <= 1, (i.stalled_gaps, truth)
    assert i.stall_share * i.wall_s == pytest.approx(truth["stall_s"], rel=0.15), (i.stall_share * i.wall_s, truth)
    finding = {f.id: f for f in advise_signals(s).findings}["prefill-stall"]
    assert finding.outcome == "fired" and f"{i.stalled_gaps} gap(s) between a request's tokens held another request's prefill" in finding.reason, finding.reason
    short = replace(i, ttft_s=Percentiles(p50=0.01 * i.e2e_s.p50, p90=i.e2e_s.p50, p99=i.e2e_s.p50, mean=i.e2e_s.p50))
    assert prefill_stall(replace(s, inference=replace(short, stall_share=0.049))).outcome == "passed"
    assert prefill_stall(replace(s, inference=replace(short, stall_share=0.051))).outcome == "fired"
    from rich.console import Console

    from tests.conftest import report_doc
    from tpu_perf.views.inference import render_inference

    console = Console(width=300, record=True, file=io.StringIO())
    console.print(render_inference(report_doc(run.dir, run.store)))
    assert f"{i.stalled_gaps} token gap(s) held another request's prefill" in console.export_text()
    quiet = signals(corpus_runs, "jax_decode").inference  # one request at a time: no gap holds another's prefill
    assert (quiet.stalled_gaps, quiet.stall_share) == (0, 0.0)


def test_unfused_attention_counts_the_passes_over_the_cache(corpus_runs) -> None:
    """einsum-softmax-einsum over a (batch, length, heads, head_dim) cache: XLA copies each cache
    array into its matmul's layout and reads the copy (3 passes: read, write, read), fired, with no
    gain promised on the CPU backend; one reduction per cache array (1 pass) passes. For a run on
    a TPU the gain is the cache ops' share at one pass, Amdahl over the decode share. A run without
    a compiled decode step (Hugging Face generate()) is not evaluable."""
    long, short = signals(corpus_runs, "jax_long_prompt"), signals(corpus_runs, "jax_short_prompt")
    assert (long.cache_reads.arrays, short.cache_reads.arrays) == (4, 4)  # 2 layers x (K, V)
    assert (long.cache_reads.passes, short.cache_reads.passes) == (3.0, 1.0)
    assert long.cache_reads.cache_bytes == 4 * 576 * 256 * 4  # the donated cache: 4 arrays of 576 x 4 x 64 float32
    assert any(op.startswith("copy") for op in long.cache_reads.ops) and not any(op.startswith("copy") for op in short.cache_reads.ops)
    fired = unfused_attention(long)
    assert fired.outcome == "fired" and fired.expected_gain.kind == "none" and "CPU" in fired.expected_gain.basis, fired
    assert fired.severity == "low" and unfused_attention(replace(long, platform="tpu")).severity == "medium"  # the CPU backend's program: a hint, not a TPU's defect
    assert unfused_attention(short).outcome == "passed"
    assert unfused_attention(signals(corpus_runs, "jax_decode")).outcome == "fired"  # the corpus decoder attends as einsum-softmax-einsum too
    assert unfused_attention(signals(corpus_runs, "hf_generate")).outcome == "not_evaluable"
    c, i = long.cache_reads, long.inference
    assert 0 < c.op_share < 1
    tpu = unfused_attention(replace(long, platform="tpu"))
    step = 1 / (1 - c.op_share * (1 - 1 / c.passes))
    assert tpu.expected_gain.kind == "upper_bound" and tpu.expected_gain.amount == pytest.approx(1 / ((1 - i.decode_share) + i.decode_share / step))
    bar = T.CACHE_PASSES
    assert unfused_attention(replace(long, cache_reads=replace(c, passes=bar - 0.01))).outcome == "passed"
    assert unfused_attention(replace(long, cache_reads=replace(c, passes=bar))).outcome == "fired"
    assert unfused_attention(replace(long, inference=None)).outcome == "not_evaluable"


def test_cache_passes_of_compiled_attention_programs() -> None:
    """The count on XLA:CPU's own programs, compiled here (no recording): einsum-softmax-einsum over
    a (batch, length, heads, head_dim) cache and `jax.nn.dot_product_attention` alike make a
    transposed copy and a matmul on it (3 passes: what CPU cannot tell apart, a fused kernel shows
    only on a TPU or GPU); one reduction per array, 1; a stack of layers scanned over a stacked
    cache hands the cache to a loop: not counted (None), never a false 2."""
    import jax
    import jax.numpy as jnp

    from tpu_perf.analyzers.cache_reads import cache_passes
    from tpu_perf.analyzers.hlo import parse_hlo

    b, n, h, d = 1, 128, 4, 64  # at 64 x 2 x 16 XLA:CPU copies the cache before a one-pass reduction too (4 passes)

    def einsum(q, k, v):
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k), -1), v)

    def fused(q, k, v):
        return jax.nn.dot_product_attention(q, k, v)

    def one_pass(q, k, v):
        p = jax.nn.softmax((q * k).sum(-1), axis=1)
        return (p[..., None] * v).sum(1, keepdims=True)

    def step(attend):
        def decode(q, k, v, new, pos):
            k, v = (jax.lax.dynamic_update_slice(c, new, (0, pos, 0, 0)) for c in (k, v))
            return attend(q, k, v), k, v
        return decode

    def scanned(q, k, v, new, pos):  # k, v: (layers, b, n, h, d)
        def layer(x, kv):
            kl, vl = (jax.lax.dynamic_update_slice(c, new, (0, pos, 0, 0)) for c in kv)
            return x + einsum(x, kl, vl), (kl, vl)
        x, (k, v) = jax.lax.scan(layer, q, (k, v))
        return x, k, v

    def passes(fn, cache):
        q, new = jnp.ones((b, 1, h, d)), jnp.ones((b, 1, h, d))
        text = jax.jit(fn, donate_argnums=(1, 2)).lower(q, jnp.ones(cache), jnp.ones(cache), new, 3).compile().as_text()
        return cache_passes(parse_hlo(text), [{"dtype": "float32", "shape": list(cache)}] * 2)

    cache = (b, n, h, d)
    assert passes(step(einsum), cache)[0] == 3.0
    assert passes(step(fused), cache)[0] == 3.0
    assert passes(step(one_pass), cache)[0] == 1.0
    count, ops = passes(scanned, (3, *cache))
    assert count is None and len(ops) == 1, (count, ops)
