"""Host-side rules: a device-to-host fetch every step, and an input pipeline the device waits for."""

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
from tpu_perf.advise.signals import Signals, src
from tpu_perf.analyzers.all_in import MIN_STEADY_STEPS

HOST_SYNC = Rule(
    id="host-sync", title="The loop fetches a device value to the host every step", family="input", severity="medium",
    fix=Fix(
        summary="Keep values on the device and fetch them every N steps (or accumulate on device), so the host can dispatch ahead.",
        jax="if step % 100 == 0:\n    print(float(loss))  # not float(loss) / np.asarray / print(loss) every step",
        pytorch="if step % 100 == 0:\n    print(loss.item())  # .item() / print(tensor) every step waits for the device",
    ),
    docs=("https://docs.jax.dev/en/latest/async_dispatch.html", "https://docs.pytorch.org/xla/master/learn/troubleshoot.html"),
)

LIGHTNING = ("lightning", "pytorch_lightning")
"""Packages whose transfers are Lightning's: a metric logged with `self.log(..., prog_bar=True)` is
turned into a number (`.item()`, logger_connector/result.py) at every step, progress bar shown or
not; other logged metrics are converted every `log_every_n_steps`."""
LIGHTNING_FIX = Fix(
    summary="Most transfers are Lightning's own: a metric logged with prog_bar=True is turned into a number (.item()) every step. "
            "Log per-step metrics without prog_bar (converted every log_every_n_steps), or per epoch, so the host can dispatch ahead.",
    pytorch='self.log("train_loss", loss)  # no prog_bar=True: not converted at every step\n'
            '# or: self.log("train_loss", loss, on_step=False, on_epoch=True)',
)

INPUT_BOUND = Rule(
    id="input-bound", title="The device waits for the host's work between steps (input pipeline, per-step loop code)", family="input", severity="high",
    fix=Fix(
        summary="Take the loop's own per-step host work off the device's path: prepare batches ahead (prefetch on a background thread, a data loader with workers, preprocessing inside the jitted step); "
                "where that work is a framework's per-step code rather than input (Keras fit(): callbacks and state handling around each call), run several steps per call.",
        jax="it = flax.jax_utils.prefetch_to_device(batches, size=2)  # or grain / tf.data .prefetch(); jax.device_put the next batch early\n"
            "model.compile(..., steps_per_execution=8)  # Keras: 8 steps per call, the per-step loop code once",
        pytorch="loader = DataLoader(ds, batch_size=B, num_workers=4, pin_memory=True, prefetch_factor=2)",
    ),
    docs=("https://docs.jax.dev/en/latest/data_loaders.html", "https://docs.pytorch.org/docs/stable/data.html#multi-process-data-loading", "https://openxla.org/xprof/input_pipeline_analyzer",
          "https://keras.io/api/models/model_training_apis/#compile-method"),
)


def _torch_on_cpu(s: Signals) -> bool:
    return s.framework == "torch" and s.platform == "cpu"


def _share_path(s: Signals) -> str:
    return "breakdown.input + breakdown_detail.long_host_share" if _torch_on_cpu(s) else "breakdown.host + breakdown.input"


def long_host_share(s: Signals) -> float:
    """Share of the traced step in stretches of 1 ms or more with no op running and no input event
    (breakdown.LONG_HOST_S), the median traced step's; 0 where unknown."""
    return s.long_host_share or 0.0


def host_share(s: Signals) -> float | None:
    """Share of the step with no device program running (host, input), from the trace breakdown.

    PyTorch on a CPU runs its ops on the Python thread: the microsecond gaps between them are the
    framework's own overhead, so there the share is the time in named input events (data loaders)
    and in stretches of a millisecond or more with no op at all (a batch made in numpy or read by a
    plain generator: the loop's own work, which names no event)."""
    if not s.breakdown:
        return None
    if _torch_on_cpu(s):
        return min(1.0, s.breakdown.get("input", 0.0) + long_host_share(s))
    return s.breakdown.get("host", 0.0) + s.breakdown.get("input", 0.0)


