"""A multi-process job across its hosts: each process's steps, and the ones that hold the job back.

In a synchronous job (data parallel, SPMD) every process's iteration is the slowest one's: the
others wait for it in the collective. So iteration times cannot name the straggler; what a process
does between its waits can. A step's `wait_s` is the time the loop spent blocked in a framework
call (a device sync, a collective, `backward()`); `own_s = duration_s - wait_s` is the process's
own work in that iteration (input, host compute, logging). The process whose own work is longest,
by a clear margin over the others', is the one they wait for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tpu_perf.analyzers.breakdown import analyze_breakdown
from tpu_perf.analyzers.job_ops import (
    HostOp,
    OpSpread,
    StragglerOp,
    host_top_ops,
    op_spread,
    op_time_by_host,
    straggler_op,
)
from tpu_perf.analyzers.steps import analyze_steps, run_steps, run_warmup, steady_mask
from tpu_perf.store import Run

BREAKDOWN_ALL_HOSTS = 64
"""Jobs of up to this many processes get every process's breakdown in the report; larger ones
the first process's and the stragglers' only: a breakdown is recomputed from the process's
timeline, 0.1 s per host measured on the 2-core machine (64 imported v6e hosts: 6.7 s), so
every host of a 2,048-host job would add minutes to each report
(`analyze_breakdown(run.hosts[i])` gives any one)."""

STRAGGLER_FACTOR = 1.2
"""A process is a straggler when its metric is at least this times the other processes' median..."""
STRAGGLER_SHARE = 0.10
"""...and longer by at least this share of the job's median iteration: what the others wait for
each step must matter (and exceed the step-to-step noise of a busy host)."""


@dataclass(frozen=True, kw_only=True)
class HostStats:
    """One process of a job. `own_median_s`: median of the iteration minus the time blocked in
    framework calls (see the module docstring); None when no blocking call was timed."""

    process_index: int | None
    shard: str
    hostname: str | None
    status: str
    steps: int
    steady: int
    median_s: float | None
    mean_s: float | None
    device_median_s: float | None
    host_median_s: float | None
    own_median_s: float | None
    wait_median_s: float | None
    devices: int | None
    """Devices this process drives (local devices)."""
    peak_hbm_bytes: int | None
    traced_steps: int
    """Steps inside this process's trace window: what its op times cover."""
    top_ops: tuple[HostOp, ...] = ()
    """The ops with the most time in this process's own trace window (job_ops.HOST_TOP_OPS)."""
    breakdown: dict[str, float] | None = None
    """This process's step-time breakdown (shares of its traced steps), from its own trace;
    None when it has no trace tables, or in a job of more than BREAKDOWN_ALL_HOSTS processes for
    a process that is neither the first nor a straggler."""

    @property
    def key(self) -> int | str:
        """How the job's op tables name this host: its process index, else its shard."""
        return self.process_index if self.process_index is not None else self.shard


@dataclass(frozen=True, kw_only=True)
class Straggler:
    process_index: int | None
    hostname: str | None
    metric: str
    """`own_s` (work between waits), or `mean_s` (the iteration, when no wait was timed: processes
    at different paces)."""
    value_s: float
    others_median_s: float
    factor: float
    extra_s: float
    text: str
    op: StragglerOp | None = None
    """The op whose time on this process, per traced step, makes most of `extra_s` (job_ops);
    None when no op does: the extra time is the process's own work between ops."""


@dataclass(frozen=True, kw_only=True)
class HostsSection:
    processes: int
    """Processes in the job (as they reported it), recorded or not."""
    hosts: tuple[HostStats, ...]
    missing: tuple[int, ...]
    """Process indices with no shard in the run (not recorded, or died before they joined)."""
    stragglers: tuple[Straggler, ...]
    steps_from: int | None
    """The process whose steps are the job's step statistics (the report's `steps`)."""
    note: str | None
    ops_spread: tuple[OpSpread, ...] = ()
    """Per op, its time over the hosts' trace windows: min, median, max and the slowest host."""


