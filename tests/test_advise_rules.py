"""Each advisor rule on its threshold: just above fires, just below passes, missing data is not evaluable.

Signals are built from a healthy baseline with one field moved; HLO-based signals come from the
optimized HLO of real jitted functions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import jax
import jax.numpy as jnp
import pytest

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.collectives import exposed_collectives
from tpu_perf.advise.compilation import no_compile_cache, op_by_op, recompilation, unrolled_loop
from tpu_perf.advise.compute import fp32_matmul, mxu_padding, small_batch
from tpu_perf.advise.dot_dtypes import dot_flops_share_by_source_dtype
from tpu_perf.advise.hosts import straggler
from tpu_perf.advise.idle import device_idle
from tpu_perf.advise.input import host_sync, input_bound
from tpu_perf.advise.memory import hbm_headroom, hbm_pressure, no_donation
from tpu_perf.advise.rules import RULES, advise_signals
from tpu_perf.advise.signals import Signals, layer_repeats
from tpu_perf.analyzers.hlo import parse_hlo
from tpu_perf.analyzers.hlo_analysis import analyze_hlo
from tpu_perf.hardware import lookup_chip

V6E = lookup_chip("v6e")
EPS = 1e-6


def _module(fn, *args):
    return parse_hlo(jax.jit(fn).lower(*args).compile().as_text())


def _analysis(fn, *args, tile: int = 128):
    return analyze_hlo(_module(fn, *args), tile=tile)


@pytest.fixture(scope="module")
def mlp_hlo():
    """Two different f32 matmuls, each once: a healthy small program."""
    return _analysis(lambda x, w1, w2: jnp.tanh(x @ w1) @ w2, jnp.ones((512, 256)), jnp.ones((256, 512)), jnp.ones((512, 256)))


def test_hlo_rules_on_a_healthy_program(mlp_hlo) -> None:
    s = base(hlo=mlp_hlo, hlo_target=mlp_hlo, max_dot_repeats=layer_repeats(mlp_hlo))
    assert [f.outcome for f in (unrolled_loop(s), mxu_padding(s))] == ["passed", "passed"]


def base(**changes) -> Signals:
    s = Signals(
        framework="jax", platform="cpu", run_chip=None, target=V6E, target_from="--target",
        steps=40, traced_steps=3, iteration_median_s=0.1, device_median_s=0.095, host_median_s=0.005, after_warmup_wall_s=3.9, steps_after_warmup=39, loop_steps=32,
        compiles=10, compile_total_s=2.0, late_compiles=0, late_compile_s=0.0, late_functions={}, first_compiles_after_warmup={}, step_api=None, pmap_compiles=0, recompile_excess_s=0.0, distinct_compiled=8,
        compile_cache_events=0, compile_cache_env=None, step_program=True, jitted_functions=3,
        torch_graphs=None, graph_breaks=None, graph_break_reasons=[], torch_recompile_reasons=[],
        step_calls=40, fetched_step_calls=2,
        hlo=None, hlo_target=None, hlo_instructions=100, max_dot_repeats=1, step_compile_s=0.5,
        argument_bytes=8 << 20, output_bytes=8 << 20, alias_bytes=8 << 20, dot_intensity_bf16=400.0, dot_source_dtype_share={},
        breakdown={"matmul": 0.6, "compute": 0.2, "data_movement": 0.1, "collective": 0.0, "device_idle": 0.05, "host": 0.05, "input": 0.0, "compile": 0.0},
        programs_in_trace=12, peak_bytes=20 << 30, peak_source="xla_memory_analysis", capacity_bytes=32 << 30, capacity_from="catalogue:tpu-v6e",
        fixed_bytes=2 << 30, duty_cycle_pct=None,
    )
    return replace(s, **changes)


def test_the_healthy_baseline_fires_nothing() -> None:
    advice = advise_signals(base())
    assert [f.id for f in advice.fired] == []
    assert len(advice.findings) == len(RULES) + 1  # every rule, and device-idle after them


def test_recompilation_threshold() -> None:
    steps_after = 39
    over = int(T.RECOMPILES_PER_STEP * steps_after) + 1
    fired = recompilation(base(late_compiles=over, late_compile_s=0.3, recompile_excess_s=0.39))
    assert fired.outcome == "fired" and fired.gain_factor == pytest.approx(3.9 / (3.9 - 0.39))
    assert recompilation(base(late_compiles=over, late_compile_s=0.39, recompile_excess_s=None)).gain_factor == pytest.approx(3.9 / (3.9 - 0.39))
    assert recompilation(base(late_compiles=T.RECOMPILE_MIN_COUNT - 1, late_compile_s=3.0)).outcome == "passed"
    share = T.RECOMPILE_TIME_SHARE * 3.9
    assert recompilation(base(late_compiles=2, recompile_excess_s=share * (1 + EPS))).outcome == "fired"
    assert recompilation(base(late_compiles=2, recompile_excess_s=share * (1 - EPS))).outcome == "passed"
    assert recompilation(base(late_compiles=None, after_warmup_wall_s=None)).outcome == "not_evaluable"
    unknown = recompilation(base(compiles=None, compile_total_s=None, late_compiles=None, late_compile_s=None))
    assert unknown.outcome == "not_evaluable" and "not heard" in unknown.reason  # unknown compiles are not zero compiles


def test_host_sync_threshold() -> None:
    at = int(T.FETCHES_PER_STEP * 40)
    assert host_sync(base(fetched_step_calls=at + 1)).outcome == "fired"
    assert host_sync(base(fetched_step_calls=at)).outcome == "passed"
    missing = host_sync(base(step_calls=None, fetched_step_calls=None))
    assert missing.outcome == "not_evaluable" and "record" in missing.reason
    gain = host_sync(base(fetched_step_calls=40, iteration_median_s=0.1, device_median_s=0.07, host_median_s=0.03)).gain_factor
    assert gain == pytest.approx(0.1 / 0.07)


def test_input_bound_threshold() -> None:
    def with_host(h):
        return base(breakdown={**base().breakdown, "host": h})

    fired = input_bound(with_host(T.INPUT_BOUND_SHARE + EPS))
    assert fired.outcome == "fired" and fired.gain_factor == pytest.approx(1 / (1 - T.INPUT_BOUND_SHARE - EPS))
    assert input_bound(with_host(T.INPUT_BOUND_SHARE - EPS)).outcome == "passed"
    assert input_bound(base(breakdown={}, host_median_s=None)).outcome == "not_evaluable"
    from_steps = input_bound(base(breakdown={}, host_median_s=0.03, iteration_median_s=0.1))
    assert from_steps.outcome == "fired"


def test_input_bound_counts_only_the_loops_own_work() -> None:
    """The device idles 40 % of a 0.1 s step: input-bound when the loop's own work outside the step
    call covers it, dispatch (passed, named) when the host was inside the call instead; the gain is
    bounded by the share the loop's work can explain."""
    idle = base(breakdown={**base().breakdown, "host": 0.4})
    loop_bound = input_bound(replace(idle, loop_median_s=0.05, call_median_s=0.001))
    assert loop_bound.outcome == "fired" and loop_bound.gain_factor == pytest.approx(1 / (1 - 0.4))
    partly = input_bound(replace(idle, loop_median_s=0.25 * 0.1, call_median_s=0.03))
    assert partly.outcome == "fired" and partly.gain_factor == pytest.approx(1 / (1 - 0.25))  # min(idle, loop share)
    dispatch = input_bound(replace(idle, loop_median_s=0.002, call_median_s=0.04))
    assert dispatch.outcome == "passed" and dispatch.reason.startswith("not the input pipeline") and "38%" in dispatch.reason
    assert dispatch.gain_factor is None
    few = replace(idle, loop_median_s=0.05, loop_low_s=0.01, call_median_s=0.001, loop_steps=3)  # one stray iteration moves a median of 3
    assert input_bound(few).outcome == "passed" and "10%" in input_bound(few).reason
    assert input_bound(replace(few, loop_low_s=0.03)).outcome == "fired" and "the least of its 3 steady steps" in input_bound(replace(few, loop_low_s=0.03)).reason