def overlap_gain(s: Signals) -> tuple[Gain | None, list[Evidence]]:
    """Step / max(device, host) when host work could overlap the device: from steps, else the trace."""
    if s.iteration_median_s and s.device_median_s is not None and s.host_median_s:
        host, dev = s.host_median_s, s.device_median_s
        basis = f"host work {host * 1e3:.3g} ms per step would overlap {dev * 1e3:.3g} ms of device work"
        return Gain(factor=s.iteration_median_s / max(dev, host), basis=basis + " (perfect overlap)", kind="upper_bound"), [src("iteration_median_s", s.iteration_median_s), src("device_median_s", dev), src("host_median_s", host)]
    share = host_share(s)
    if share:
        basis = f"{share:.0%} of the traced step had no device work; overlapped, the step is the longer of the two"
        return Gain(factor=1 / max(share, 1 - share), basis=basis, kind="upper_bound"), [ev("trace_host_fraction", share, "trace", _share_path(s))]
    return None, []


def _no_fetch_counts(s: Signals) -> str:
    """Why a run has no fetch counts, in the terms of this run (not "record it with this tpu-perf"
    when it was): no JAX collector at all, or a step function it never saw called."""
    if s.framework == "torch":
        return "no transfer counts: the PyTorch collector counts .item()/.cpu()/.tolist()/printing a tensor per step, and it did not count them in this run (recorded by an older tpu-perf, or no steps)"
    if s.step_calls is None and s.fetched_step_calls is None and s.framework != "jax":
        return "no fetch counts: the JAX collector counts fetches of step outputs, and it did not record this run (an import, or a run without JAX)"
    if s.step_calls is None:
        return "no fetch counts in this run: it was recorded by a tpu-perf whose JAX collector did not count fetches yet (record it again to check)"
    return "no fetch counts: no call of a jitted step function was seen (steps marked with `tpu_perf.step()` around other code are not counted)"


def host_sync(s: Signals) -> Finding:
    if s.inference is not None:
        return not_evaluable(HOST_SYNC, "a generation run: decode-host-sync judges its fetches per token")
    rate = s.fetches_per_step
    if rate is None:
        return not_evaluable(HOST_SYNC, _no_fetch_counts(s))
    if s.framework == "torch":
        evidence = [src("torch_syncs", s.torch_syncs), ev("steps_count", s.torch_sync_steps, "steps", "steps.count"), src("fetches_per_step", rate)]
        where = f"{s.torch_sync_steps} steps"
        if s.torch_steps_with_sync is not None:
            evidence.append(src("torch_steps_with_sync", s.torch_steps_with_sync[0]))
            where = f"{s.torch_steps_with_sync[0]} of {s.torch_steps_with_sync[1]} steps"
        what = f"{s.torch_syncs} device-to-host transfers (.item(), .cpu(), .tolist(), .numpy(), float()/int()/bool() of a tensor, printing one) in {where}"
        lightning = sum(n for package, n in s.torch_sync_callers.items() if package in LIGHTNING)
        if lightning and s.torch_syncs and 2 * lightning >= s.torch_syncs:
            evidence.append(src("torch_sync_callers", lightning))
            what += f", {lightning} of them in Lightning's own code (a metric logged with prog_bar=True, turned into a number every step)"
    else:
        evidence = [src("fetched_step_calls", s.fetched_step_calls), src("step_calls", s.step_calls), src("fetches_per_step", rate)]
        what = f"{s.fetched_step_calls} of {s.step_calls} steps fetched an output to the host right after dispatch"
    if rate <= T.FETCHES_PER_STEP:
        return passed(HOST_SYNC, f"{what}: {rate:.0%} of steps (the bar: {T.FETCHES_PER_STEP:.0%})", evidence)
    gain, more = overlap_gain(s)
    if s.platform == "cpu" and (s.target is None or s.target.kind != "tpu"):
        gain, more = Gain(factor=None, basis="on the CPU backend the device's work runs on the host's own cores: without the fetch the host dispatches ahead, but its work then competes with the "
                          "computation for those cores instead of overlapping it (examples/tuning/jax_lm.py on 2 cores: 0.69-0.76x as fast without it); judge it for a TPU with --target", kind="none"), []
    if gain is None:
        gain = Gain(factor=None, basis="the host waits for the device at each fetch; the cost is the host work that could overlap the device, not measured on this run (no device/host split)", kind="none")
    lightning_made = any(e.name == "torch_sync_callers" for e in evidence)
    return fired(HOST_SYNC, what, evidence + more, gain, fix=LIGHTNING_FIX if lightning_made else None)


