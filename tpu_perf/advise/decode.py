"""Decode rules, for runs that served generation requests (the report's `inference` section): a
decode step is memory-bound, reading every weight and the KV cache to make one token per sequence,
so its fixes change bytes per token, not FLOPs. Gains are tokens/s (throughput), bounded by the
decode share of the requests' time (Amdahl): the prefill is untouched. Two rules judge the decode
loop itself, from the signals the training rules read (compile.after_warmup, the JAX collector's
fetch counts): a step compiled again as the sequence grows, and a token fetched to the host before
the next step is dispatched; on a generation run they take the place of `recompilation` and
`host-sync`, whose words are a training loop's.
"""

from __future__ import annotations

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.compilation import CAUSES
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
from tpu_perf.advise.input import overlap_gain
from tpu_perf.advise.signals import Signals, src
from tpu_perf.analyzers.inference import InferenceStats
from tpu_perf.analyzers.loop_requests import SOURCE as LOOP_SOURCE

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


DECODE_RECOMPILES = Rule(
    id="decode-recompiles", title="The decode step (or prefill) compiles again as the sequence grows", family="decode", severity="high",
    fix=Fix(
        summary="Give the decode step one shape for every token: a KV cache allocated at its maximum length and written in place (a position argument and a mask), "
                "and prompts padded to a few length buckets, so each program compiles once.",
        jax="cache = jnp.zeros((batch, MAX_LEN, heads, head_dim), dtype)  # not jnp.concatenate per token\n"
            "cache = jax.lax.dynamic_update_slice(cache, kv, (0, position, 0, 0))  # position: a traced int; prompts padded to buckets (64, 128, 256...)",
        pytorch="model.generate(..., cache_implementation='static')  # a fixed-size cache; with torch.compile, pad prompts to buckets (pad_to_multiple_of=64)",
    ),
    docs=("https://docs.jax.dev/en/latest/jit-compilation.html", "https://huggingface.co/docs/transformers/llm_optims#static-kv-cache-and-torchcompile"),
)

DECODE_HOST_SYNC = Rule(
    id="decode-host-sync", title="The decode loop waits for every token on the host", family="decode", severity="medium",
    fix=Fix(
        summary="Keep the sampled tokens on the device and fetch them every few steps (or when a request ends), so the host dispatches the next decode step while the device runs this one.",
        jax="tokens.append(token)  # a device array; not int(token) / np.asarray(token) per step\nout = np.asarray(jnp.stack(tokens))  # once per request, or every N tokens for streaming",
        pytorch="tokens.append(next_token)  # not next_token.item() per step; torch.stack(tokens).tolist() at the end",
    ),
    docs=("https://docs.jax.dev/en/latest/async_dispatch.html",),
)


DECODE_NO_CACHE = Rule(
    id="decode-no-cache", title="Every token runs the whole sequence again: keep a KV cache", family="decode", severity="high",
    fix=Fix(
        summary="Keep each layer's keys and values for the positions already seen (a KV cache) and feed only the new token to each decode step: "
                "its work no longer grows with the sequence, and with a fixed-size cache written in place it compiles once.",
        jax="cache = jnp.zeros((batch, max_len, heads, head_dim), dtype)  # filled by the prefill\n"
            "logits, cache = decode_step(params, token[:, None], cache, position)  # one position per call, cache carried (donate_argnums)",
        pytorch="out = model(input_ids=token, past_key_values=past, use_cache=True); past = out.past_key_values  # or model.generate(...)",
    ),
    docs=("https://jax-ml.github.io/scaling-book/inference/", "https://huggingface.co/docs/transformers/kv_cache"),
)