def _steady(run: Run) -> pd.DataFrame:
    steps = run_steps(run)
    if steps.empty:
        return steps
    return steps[steady_mask(steps, run_warmup(run)).to_numpy()]


def _median(values: pd.Series) -> float | None:
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(np.median(values)) if len(values) else None


def _own_and_wait(steady: pd.DataFrame) -> tuple[float | None, float | None]:
    """Medians of own work and of blocked time per steady step, when the blocked time was timed
    for at least half of them."""
    if steady.empty or "wait_s" not in steady:
        return None, None
    wait = pd.to_numeric(steady["wait_s"], errors="coerce")
    known = wait.notna()
    if 2 * int(known.sum()) < len(steady) or not known.any():
        return None, None
    own = (steady["duration_s"].astype(float)[known] - wait[known]).clip(lower=0.0)
    return _median(own), _median(wait[known])


def _peak_hbm(run: Run) -> int | None:
    memory = run.memory
    if memory.empty or "peak_bytes" not in memory:
        return None
    peaks = pd.to_numeric(memory["peak_bytes"], errors="coerce").dropna()
    return int(peaks.max()) if len(peaks) else None


def host_stats(host: Run) -> HostStats:
    stats = analyze_steps(host)
    own, wait = _own_and_wait(_steady(host))
    index = host.manifest.get("process_index")
    hardware = host.manifest.get("hardware") or {}
    return HostStats(
        process_index=int(index) if index is not None else None,
        shard=host.url.rstrip("/").rsplit("/", 1)[-1],
        hostname=host.manifest.get("host"),
        status=host.status,
        steps=stats.count,
        steady=stats.steady,
        median_s=stats.iteration_median_s,
        mean_s=stats.iteration_mean_s,
        device_median_s=stats.device_median_s,
        host_median_s=stats.host_median_s,
        own_median_s=own,
        wait_median_s=wait,
        devices=hardware.get("local_device_count") or hardware.get("device_count"),
        peak_hbm_bytes=_peak_hbm(host),
        traced_steps=stats.traced,
    )


def _breakdown(host: Run) -> dict[str, float] | None:
    if host.table("timeline").empty:
        return None
    return dict(analyze_breakdown(host).fractions) or None


def _name(host: HostStats) -> str:
    who = f"process {host.process_index}" if host.process_index is not None else f"shard {host.shard}"
    return f"{who} ({host.hostname})" if host.hostname else who


def find_stragglers(hosts: tuple[HostStats, ...]) -> tuple[Straggler, ...]:
    """Processes whose own work per step (else mean iteration) stands out against the others' median."""
    if len(hosts) < 2:
        return ()
    medians = [h.median_s for h in hosts if h.median_s is not None]
    if not medians:
        return ()
    job_step = float(np.median(medians))
    found = []
    own_known = sum(h.own_median_s is not None for h in hosts) >= 2
    # own work when it was timed (an even job has no straggler, whatever the noise in iterations);
    # else the mean iteration: equal in a synchronous job, it differs only between paces
    for metric, name, label in (("own_median_s", "own_s", "own work per step (the iteration minus time blocked in syncs and collectives)"), ("mean_s", "mean_s", "mean iteration")):
        if (metric == "mean_s") == own_known:
            continue
        values = {i: getattr(h, metric) for i, h in enumerate(hosts) if getattr(h, metric) is not None}
        if len(values) < 2:
            continue
        for i, value in values.items():
            others = float(np.median([v for j, v in values.items() if j != i]))
            extra = value - others
            if extra < STRAGGLER_SHARE * job_step or value < STRAGGLER_FACTOR * others:
                continue
            factor = value / others if others > 0 else float("inf")
            host = hosts[i]
            text = f"{_name(host)}: {label} {value * 1e3:.1f} ms against {others * 1e3:.1f} ms on the other processes ({factor:.2f}x, +{extra * 1e3:.1f} ms per step); the job waits for it"
            found.append(Straggler(process_index=host.process_index, hostname=host.hostname, metric=name, value_s=value, others_median_s=others, factor=factor, extra_s=extra, text=text))
    return tuple(sorted(found, key=lambda s: -s.extra_s))