def test_input_bound_leaves_out_the_time_a_torch_cpu_loop_waited_for_a_core() -> None:
    """Eager PyTorch on a CPU: gaps of 1 ms or more in the trace are the loop's own work, unless its
    thread waited for a core then (collectors/core_wait.py). Fired only when the share less the wait
    still reaches the line, with the gain of that share; not evaluable in between; a quiet machine
    (no wait) as before."""
    torch_cpu = base(framework="torch", loop_median_s=None, call_median_s=None, breakdown={**base().breakdown, "input": 0.0}, long_host_share=0.3)
    assert input_bound(torch_cpu).outcome == "fired" and input_bound(torch_cpu).gain_factor == pytest.approx(1 / (1 - 0.3))
    busy = input_bound(replace(torch_cpu, core_wait_share=0.2))
    assert busy.outcome == "not_evaluable" and "waited for a CPU core 20%" in busy.reason and "quiet machine" in busy.reason
    assert {e.name: e.value for e in busy.evidence}["trace_core_wait_fraction"] == pytest.approx(0.2)
    still = input_bound(replace(torch_cpu, long_host_share=0.5, core_wait_share=0.2))
    assert still.outcome == "fired" and still.gain_factor == pytest.approx(1 / (1 - 0.3)) and "30% once the gaps in which its thread waited for a CPU core (20% of the step)" in still.reason
    assert input_bound(replace(torch_cpu, long_host_share=0.1, core_wait_share=0.5)).outcome == "passed"
    # the data loader's named events are the input pipeline's own: the wait comes off the gaps only
    # (a Dataset doing per-example Python: 53 % named at 82 % core wait; precomputed, 2.4-2.7x faster)
    named = input_bound(replace(torch_cpu, breakdown={**base().breakdown, "input": 0.5}, long_host_share=0.1, core_wait_share=0.8))
    assert named.outcome == "fired" and named.gain_factor == pytest.approx(1 / (1 - 0.5)), named.reason
    jax_cpu = base(breakdown={**base().breakdown, "host": 0.3}, loop_median_s=None, call_median_s=None, core_wait_share=0.2)
    assert input_bound(jax_cpu).outcome == "fired"  # XLA runs the device's ops on threads of its own: the loop's wait is a real host delay


