"""Device idle time that no other finding explains. Runs after the other rules and reads their outcomes."""

from __future__ import annotations

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.finding import Finding, Fix, Gain, Rule, ev, fired, not_evaluable, passed
from tpu_perf.advise.signals import Signals

DEVICE_IDLE = Rule(
    id="device-idle", title="The device is idle for much of the step, for no reason found", family="utilisation", severity="medium",
    fix=Fix(
        summary="Open the trace window in XProf's trace viewer (or Perfetto) and look at the gaps between device ops: host callbacks, small transfers, Python between dispatches.",
        jax="jax.profiler.trace('/tmp/trace')  # tpu-perf's run folder has one: xprof --logdir RUN/trace",
        pytorch="torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])",
    ),
    docs=("https://openxla.org/xprof/trace_viewer", "https://docs.jax.dev/en/latest/profiling.html"),
)

EXPLAINS_IDLE = ("host-sync", "input-bound", "op-by-op", "recompilation", "exposed-collectives", "graph-break")
"""Findings that, fired, account for device idle time: device-idle then stays quiet."""


def device_idle(s: Signals, others: list[Finding]) -> Finding:
    idle = s.breakdown.get("device_idle") if s.breakdown else None
    if idle is None and s.duty_cycle_pct is None:
        return not_evaluable(DEVICE_IDLE, f"no trace window and no duty-cycle samples: {s.trace_fix} (duty cycle needs libtpu's metric service)")
    if s.duty_cycle_pct is None and s.platform == "cpu":
        return not_evaluable(DEVICE_IDLE, "on the CPU backend a gap inside a program is its executor between ops and this machine's scheduling of its threads (a host "
                             "callback is an op there), not time a TPU or GPU would idle: judge it on a TPU or GPU run")
    pps = s.programs_per_step
    if idle is not None and s.duty_cycle_pct is None and pps is not None and pps < 1:
        return not_evaluable(DEVICE_IDLE, f"the trace window caught {s.programs_in_trace} device program(s) in {s.traced_steps} traced steps: a partial capture (tiny asynchronous steps), whose gaps inside a program are not the step's idle time")
    evidence = []
    if idle is not None:
        evidence.append(ev("trace_device_idle_fraction", idle, "trace", "breakdown.device_idle"))
    if s.duty_cycle_pct is not None:
        evidence.append(ev("duty_cycle_pct", s.duty_cycle_pct, "runtime", "runtime.duty_cycle_pct"))
    low = (idle is not None and idle >= T.DEVICE_IDLE_SHARE) or (s.duty_cycle_pct is not None and s.duty_cycle_pct < T.DUTY_CYCLE_PCT)
    if not low:
        return passed(DEVICE_IDLE, "the device was busy for most of the step", evidence)
    explained = [f.id for f in others if f.outcome == "fired" and f.id in EXPLAINS_IDLE]
    if explained:
        return passed(DEVICE_IDLE, f"idle time explained by: {', '.join(explained)}", evidence)
    gain = Gain(factor=1 / (1 - idle), basis=f"the device idled {idle:.0%} of the traced step inside its programs; all of it removed", kind="upper_bound") if idle is not None and idle < 1 else None
    return fired(DEVICE_IDLE, "the device idled " + (f"{idle:.0%} of the traced step" if idle is not None else f"(duty cycle {s.duty_cycle_pct:.0f} %)"), evidence, gain)