def analyze_hosts(run: Run) -> HostsSection | None:
    """None for a single process's run."""
    if not run.is_job:
        return None
    hosts = tuple(host_stats(h) for h in run.hosts)
    processes = max([int(run.manifest.get("process_count") or 0), len(hosts)])
    present = {h.process_index for h in hosts}
    missing = tuple(i for i in range(processes) if i not in present) if all(h.process_index is not None for h in hosts) else ()
    steps_from = hosts[0].process_index if hosts else None
    medians = [h.median_s for h in hosts if h.median_s]
    note = None
    if hosts and len(medians) > 1:
        spread = max(medians) / min(medians) - 1
        slowest = max(hosts, key=lambda h: h.median_s or 0.0)
        if spread <= 0.05:
            note = f"the job's step statistics are {_name(hosts[0])}'s; every process's median iteration is within {spread:.0%} of the others' (a synchronous job)"
        else:
            note = f"the job's step statistics are {_name(hosts[0])}'s; the processes run at different paces (median iterations differ by {spread:.0%}, slowest {_name(slowest)})"
    if missing:
        note = (note + "; " if note else "") + f"no data from process(es) {', '.join(map(str, missing))}: not recorded, or gone before joining"
    by_host = op_time_by_host(run)
    hosts = tuple(replace(h, top_ops=host_top_ops(by_host, h.key)) for h in hosts)
    stragglers = tuple(_explained(s, hosts, by_host) for s in find_stragglers(hosts))
    slow = {(s.process_index, s.hostname) for s in stragglers}
    every = len(hosts) <= BREAKDOWN_ALL_HOSTS
    hosts = tuple(replace(h, breakdown=_breakdown(r)) if every or i == 0 or (h.process_index, h.hostname) in slow else h for i, (h, r) in enumerate(zip(hosts, run.hosts, strict=True)))
    if not every:
        note = (note + "; " if note else "") + f"breakdowns are the first process's and the stragglers' (a job of more than {BREAKDOWN_ALL_HOSTS} processes)"
    return HostsSection(processes=processes, hosts=hosts, missing=missing, stragglers=stragglers, steps_from=steps_from, note=note, ops_spread=op_spread(by_host))


def _explained(straggler: Straggler, hosts: tuple[HostStats, ...], by_host: pd.DataFrame) -> Straggler:
    """`straggler` with the op that makes it slow, when one does (job_ops.straggler_op)."""
    host = next(h for h in hosts if h.process_index == straggler.process_index and h.hostname == straggler.hostname)
    op = straggler_op(by_host, host.key, {h.key: h.traced_steps for h in hosts}, straggler.extra_s)
    if op is None:
        return straggler
    text = f"{straggler.text}; in its trace window {op.op} takes {op.value_s * 1e3:.1f} ms per step against {op.others_median_s * 1e3:.1f} ms on the others (+{op.extra_s * 1e3:.1f} ms)"
    return replace(straggler, op=op, text=text)


def steps_by_host(run: Run) -> pd.DataFrame:
    """One row per process per step (process_index, hostname, index, duration_s, own_s): the
    hosts x steps heatmap's data. Empty for a single process's run."""
    frames = []
    for host in run.hosts:
        steps = run_steps(host)
        if steps.empty:
            continue
        wait = pd.to_numeric(steps["wait_s"], errors="coerce") if "wait_s" in steps else pd.Series(np.nan, index=steps.index)
        frames.append(pd.DataFrame({
            "process_index": host.manifest.get("process_index"),
            "hostname": host.manifest.get("host"),
            "index": np.arange(len(steps)),
            "duration_s": steps["duration_s"].astype(float).to_numpy(),
            "own_s": (steps["duration_s"].astype(float) - wait).clip(lower=0.0).to_numpy(),  # as own_median_s: never negative
        }))
    if not frames:
        return pd.DataFrame(columns=["process_index", "hostname", "index", "duration_s", "own_s"])
    return pd.concat(frames, ignore_index=True)