def test_input_bound_share_of_a_loop_that_runs_ahead_is_over_the_wall_time_per_step() -> None:
    """A loop that queues steps ahead returns from most iterations at dispatch (median 0.5 ms) and
    pays for the queued steps at its syncs (mean 190 ms, examples/jax_transformer.py): 0.15 ms of its
    own work per step is a share of the 190 ms step, not of the 0.5 ms dispatch."""
    idle = base(breakdown={**base().breakdown, "host": 0.4})
    ahead = input_bound(replace(idle, iteration_median_s=0.0005, step_s=0.19, loop_median_s=0.00015, call_median_s=0.0003))
    assert ahead.outcome == "passed" and "step_s" in {e.name for e in ahead.evidence}
    even = input_bound(replace(idle, iteration_median_s=0.1, step_s=0.1, loop_median_s=0.05, call_median_s=0.001))
    assert even.outcome == "fired" and even.gain_factor == pytest.approx(1 / (1 - 0.4))  # one kind of iteration: the median


def test_op_by_op_threshold() -> None:
    def per_step(p):
        return base(programs_in_trace=int(p * 3))

    assert op_by_op(per_step(T.OP_BY_OP_PROGRAMS_PER_STEP)).outcome == "fired"
    assert op_by_op(per_step(T.OP_BY_OP_PROGRAMS_PER_STEP - 1)).outcome == "passed"
    eager = base(step_program=False, programs_in_trace=None, distinct_compiled=T.OP_BY_OP_EAGER_PROGRAMS)
    assert op_by_op(eager).outcome == "fired"
    assert op_by_op(replace(eager, distinct_compiled=T.OP_BY_OP_EAGER_PROGRAMS - 1)).outcome == "passed"
    unjitted = base(step_program=False, programs_in_trace=None, jitted_functions=0, distinct_compiled=T.OP_BY_OP_UNJITTED_PROGRAMS)
    assert op_by_op(unjitted).outcome == "fired"
    assert op_by_op(replace(unjitted, distinct_compiled=T.OP_BY_OP_UNJITTED_PROGRAMS - 1)).outcome == "passed"
    assert op_by_op(replace(unjitted, jitted_functions=1)).outcome == "passed"  # a jitted step the tracker did not see (AOT)
    assert op_by_op(base(step_program=False, programs_in_trace=None, compiles=0, distinct_compiled=0)).outcome == "not_evaluable"
    judged = op_by_op(base(framework="torch", torch_graphs=0))  # eager PyTorch judged for a TPU: fired, one severity lower
    assert (judged.outcome, judged.severity) == ("fired", "medium")
    assert op_by_op(base(framework="torch", torch_graphs=0, platform="tpu", target=V6E)).severity == "high"
    assert op_by_op(base(framework="torch", torch_graphs=0, target=None)).outcome == "passed"