def loop_share(s: Signals) -> float | None:
    """Share of the iteration the loop spent on its own host work, outside jitted calls and device
    waits (the JAX collector times each call): what an input pipeline fix can take off the step."""
    wall, own = step_wall_s(s), own_loop_s(s)
    if own is None or not wall:
        return None
    return min(1.0, own / wall)


def own_loop_s(s: Signals) -> float | None:
    """The loop's own host work per step: the median over the steady steps; over fewer than
    MIN_STEADY_STEPS the least of them (a stray iteration, a sync or the trace's stop, moves a
    median of 3; none shortens the least)."""
    return s.loop_median_s if s.loop_steps >= MIN_STEADY_STEPS else s.loop_low_s


def step_wall_s(s: Signals) -> float | None:
    """The steady iteration the loop's work is a share of: the step time (where the loop runs ahead
    of the device, most iterations return at dispatch: its pace or its mean iteration)."""
    return s.step_s if s.step_s is not None else s.iteration_median_s


def _dispatch_bound(s: Signals, idle: float, inputs: float) -> str:
    call = f" ({s.call_median_s * 1e3:.3g} ms per step inside jitted calls)" if s.call_median_s is not None else ""
    return (f"not the input pipeline: the device idled {idle:.0%} of the step, {idle - inputs:.0%} of it while the host was inside "
            f"the step call{call}: dispatch and framework overhead of a step too small for the device, which more work per call amortizes "
            f"(a bigger batch, or several steps per call with jax.lax.scan); the loop's own work outside the call held the device up {inputs:.0%}")


