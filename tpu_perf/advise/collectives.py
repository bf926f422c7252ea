"""Collective rules: communication the device waits for instead of overlapping with compute."""

from __future__ import annotations

from tpu_perf.advise import thresholds as T
from tpu_perf.advise.finding import Finding, Fix, Gain, Rule, ev, fired, not_evaluable, passed
from tpu_perf.advise.signals import Signals

EXPOSED_COLLECTIVES = Rule(
    id="exposed-collectives", title="Collectives do not overlap compute", family="collectives", severity="medium",
    fix=Fix(
        summary="Let XLA overlap communication with compute: async collectives and latency-hiding scheduling, larger per-device work, or fewer collectives (sharding).",
        jax='os.environ["LIBTPU_INIT_ARGS"] = "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_overlap_compute_collective_tc=true"',
        pytorch="model = FSDP(model, forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE)",
    ),
    docs=("https://cloud.google.com/tpu/docs/performance-guide", "https://openxla.org/xla/flags_guidance", "https://docs.pytorch.org/docs/stable/fsdp.html"),
)


def exposed_collectives(s: Signals) -> Finding:
    a = s.hlo
    if s.stragglers:  # the trace is process 0's: its collectives wait for the straggler
        who = s.stragglers[0]["process_index"]
        return not_evaluable(EXPOSED_COLLECTIVES, f"this process's collectives include waiting for process {who}, which holds the job back (see straggler); even that out first")
    if s.platform == "cpu":
        return not_evaluable(EXPOSED_COLLECTIVES, "on the CPU backend the devices are threads on this machine's shared cores: a collective's time is mostly its "
                             "rendezvous, each device waiting for the others to be scheduled, not communication a TPU or GPU would overlap: judge it on a TPU or GPU run")
    if s.breakdown:
        share = s.breakdown.get("collective", 0.0)
        evidence = [ev("trace_collective_fraction", share, "trace", "breakdown.collective")]
        if a is not None:
            evidence += [ev("async_pairs", a.async_pairs, "hlo", "hlo.analysis.async_pairs"), ev("async_overlapped", a.async_overlapped, "hlo", "hlo.analysis.async_overlapped")]
        if share < T.EXPOSED_COLLECTIVE_SHARE:
            return passed(EXPOSED_COLLECTIVES, f"collectives alone ran {share:.0%} of the traced step", evidence)
        return fired(EXPOSED_COLLECTIVES, f"the device ran only collectives for {share:.0%} of the traced step", evidence,
                     Gain(factor=1 / (1 - share), basis=f"{share:.0%} of the step is communication with no compute beside it; fully overlapped it would vanish", kind="upper_bound"))
    if a is None:
        return not_evaluable(EXPOSED_COLLECTIVES, f"no trace window and no step-program HLO: {s.trace_fix}")
    count = sum(a.collectives.values())
    evidence = [ev("collectives", count, "hlo", "hlo.analysis.collectives"), ev("async_pairs", a.async_pairs, "hlo", "hlo.analysis.async_pairs"), ev("async_overlapped", a.async_overlapped, "hlo", "hlo.analysis.async_overlapped")]
    if count == 0 or a.async_overlapped >= a.async_pairs > 0:
        return passed(EXPOSED_COLLECTIVES, "no collectives in the step program" if count == 0 else "every async collective has compute between start and done", evidence)
    return not_evaluable(EXPOSED_COLLECTIVES, f"{count} collective(s), {a.async_pairs - a.async_overlapped} without compute between start and done; how long they wait needs a trace window")