def test_op_by_op_gain_rests_on_the_untraced_step_and_the_matmuls() -> None:
    """A traced eager step twice the untraced one (the profiler's Python tracer) leaves the gain
    alone: untraced step / the matmul and collective time a compiled step still runs."""
    parts = {"step_s": 0.64, "matmul": 0.08, "collective": 0.01, "compute": 0.12, "data_movement": 0.01, "host": 0.42}
    eager = base(step_program=False, programs_in_trace=3 * 1070, iteration_median_s=0.3, traced_step_s=parts)
    got = op_by_op(eager).expected_gain
    assert (got.factor, got.kind) == (pytest.approx(0.3 / 0.09), "upper_bound") and "1.36x" in got.basis  # 0.3 / 0.22 s of device ops: no fusion saving
    assert op_by_op(replace(eager, traced_step_s={**parts, "step_s": 1.2, "host": 0.98})).gain_factor == got.factor  # more tracer time changes nothing
    no_dots = op_by_op(replace(eager, traced_step_s={**parts, "matmul": 0.0, "collective": 0.0})).expected_gain
    assert (no_dots.factor, no_dots.kind) == (pytest.approx(0.3 / 0.13), "estimate")
    assert op_by_op(replace(eager, traced_step_s={})).gain_factor is None


def test_host_sync_on_the_cpu_backend_promises_no_overlap() -> None:
    """The CPU backend's device work runs on the host's cores: no overlap to gain unless judged for a TPU."""
    fetching = base(fetched_step_calls=40, iteration_median_s=0.1, device_median_s=0.07, host_median_s=0.03)
    assert host_sync(replace(fetching, target=None)).expected_gain.kind == "none"
    assert host_sync(replace(fetching, platform="gpu", target=None)).gain_factor == pytest.approx(0.1 / 0.07)


def test_unrolled_loop_counts_layer_copies() -> None:
    def stack(layers, scan):
        def f(x, ws):
            if scan:
                return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]
            for i in range(layers):
                x = jnp.tanh(x @ ws[i])
            return x

        return _analysis(f, jnp.ones((32, 64)), jnp.ones((layers, 64, 64)))

    for layers in (T.UNROLLED_MIN_REPEATS, T.UNROLLED_MIN_REPEATS - 1):
        a = stack(layers, scan=False)
        assert layer_repeats(a) == layers
        outcome = unrolled_loop(base(hlo=a, max_dot_repeats=layer_repeats(a))).outcome
        assert outcome == ("fired" if layers >= T.UNROLLED_MIN_REPEATS else "passed")
    scanned = stack(8, scan=True)
    assert scanned.while_loops >= 1 and unrolled_loop(base(hlo=scanned, max_dot_repeats=layer_repeats(scanned))).outcome == "passed"
    assert unrolled_loop(base(hlo=None)).outcome == "not_evaluable"