def input_bound(s: Signals) -> Finding:
    idle = host_share(s)
    if idle is None:
        if s.host_median_s is not None and s.iteration_median_s:
            idle = s.host_median_s / s.iteration_median_s
            evidence = [src("host_median_s", s.host_median_s), src("iteration_median_s", s.iteration_median_s)]
        else:
            return not_evaluable(INPUT_BOUND, f"no trace window and no host time per step: {s.trace_fix}")
    else:
        evidence = [ev("trace_host_fraction", idle, "trace", _share_path(s)),
                    ev("trace_input_fraction", s.breakdown.get("input", 0.0), "trace", "breakdown.input")]
        if _torch_on_cpu(s):
            evidence.append(ev("trace_long_host_fraction", long_host_share(s), "trace", "breakdown_detail.long_host_share (host stretches of 1 ms or more)"))
            if s.core_wait_share is not None:
                evidence.append(ev("trace_core_wait_fraction", s.core_wait_share, "trace", "breakdown_detail.core_wait_share"))
    pps = s.programs_per_step
    if pps is not None and pps >= T.OP_BY_OP_PROGRAMS_PER_STEP:
        return passed(INPUT_BOUND, f"the host time between device ops is op-by-op dispatch ({pps:.0f} programs per step): see op-by-op", evidence + [src("programs_per_step", pps)])
    loop = loop_share(s)
    # the device idles while the loop works outside the step call (input) or while the host is inside it
    # (dispatch): only the first is the input pipeline's, and only it can an input fix take off the step
    inputs = idle if loop is None else min(idle, loop)
    if loop is not None:
        evidence += [src("loop_median_s", s.loop_median_s), src("call_median_s", s.call_median_s), src("iteration_median_s", s.iteration_median_s), src("loop_steps", s.loop_steps)]
        if s.loop_steps < MIN_STEADY_STEPS:
            evidence.append(src("loop_low_s", s.loop_low_s))
        if step_wall_s(s) != s.iteration_median_s:
            evidence.append(src("step_s", s.step_s))
    # PyTorch on a CPU runs its ops on the loop's thread: while another process has its core, the
    # trace shows a gap that is nobody's work (collectors.core_wait). The wait is taken off those
    # unnamed gaps only: the data loader's named events are the input pipeline's own, and a thread
    # waits for a core only while it has work, so the share they hold goes with the work (a Dataset
    # doing per-example Python: 53 % named at 82 % core wait, and precomputing the examples took
    # 2.4-2.7x off the step; taking the whole wait off called it not judgeable)
    wait = min((s.core_wait_share or 0.0), max(0.0, inputs - s.breakdown.get("input", 0.0))) if _torch_on_cpu(s) and idle is not None and s.breakdown else 0.0
    if inputs >= T.INPUT_BOUND_SHARE > inputs - wait:
        return not_evaluable(INPUT_BOUND, f"the host held the device up for {inputs:.0%} of the traced steps, but the loop's thread waited for a CPU core "
                                          f"{s.core_wait_share or 0.0:.0%} of them (other processes or threads on this machine had it): PyTorch runs its ops on that thread, "
                                          f"so its gaps and data-loader events hold the wait, and the loop's own host work cannot be told apart; record on a quiet machine", evidence)
    if inputs < T.INPUT_BOUND_SHARE:
        if idle - inputs >= T.INPUT_BOUND_SHARE:
            return passed(INPUT_BOUND, _dispatch_bound(s, idle, inputs), evidence)
        level = "moderately input-bound (XProf: 5-20 %)" if inputs >= T.INPUT_BOUND_MODERATE_SHARE else "not input-bound"
        return passed(INPUT_BOUND, f"{level}: the host held the device up for {inputs:.0%} of the step", evidence)
    fetch = s.fetches_per_step
    if fetch is not None and fetch > T.FETCHES_PER_STEP:
        evidence.append(src("fetches_per_step", fetch))
    few = f", the least of its {s.loop_steps} steady steps" if s.loop_steps < MIN_STEADY_STEPS else ""
    serving = s.inference is not None  # a decode loop's host work is per token, not an input pipeline's
    work = "sampling, detokenizing, the serving loop's own code" if serving else "input, augmentation, logging, a framework's per-step code"
    own = f" ({own_loop_s(s) * 1e3:.3g} ms per step of the loop's own work outside the step call{few}: {work})" if loop is not None else ""
    if _torch_on_cpu(s):
        named, long = s.breakdown.get("input", 0.0), long_host_share(s)
        parts = ([f"{named:.0%} in the data loader's named events"] if named >= 0.005 else []) + (
            [f"{long:.0%} in stretches of 1 ms or more with no op running: the loop's own work, such as a batch it makes or reads itself (numpy, a plain generator, storage) or per-step logging"] if long >= 0.005 else [])
        own = f" ({', '.join(parts)})" if parts else ""
    fixable = inputs - wait  # what an input fix can take off: the wait for a core stays
    if wait >= 0.005:
        own += f"; {fixable:.0%} once the gaps in which its thread waited for a CPU core ({wait:.0%} of the step) are left out"
    gain = Gain(factor=1 / (1 - fixable), basis=f"the device waited {fixable:.0%} of the step for the host{own}; {'done while the device runs the next decode step (dispatched ahead of it)' if serving else 'prepared ahead, or paid once per several steps'}, all of the wait goes", kind="upper_bound") if fixable < 1 else None
    return fired(INPUT_BOUND, f"the device waited for the loop's own host work {inputs:.0%} of the step{own}", evidence, gain)