def amdahl(i: InferenceStats, decode_factor: float) -> float | None:
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
    gain = amdahl(i, per_step)
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
    gain = amdahl(i, 1 / (1 - share / 2))
    return fired(FP32_KV_CACHE, f"the KV cache is float32, {share:.1%} of the bytes each decode step reads", evidence,
                 Gain(factor=None, basis=f"bf16 halves its bytes: a memory-bound decode step {1 / (1 - share / 2):.2f}x faster, {gain:.2f}x generated tokens/s (prefill unchanged)" if gain else "decode share unknown",
                      kind="upper_bound", benefit="throughput", amount=gain, unit="tokens_per_s_factor"))


def decode_recompiles(s: Signals) -> Finding:
    i = s.inference
    if i is None:
        return not_evaluable(DECODE_RECOMPILES, "no generation requests were recorded (an inference run only)")
    if s.late_compiles is None:
        return not_evaluable(DECODE_RECOMPILES, "no compiles were heard after the first request or decode steps (one request, or a framework whose compiles no hook sees)")
    cost = s.recompile_excess_s if s.recompile_excess_s is not None else s.late_compile_s
    share = min(1.0, (cost or 0.0) / i.wall_s) if i.wall_s > 0 else None
    evidence = [src("late_compiles", s.late_compiles), src("late_compile_s", s.late_compile_s), src("recompile_excess_s", s.recompile_excess_s),
                ev("requests_wall_s", i.wall_s, "inference", "inference.wall_s"), ev("recompile_share_of_requests", share, "inference", "(recompile_excess_s or late_compile_s) / inference.wall_s")]
    evidence += [ev(f"compiles_of_{name}_count", n, "compiles", f"compile.after_warmup_functions[{name}]") for name, n in list(s.late_functions.items())[:3]]
    if s.late_compiles < T.RECOMPILE_MIN_COUNT or share is None or share < T.RECOMPILE_TIME_SHARE:
        return passed(DECODE_RECOMPILES, f"{s.late_compiles} recompile(s) after warm-up" + (f", {share:.1%} of the requests' wall time" if share is not None else ""), evidence)
    top = ", ".join(f"{name} x{n}" for name, n in list(s.late_functions.items())[:3])
    what = f"{s.late_compiles} recompiles after warm-up ({top}) took {cost:.3g} s, {share:.0%} of the requests' wall time"
    causes = s.recompile_causes[:3]
    if causes:
        what += "; what changed: " + "; ".join(f"{c['function']}: {CAUSES.get(str(c['kind']), c['kind'])} at {c['count']} of them (first {c['example']})" for c in causes)
        evidence += [ev(f"recompiles_by_{c['kind']}", c["count"], "compiles", f"compile.after_warmup_causes[{c['function']}, {c['kind']}]") for c in causes]
    gain = 1 / (1 - share) if share < 1 else None
    return fired(DECODE_RECOMPILES, what, evidence,
                 Gain(factor=None, basis=f"one shape per program: the {share:.0%} of the requests' wall time spent recompiling goes, {gain:.2f}x generated tokens/s (the first request's or warm-up's compiles are not counted)" if gain else "the requests' time is all recompiles",
                      kind="estimate", benefit="throughput", amount=gain, unit="tokens_per_s_factor"))