def test_forward_and_backward_dots_of_a_few_square_layers_are_not_layer_copies() -> None:
    """A training step's matmuls of one square shape: forward, weight-gradient and input-gradient
    dots (5 for two 256x256 layers, the corpus's MultiSteps MLP) are read by role, not as 5 layers;
    an unrolled stack still repeats each role once per layer."""

    def grads(layers):
        def loss(ws, x):
            for w in ws:
                x = jax.nn.relu(x @ w)
            return jnp.mean(x**2)

        return _analysis(jax.grad(loss), [jnp.ones((256, 256))] * layers, jnp.ones((256, 256)))

    two = grads(2)
    assert len({(d.m, d.n, d.k) for d in two.dots}) == 1 and len(two.dots) == 5  # one shape, five dots
    assert layer_repeats(two) == 2 and unrolled_loop(base(hlo=two, max_dot_repeats=2)).outcome == "passed"
    six = grads(6)
    assert layer_repeats(six) == 6 and unrolled_loop(base(hlo=six, max_dot_repeats=6)).outcome == "fired"


def test_side_by_side_matmuls_of_one_shape_are_not_layer_copies() -> None:
    """An LSTM cell's 8 gate matmuls share one shape when input and hidden sizes match (the flax
    LSTM read as "16 unrolled copies of a layer"): side by side, they count once; the layers of a
    Python loop over scanned cells still chain, one per layer."""

    def cell(carry, x, w, u):  # 4 gates on the input, 4 on the state, one shape each: an LSTM cell
        h, c = carry
        i, f, g, o = ([x @ w[j] + h @ u[j] for j in range(4)])
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def loss(ws, us, xs):
        for layer in range(ws.shape[0]):  # a Python loop over layers, each scanning over time
            h0 = jnp.zeros(xs.shape[1:])
            _, xs = jax.lax.scan(lambda carry, x, layer=layer: cell(carry, x, ws[layer], us[layer]), (h0, h0), xs)
        return jnp.mean(xs**2)

    def grads(layers):
        return _analysis(jax.grad(loss, argnums=(0, 1)), jnp.ones((layers, 4, 64, 64)), jnp.ones((layers, 4, 64, 64)), jnp.ones((10, 8, 64)))

    one = grads(1)
    assert max(Counter((d.m, d.n, d.k, d.dims) for d in one.dots).values()) >= 8  # same-shape dots a count would read as 8+ layers
    assert layer_repeats(one) == 1 and unrolled_loop(base(hlo=one, max_dot_repeats=layer_repeats(one))).outcome == "passed"
    stacked = grads(T.UNROLLED_MIN_REPEATS)
    assert layer_repeats(stacked) == T.UNROLLED_MIN_REPEATS
    assert unrolled_loop(base(hlo=stacked, max_dot_repeats=layer_repeats(stacked))).outcome == "fired"


def _dtype_signals(fn, *args):
    module = _module(fn, *args)
    a = analyze_hlo(module)
    return base(hlo=a, dot_source_dtype_share=dot_flops_share_by_source_dtype(module, a))


def test_fp32_matmul_threshold_and_bf16_seen_through_cpu_converts() -> None:
    def mixed(f32_rows):  # one f32 dot and one bf16 dot of 64 rows: f32 share = f32_rows / (f32_rows + 64)
        return _dtype_signals(lambda a, b, c, d: (a @ b, c @ d), jnp.ones((f32_rows, 64)), jnp.ones((64, 64)), jnp.ones((64, 64), jnp.bfloat16), jnp.ones((64, 64), jnp.bfloat16))

    above, below = mixed(72), mixed(56)
    assert above.dot_source_dtype_share["f32"] == pytest.approx(72 / 136) and fp32_matmul(above).outcome == "fired"
    assert below.dot_source_dtype_share["f32"] == pytest.approx(56 / 120) and fp32_matmul(below).outcome == "passed"
    assert below.hlo.dot_flops_share_by_dtype == {"f32": 1.0}  # the CPU backend widened the bf16 dot
    no_target = fp32_matmul(replace(above, target=None))
    assert no_target.outcome == "not_evaluable" and "--target" in no_target.reason


