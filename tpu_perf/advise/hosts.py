"""Job rules: one process of a multi-process job holds every other one back."""

from __future__ import annotations

from tpu_perf.advise.finding import Finding, Fix, Gain, Rule, ev, fired, not_evaluable, passed
from tpu_perf.advise.signals import Signals
from tpu_perf.analyzers import hosts as T

STRAGGLER = Rule(
    id="straggler", title="One process holds the whole job back", family="input", severity="high",
    fix=Fix(
        summary="Find what the slow process does between its steps that the others do not (a slower input pipeline or disk, rank-0-only logging, evaluation or checkpointing inside the step, a busier host) and even it out: the same input work and prefetching on every host, periodic work done every N steps or off the step.",
        jax="if jax.process_index() == 0 and step % 100 == 0:\n    log(metrics)  # not every step on one host: the others wait in the all-reduce",
        pytorch="loader = DataLoader(ds, sampler=DistributedSampler(ds), num_workers=4, prefetch_factor=2)  # the same on every rank\nif dist.get_rank() == 0 and step % 100 == 0:\n    log(metrics)",
    ),
    docs=("https://docs.jax.dev/en/latest/multi_process.html", "https://docs.pytorch.org/docs/stable/notes/ddp.html"),
)


def straggler(s: Signals) -> Finding:
    if s.processes is None or s.processes < 2:
        return not_evaluable(STRAGGLER, "a single process: there is no other to compare it with")
    if not s.stragglers:
        known = [h for h in s.hosts if h.get("own_median_s") is not None or h.get("median_s") is not None]
        if len(known) < 2:
            return not_evaluable(STRAGGLER, f"fewer than two of the {s.processes} processes have steady steps")
        return passed(STRAGGLER, f"no process of {s.processes} stands out: own work per step and iterations within {T.STRAGGLER_FACTOR - 1:.0%} of the others'", [ev("processes", s.processes, "hosts", "job.processes")])
    worst = s.stragglers[0]
    evidence = [
        ev("straggler_process_index", worst["process_index"], "hosts", "stragglers[0].process_index"),
        ev(f"straggler_{worst['metric']}", worst["value_s"], "hosts", f"stragglers[0].value_s ({worst['metric']})"),
        ev("others_median_s", worst["others_median_s"], "hosts", "stragglers[0].others_median_s"),
        ev("extra_s", worst["extra_s"], "hosts", "stragglers[0].extra_s"),
    ]
    if worst.get("op"):  # the op that makes it slow, from every host's own trace (analyzers/job_ops.py)
        evidence += [ev("straggler_op", worst["op"]["op"], "hosts", "stragglers[0].op.op"), ev("straggler_op_extra_s", worst["op"]["extra_s"], "hosts", "stragglers[0].op.extra_s")]
    it = s.iteration_median_s
    gain = None
    if it and 0 < worst["extra_s"] < it:
        gain = Gain(factor=it / (it - worst["extra_s"]), basis=f"every process waits {worst['extra_s'] * 1e3:.3g} ms per step for this one; evened out, the job's step loses that wait", kind="estimate")
    return fired(STRAGGLER, worst["text"], evidence, gain)