def decode_host_sync(s: Signals) -> Finding:
    i = s.inference
    if i is None:
        return not_evaluable(DECODE_HOST_SYNC, "no generation requests were recorded (an inference run only)")
    if i.source == LOOP_SOURCE:
        return not_evaluable(DECODE_HOST_SYNC, "each request runs whole inside one compiled loop: its tokens never reach the host one by one, and the fetch after each call is the request's end")
    rate = s.fetches_per_step
    if rate is None or s.framework == "torch":
        return not_evaluable(DECODE_HOST_SYNC, "no per-token fetch counts: the JAX collector counts fetches of a jitted decode step's outputs; Hugging Face generate() and PyTorch token loops are not timed as steps")
    evidence = [src("fetched_step_calls", s.fetched_step_calls), src("step_calls", s.step_calls), src("fetches_per_step", rate),
                ev("decode_step_s", i.decode_step_s, "inference", "inference.decode_step_s"), ev("decode_share_fraction", i.decode_share, "inference", "inference.decode_share")]
    what = f"{s.fetched_step_calls} of {s.step_calls} decode steps had their token fetched to the host right after dispatch"
    if rate <= T.FETCHES_PER_STEP:
        return passed(DECODE_HOST_SYNC, f"{what}: {rate:.0%} (the bar: {T.FETCHES_PER_STEP:.0%})", evidence)
    overlap, more = overlap_gain(s)
    if s.platform == "cpu" and (s.target is None or s.target.kind != "tpu"):
        gain = Gain(factor=None, basis="on the CPU backend the device's work runs on the host's own cores, so dispatching ahead does not overlap it; judge it for a TPU with --target",
                    kind="none", benefit="throughput")
        more = []
    elif overlap is None or overlap.factor is None or i.decode_share is None:
        gain = Gain(factor=None, basis="the host waits for the device at every token; the host work that could overlap it is not measured on this run", kind="none", benefit="throughput")
        more = []
    else:
        amount = amdahl(i, overlap.factor)
        gain = Gain(factor=None, basis=f"at most: {overlap.basis}, {overlap.factor:.2f}x per decode step, {amount:.2f}x generated tokens/s over the requests' time (the prefill unchanged)",
                    kind="upper_bound", benefit="throughput", amount=amount, unit="tokens_per_s_factor")
    return fired(DECODE_HOST_SYNC, what + ": each token waits for the device before the next step is dispatched", evidence + more, gain)


def decode_no_cache(s: Signals) -> Finding:
    i, w = s.inference, s.whole_sequence
    if i is None:
        return not_evaluable(DECODE_NO_CACHE, "no generation requests were recorded (an inference run only)")
    if w is None:
        return passed(DECODE_NO_CACHE, "no request's decode calls fed the whole sequence again (a cache, or a loop this rule cannot see: generate() and PyTorch token loops keep Hugging Face's own cache)")
    factor = w.step_s / w.cached_step_s if w.cached_step_s > 0 else None
    evidence = [ev("whole_sequence_requests_count", w.requests, "steps", "requests whose decode calls fed one position more each (collectors/jax/prefill.py)"),
                ev("fitted_steps_count", w.steps, "steps", "decode steps in the fit (not compiling, not traced)"),
                ev("step_fixed_s", w.fixed_s, "steps", "fit of step time against positions fed: intercept"),
                ev("step_per_position_s", w.per_position_s, "steps", "fit of step time against positions fed: slope"),
                ev("mean_positions_count", w.mean_positions, "steps", "positions a decode step fed, on average"),
                ev("decode_share_fraction", i.decode_share, "inference", "inference.decode_share")]
    what = (f"{w.requests} request(s) fed the whole sequence to every decode step ({w.mean_positions:.0f} positions on average); "
            f"their {w.steps} steps take {w.fixed_s * 1e3:.3g} ms + {w.per_position_s * 1e6:.3g} us per position fed")
    if factor is None or factor < T.WHOLE_SEQUENCE_GAIN:
        return passed(DECODE_NO_CACHE, what + (f": a one-position step would be only {factor:.2f}x faster" if factor else ""), evidence)
    amount = amdahl(i, factor)
    gain = Gain(factor=None, basis=f"at most: a step that feeds one position, by the same fit, {w.cached_step_s * 1e3:.3g} ms against {w.step_s * 1e3:.3g} ms ({factor:.2f}x); "
                f"attention over the cached positions still reads them, so less; {amount:.2f}x generated tokens/s over the requests' time (the prefill unchanged)" if amount else
                f"at most {factor:.2f}x per decode step (a step of one position, by the same fit)",
                kind="upper_bound", benefit="throughput", amount=amount, unit="tokens_per_s_factor" if amount else None)
    return fired(DECODE_NO_CACHE, what, evidence, gain)