def test_mxu_padding_counts_only_removable_padding_on_the_roofline() -> None:
    # one compute-bound dot (intensity ~1000 FLOPs/byte > v6e's ridge) whose m is just above a tile multiple
    def dot(m, n=4096):
        return _analysis(lambda x, w: x @ w, jnp.ones((m, 4096), jnp.bfloat16), jnp.ones((4096, n), jnp.bfloat16), tile=256)

    a = dot(2048 + 32)  # padded to 2304, trimmed to 2048: 1 - 2048/2304 = 11.1 % of the matmul time
    fired = mxu_padding(base(hlo_target=a))
    assert fired.outcome == "fired" and fired.expected_gain.kind == "estimate"
    assert fired.gain_factor == pytest.approx(1 / (1 - 0.6 * (1 - 2048 / 2304)), rel=1e-6)  # Amdahl: matmuls are 60 % of the step
    no_trace = mxu_padding(base(hlo_target=a, breakdown={}))
    assert no_trace.expected_gain.kind == "upper_bound" and no_trace.gain_factor == pytest.approx(2304 / 2048, rel=1e-6)
    assert mxu_padding(base(hlo_target=dot(4096 + 64))).outcome == "passed"  # 1 - 4096/4352 = 5.9 %: below the bar
    below_tile = dot(224)  # 12.5 % of the work is padding, but 224 < 256 cannot lose it: a larger m fills it at the same time
    assert below_tile.padding_waste == pytest.approx(1 - 224 / 256)
    assert mxu_padding(base(hlo_target=below_tile)).outcome == "passed"
    fixed = mxu_padding(base(hlo_target=a, fixed_dims={a.dots[0].name: frozenset({"m"})}))  # m is the data's: not the user's
    assert fixed.outcome == "passed"
    small = _analysis(lambda x, w: x @ w, jnp.ones((2080, 512), jnp.bfloat16), jnp.ones((512, 512), jnp.bfloat16), tile=256)
    assert mxu_padding(base(hlo_target=small)).outcome == "passed"  # memory-bound on v6e: padding costs no time
    assert mxu_padding(base(hlo_target=None)).outcome == "not_evaluable"
    assert mxu_padding(base(hlo_target=a, target=None)).outcome == "not_evaluable"


def test_small_batch_threshold() -> None:
    ridge = V6E.peak_tflops["bf16"] * 1e12 / (V6E.hbm_gbps * 1e9)
    assert base().ridge_flops_per_byte == pytest.approx(ridge)
    edge = T.SMALL_BATCH_RIDGE_FRACTION * ridge
    assert small_batch(base(dot_intensity_bf16=edge * (1 - EPS))).outcome == "fired"
    assert small_batch(base(dot_intensity_bf16=edge * (1 + EPS))).outcome == "passed"
    full = base(dot_intensity_bf16=edge / 2, peak_bytes=int((32 << 30) * (1 - T.SMALL_BATCH_MIN_HEADROOM + 0.01)))
    assert small_batch(full).outcome == "passed"  # no room to grow the batch
    assert small_batch(base(dot_intensity_bf16=None)).outcome == "not_evaluable"


def test_no_donation_threshold() -> None:
    out = 8 << 20
    assert no_donation(base(alias_bytes=int(out * T.DONATION_MIN_FRACTION) - 1)).outcome == "fired"
    assert no_donation(base(alias_bytes=int(out * T.DONATION_MIN_FRACTION))).outcome == "passed"
    assert no_donation(base(alias_bytes=0, output_bytes=T.DONATION_MIN_BYTES - 1, argument_bytes=T.DONATION_MIN_BYTES - 1)).outcome == "passed"
    assert no_donation(base(output_bytes=None)).outcome == "not_evaluable"
    jitted = no_donation(base(alias_bytes=0))
    assert "jax.jit(train_step, donate_argnums" in jitted.fix.jax
    for api, call in (("pmap", "jax.pmap(train_step"), ("equinox", "eqx.filter_jit(train_step, donate="), ("flax", "nnx.jit(train_step, donate_argnums")):
        own = no_donation(base(alias_bytes=0, step_api=api))  # the API the step is compiled with, not a jax.jit it does not use
        assert call in own.fix.jax and "jax.jit" not in own.fix.jax and own.fix.summary == jitted.fix.summary


