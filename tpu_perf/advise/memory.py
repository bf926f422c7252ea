"""Memory rules: un-donated train state, unused HBM, and a peak near capacity."""

from __future__ import annotations

from dataclasses import replace

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.compute import target_missing
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
from tpu_perf.advise.signals import Signals, src

NO_DONATION = Rule(
    id="no-donation", title="The step returns new state without donating the old", family="memory", severity="medium",
    fix=Fix(
        summary="Donate the train state to the step so XLA writes the new state into the old buffers (one copy in memory, not two).",
        jax="train_step = jax.jit(train_step, donate_argnums=0)  # or donate_argnames=('state',); decorated: @functools.partial(jax.jit, donate_argnums=0)",
        pytorch="# PyTorch optimizers update parameters in place; nothing to donate",
    ),
    docs=("https://docs.jax.dev/en/latest/faq.html#buffer-donation", "https://docs.jax.dev/en/latest/_autosummary/jax.jit.html"),
)

HBM_HEADROOM = Rule(
    id="hbm-headroom", title="Much of HBM is unused: the batch could grow", family="memory", severity="low",
    fix=Fix(
        summary="Use the memory: a larger per-device batch, or fewer remat / offload settings.",
        jax="batch_size = int(batch_size * multiplier)  # `tpu-perf report` memory.max_batch_size estimates it",
        pytorch="batch_size = int(batch_size * multiplier)",
    ),
    docs=("https://docs.jax.dev/en/latest/gpu_memory_allocation.html", "https://cloud.google.com/tpu/docs/performance-guide"),
)

HBM_PRESSURE = Rule(
    id="hbm-pressure", title="Peak device memory is near capacity", family="memory", severity="high",
    fix=Fix(
        summary="Lower the peak before it becomes an OOM or forced rematerialization: donate state, rematerialize activations, shard, or shrink the batch.",
        jax="block = jax.checkpoint(block)  # jax.remat; plus jax.jit(..., donate_argnums=0)",
        pytorch="from torch.utils.checkpoint import checkpoint\nh = checkpoint(block, h, use_reentrant=False)",
    ),
    docs=("https://docs.jax.dev/en/latest/gradient-checkpointing.html", "https://docs.pytorch.org/docs/stable/checkpoint.html"),
)


DONATION_BY_API = {
    "pmap": "train_step = jax.pmap(train_step, axis_name=AXIS, donate_argnums=(0,))  # your axis name; the replicated state",
    "equinox": 'train_step = eqx.filter_jit(train_step, donate="all")  # or @eqx.filter_jit(donate="all")',
    "flax": "train_step = nnx.jit(train_step, donate_argnums=(0, 1))  # the model and the optimizer",
}
"""Donation in the API that compiles the step (Signals.step_api), where it is not `jax.jit`'s."""


def _donation_fix(rule: Rule, s: Signals, prefix: str = "") -> Fix | None:
    """The rule's fix with donation in the step's own API, or None (the rule's, `jax.jit`)."""
    snippet = DONATION_BY_API.get(s.step_api or "")
    return replace(rule.fix, jax=prefix + snippet) if snippet else None


def no_donation(s: Signals) -> Finding:
    if s.framework == "torch":
        return passed(NO_DONATION, "PyTorch optimizers update parameters in place")
    if s.output_bytes is None or s.argument_bytes is None:
        return not_evaluable(NO_DONATION, "no XLA memory analysis of a step program (JAX runs with a jitted step save it)")
    if s.alias_bytes is None:  # unknown, not none donated
        return not_evaluable(NO_DONATION, "XLA's memory analysis of the step gave no alias bytes: whether inputs were donated is unknown")
    alias = s.alias_bytes
    evidence = [src("argument_bytes", s.argument_bytes), src("output_bytes", s.output_bytes), src("alias_bytes", alias)]
    returns_state = s.output_bytes >= T.DONATION_MIN_FRACTION * s.argument_bytes and s.output_bytes >= T.DONATION_MIN_BYTES
    if not returns_state:
        return passed(NO_DONATION, f"the step returns {s.output_bytes} bytes: no train state to donate", evidence)
    if alias >= T.DONATION_MIN_FRACTION * s.output_bytes:
        return passed(NO_DONATION, f"{alias / s.output_bytes:.0%} of the outputs reuse donated inputs", evidence)
    return fired(NO_DONATION, f"the step returns {s.output_bytes / 2**20:.1f} MiB and only {alias / 2**20:.1f} MiB reuse donated inputs", evidence,
                 Gain(factor=None, basis=f"frees about {(s.output_bytes - alias) / 2**20:.1f} MiB of device memory at the peak (the outputs not aliased); step time stays about the same", kind="estimate", benefit="memory", amount=float(s.output_bytes - alias), unit="bytes"),
                 fix=_donation_fix(NO_DONATION, s))