def test_hbm_rules_thresholds() -> None:
    cap = 32 << 30
    assert hbm_headroom(base(peak_bytes=int(cap * (1 - T.HBM_HEADROOM_FRACTION)) - 1)).outcome == "fired"
    assert hbm_headroom(base(peak_bytes=int(cap * (1 - T.HBM_HEADROOM_FRACTION)) + 1)).outcome == "passed"
    assert hbm_pressure(base(peak_bytes=int(cap * T.HBM_PRESSURE_FRACTION) + 1)).outcome == "fired"
    assert hbm_pressure(base(peak_bytes=int(cap * T.HBM_PRESSURE_FRACTION) - 1)).outcome == "passed"
    for rule in (hbm_headroom, hbm_pressure):
        assert rule(base(peak_bytes=None)).outcome == "not_evaluable"
        assert "--target" in rule(base(target=None)).reason


def test_no_compile_cache_threshold() -> None:
    assert no_compile_cache(base(compile_total_s=T.STARTUP_COMPILE_S + EPS)).outcome == "fired"
    assert no_compile_cache(base(compile_total_s=T.STARTUP_COMPILE_S - EPS)).outcome == "passed"
    assert no_compile_cache(base(compile_total_s=60.0, compile_cache_events=3)).outcome == "passed"
    assert no_compile_cache(base(compiles=0)).outcome == "not_evaluable"
    assert no_compile_cache(base(compiles=None, compile_total_s=None)).outcome == "not_evaluable"
    fired = no_compile_cache(base(compile_total_s=30.0))
    assert (fired.benefit, fired.expected_gain.amount, fired.expected_gain.unit) == ("compile_time", 30.0, "compile_s")


def test_exposed_collectives_threshold() -> None:
    def with_coll(c):
        return base(platform="tpu", breakdown={**base().breakdown, "collective": c})

    assert exposed_collectives(with_coll(T.EXPOSED_COLLECTIVE_SHARE + EPS)).outcome == "fired"
    assert exposed_collectives(with_coll(T.EXPOSED_COLLECTIVE_SHARE - EPS)).outcome == "passed"
    assert exposed_collectives(base(platform="tpu", breakdown={}, hlo=None)).outcome == "not_evaluable"
    on_cpu = exposed_collectives(replace(with_coll(0.5), platform="cpu"))  # threads on shared cores: the rendezvous, not the wire
    assert on_cpu.outcome == "not_evaluable" and "CPU backend" in on_cpu.reason


def test_device_idle_fires_only_when_unexplained() -> None:
    idle = base(platform="tpu", breakdown={**base().breakdown, "device_idle": T.DEVICE_IDLE_SHARE + EPS})
    on_cpu = device_idle(replace(idle, platform="cpu"), [])  # the CPU executor's gaps between its ops, not a TPU's idle time
    assert on_cpu.outcome == "not_evaluable" and "CPU backend" in on_cpu.reason
    assert device_idle(idle, []).outcome == "fired"
    assert device_idle(replace(idle, breakdown={**base().breakdown, "device_idle": T.DEVICE_IDLE_SHARE - EPS}), []).outcome == "passed"
    explained = device_idle(idle, [host_sync(base(fetched_step_calls=40))])
    assert explained.outcome == "passed" and "host-sync" in explained.reason
    assert device_idle(base(breakdown={}, duty_cycle_pct=None), []).outcome == "not_evaluable"
    partial = replace(idle, breakdown={**base().breakdown, "device_idle": 0.85}, programs_in_trace=1, traced_steps=3)  # one program caught in 3 steps
    assert device_idle(partial, []).outcome == "not_evaluable" and "partial capture" in device_idle(partial, []).reason
    assert device_idle(base(breakdown={}, duty_cycle_pct=T.DUTY_CYCLE_PCT - 1), []).outcome == "fired"


def test_ranking_puts_the_biggest_gain_first() -> None:
    s = base(late_compiles=30, recompile_excess_s=2.0, fetched_step_calls=40, breakdown={**base().breakdown, "host": 0.25})
    advice = advise_signals(s)
    ids = [f.id for f in advice.fired]
    assert ids[0] == "recompilation"  # 3.9 / 1.9 = 2.05x beats 1 / 0.75 = 1.33x
    assert set(ids) >= {"recompilation", "host-sync", "input-bound"}
    assert advice.next_fix.id == "recompilation" and not advice.nothing_left


def test_compile_time_and_memory_findings_go_to_the_also_list() -> None:
    s = base(alias_bytes=0, peak_bytes=4 << 30, hlo_instructions=100)
    advice = advise_signals(s)
    assert [f.id for f in advice.also] == ["no-donation", "hbm-headroom"] and advice.step_time == []
    donation = advice.also[0].expected_gain
    assert (donation.benefit, donation.unit, donation.amount) == ("memory", "bytes", float(8 << 20))
    assert advice.nothing_left and advice.next_fix is None
    assert advice.conclusion().startswith("nothing left would make the step faster on tpu-v6e")
    assert [f.id for f in advice.fired][-2:] == ["no-donation", "hbm-headroom"]  # after every step-time finding


def test_every_expected_gain_says_estimate_or_upper_bound() -> None:
    s = base(platform="tpu", late_compiles=30, recompile_excess_s=2.0, fetched_step_calls=40, alias_bytes=0, peak_bytes=4 << 30,
             breakdown={**base().breakdown, "host": 0.25, "collective": 0.2, "device_idle": 0.4})
    fired = advise_signals(s).fired
    assert len(fired) >= 6
    for f in fired:
        g = f.expected_gain
        assert g is not None and g.basis and g.kind in ("estimate", "upper_bound", "none")
        assert (g.factor is None) == (g.kind == "none") or g.benefit != "step_time"


def test_torch_host_syncs_are_counted_per_step() -> None:
    torch_base = base(framework="torch", step_calls=None, fetched_step_calls=None, torch_syncs=21, torch_sync_steps=40)
    assert host_sync(torch_base).outcome == "fired"  # 21 / 40 > 0.5
    assert host_sync(replace(torch_base, torch_syncs=20)).outcome == "passed"
    assert host_sync(replace(torch_base, torch_syncs=None, torch_sync_steps=None)).outcome == "not_evaluable"


def test_pmap_step_is_not_op_by_op() -> None:
    pmapped = base(step_program=False, programs_in_trace=None, jitted_functions=0, distinct_compiled=T.OP_BY_OP_UNJITTED_PROGRAMS + 5)
    assert op_by_op(pmapped).outcome == "fired"  # without pmap compiles: an eager script
    seen = op_by_op(replace(pmapped, pmap_compiles=2))
    assert seen.outcome == "passed" and "pmap" in seen.reason


def test_a_straggler_finding_names_the_op_that_makes_it_slow_when_there_is_one() -> None:
    worst = {"process_index": 3, "hostname": "h3", "metric": "own_s", "value_s": 0.05, "others_median_s": 0.01, "factor": 5.0, "extra_s": 0.04, "text": "process 3 ..."}
    hosts = [{"median_s": 0.1, "own_median_s": 0.01}] * 4
    plain = straggler(base(processes=4, hosts=hosts, stragglers=[{**worst, "op": None}]))
    assert plain.outcome == "fired" and "straggler_op" not in {e.name for e in plain.evidence}
    named = straggler(base(processes=4, hosts=hosts, stragglers=[{**worst, "op": {"op": "fusion.7", "value_s": 0.04, "others_median_s": 0.005, "extra_s": 0.035}}]))
    evidence = {e.name: e.value for e in named.evidence}
    assert (evidence["straggler_op"], evidence["straggler_op_extra_s"]) == ("fusion.7", 0.035)