def _headroom(s: Signals, rule: object) -> tuple[float, list[Evidence]] | Finding:
    if (why := target_missing(s)) is not None:
        return not_evaluable(rule, why)
    if s.peak_bytes is None or not s.capacity_bytes:
        return not_evaluable(rule, "device memory peak or capacity unknown (no runtime samples or XLA memory analysis)")
    evidence = [ev("peak_bytes", s.peak_bytes, "memory", f"memory.peak_bytes ({s.peak_source})"), ev("capacity_bytes", s.capacity_bytes, "chip" if (s.capacity_from or "").startswith("catalogue") else "memory", s.capacity_from or "memory.capacity_bytes")]
    return 1 - s.peak_bytes / s.capacity_bytes, evidence


def hbm_headroom(s: Signals) -> Finding:
    got = _headroom(s, HBM_HEADROOM)
    if isinstance(got, Finding):
        return got
    headroom, evidence = got
    if headroom < T.HBM_HEADROOM_FRACTION:
        return passed(HBM_HEADROOM, f"{headroom:.0%} of HBM free at the peak", evidence)
    fixed = s.fixed_bytes if s.fixed_bytes is not None and s.fixed_bytes < s.peak_bytes else None
    if fixed is not None:
        multiplier = (s.capacity_bytes * 0.95 - fixed) / (s.peak_bytes - fixed)
        evidence.append(src("fixed_bytes", fixed))
        more = f"; by memory.py's linear model the batch could grow about {multiplier:.1f}x"
    else:
        more = ""
    return fired(HBM_HEADROOM, f"{headroom:.0%} of HBM ({s.capacity_bytes / 2**30:.1f} GiB) unused at the peak{more}", evidence,
                 Gain(factor=None, basis="unused HBM at the peak; a bigger batch raises throughput per sample, not the step time", kind="estimate", benefit="memory", amount=float(s.capacity_bytes - s.peak_bytes), unit="bytes"))


def _what_fills(s: Signals) -> str:
    """The top two findings of `memory.at_peak` (PyTorch: its tensors' bytes), as a sentence to add to a message."""
    findings = (s.at_peak or {}).get("findings") or []
    if findings:
        return f". At the peak of {s.at_peak['program']}: " + "; ".join(findings)
    t = s.torch_state
    if t:
        gib = {k: t[k] / 2**30 for k in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes")}
        if t.get("kv_cache_bytes") is not None:  # a generation run: weights and the KV cache
            return f". Parameters {gib['parameters_bytes']:.2f} GiB, KV cache {t['kv_cache_bytes'] / 2**30:.2f} GiB (the largest a request held)"
        return f". Parameters {gib['parameters_bytes']:.2f} GiB, gradients {gib['gradients_bytes']:.2f} GiB, optimizer state {gib['optimizer_state_bytes']:.2f} GiB ({', '.join(t['optimizers'])})"
    return ""


def hbm_pressure(s: Signals) -> Finding:
    if s.out_of_memory:  # the strongest evidence there is: it did not fit
        oom = s.out_of_memory
        evidence = [ev("out_of_memory", oom["failed_allocation_bytes"], "memory", "memory.out_of_memory.failed_allocation_bytes")]
        return fired(HBM_PRESSURE, f"the script ran out of device memory in {oom['function'] or 'a program'} ({oom['message'][:160]}){_what_fills(s)}", evidence,
                     Gain(factor=None, basis="the run does not fit: nothing else matters until it does", kind="none", benefit="risk"))
    got = _headroom(s, HBM_PRESSURE)
    if isinstance(got, Finding):
        return got
    headroom, evidence = got
    used = 1 - headroom
    if used < T.HBM_PRESSURE_FRACTION:
        return passed(HBM_PRESSURE, f"peak at {used:.0%} of capacity", evidence)
    return fired(HBM_PRESSURE, f"peak at {used:.0%} of capacity: near OOM, and XLA may rematerialize to fit{_what_fills(s)}", evidence,
                 Gain(factor=None, basis="risk, not speed: an OOM stops the run", kind="none", benefit="risk", amount=float(s.capacity_bytes - s.peak_bytes), unit="bytes"),
                 fix=_donation_fix(HBM_PRESSURE, s, "block = jax.checkpoint(block)  # jax.remat; and donate the state:\n"))
