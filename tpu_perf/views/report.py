"""Renders the report document for a terminal. Returns rich objects; only the CLI prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from tpu_perf.analyzers.compare import compile_missing, compile_seconds
from tpu_perf.analyzers.report import Report
from tpu_perf.views import format as fmt
from tpu_perf.views.aot import render_aot
from tpu_perf.views.at_peak import render_at_peak
from tpu_perf.views.format import PlainTable as Table
from tpu_perf.views.hosts import render_hosts
from tpu_perf.views.inference import one_line as inference_line
from tpu_perf.views.inference import render_inference
from tpu_perf.views.torch_compile import render_torch_compile
from tpu_perf.views.traces import render_trace_tables

STATUS_STYLE = {"completed": "green", "running": "cyan", "failed": "red", "interrupted": "yellow", "crashed": "red", "damaged": "red"}

Renderer = Callable[[dict[str, Any]], RenderableType | None]
"""Renders one part of the report document (`Report.to_dict()`); None when it has nothing to show."""


def one_line(report: Report) -> str:
    """The run in one line (after `record`, a notebook handle): its status, steps, the headline step
    time with its basis, and the utilisation: the same fields the report and `ls` show."""
    s, r = report.steps, report.run
    if report.inference is not None and s.count == 0:
        return inference_line(report)
    device = f" ({fmt.seconds(s.device_median_s)} on the device)" if s.device_median_s is not None else ""
    line = f"run {r.id} {r.status}: {s.count} steps, {fmt.step_time(s)}{device}, utilisation {fmt.percent(report.mfu.value)}"
    return line if report.inference is None else f"{line}; {inference_line(report).split(': ', 1)[1]}"  # decode steps: the requests they served


def _kv(rows: list[tuple[str, str]], title: str) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    return table


def _header(doc: dict[str, Any]) -> RenderableType:
    run = doc["run"]
    hw = run.get("hardware") or {}
    status = Text(run["status"], style=STATUS_STYLE.get(run["status"], ""))
    line = Text.assemble(Text(f"{run['name']}  ", style="bold"), f"{run['id']}  ", status)
    if run.get("exit_code") not in (None, 0):
        line.append(f" (exit {run['exit_code']})", style="red")
    device = f"{hw.get('device_count', '?')} x {hw.get('device_kind', '?')} ({hw.get('platform', '?')})" if hw else "unknown devices"
    if doc.get("job"):
        device = f"a job of {doc['job']['processes']} processes  ·  {device} as process {doc['job']['steps_from']} sees them"
    parts: list[RenderableType] = [line, Text(f"{' '.join(run.get('command') or [])}  ·  {device}  ·  {', '.join(run.get('frameworks') or []) or 'no framework seen'}", style="dim")]
    if run.get("error"):
        parts.append(Text(f"error: {run['error']}", style="red"))
    return Group(*parts)


def _step_time(s: dict[str, Any]) -> str:
    """The headline step time (`steps.step_s`) with its basis, then the steady iterations' spread,
    each labelled for what it is."""
    spread = (f"median {fmt.seconds(s['iteration_median_s'])}  p10 {fmt.seconds(s['iteration_p10_s'])}  "
              f"p90 {fmt.seconds(s['iteration_p90_s'])}  mean {fmt.seconds(s['iteration_mean_s'])}")
    if s["step_s"] is None:
        return f"n/a (no steady step)  iterations: {spread}"
    if s["step_basis"] == "all-in":
        return (f"{fmt.seconds(s['step_s'])} per step (all-in, {s['step_basis_steps']} steps: {s['step_basis_reason']}; see all-in)  "
                f"steady {s['steady_basis']} {fmt.seconds(s['steady_step_s'])}, steady iterations: {spread}")
    if s.get("runs_ahead"):
        return f"{fmt.seconds(s['step_s'])} per step ({s['step_basis']}, {s['step_basis_steps']} steps: the loop runs ahead of the device; see the note)  iterations: {spread}"
    return f"{fmt.seconds(s['step_s'])} per step (median wall-clock iteration, {s['step_basis_steps']} steady steps)  iterations: {spread}"


def _steps(doc: dict[str, Any]) -> RenderableType:
    s, c = doc["steps"], doc.get("compile") or {}
    rows = [
        ("steps", f"{s['count']} ({s['warmup']} warm-up, {s['steady']} steady, {s['traced']} traced; source {s['source'] or 'none'})" + (f"; each an optimizer update over {s['micro_batches']} micro-batches" if (s.get("micro_batches") or 1) > 1 else "")),
        ("step time", _step_time(s)),
        ("all-in", _all_in(s)),
        ("device / host", _device_view(s)),
        *_call_loop(s),
        ("throughput", f"{fmt.number(s['steps_per_s'])} steps/s" + (f", {fmt.number(s['tokens_per_s'], 4)} tokens/s" if s.get("tokens_per_s") else "")),
    ]
    if s.get("note"):
        rows.append(("note", s["note"]))
    if c.get("count") is None:
        rows.append(("compile", f"n/a ({c.get('reason') or 'unknown'})"))
    elif compile_seconds(doc) is None:  # a run without JAX: 0 compiles means not seen, not none (as on the pages)
        rows.append(("compile", f"n/a ({compile_missing(doc)})"))
    else:
        late = "n/a (no steps to count after)" if c["after_warmup"] is None else f"{c['after_warmup']} recompiles ({fmt.seconds(c['after_warmup_s'])})"
        rows.append(("compile", f"{c['count']} compiles, {fmt.seconds(c['total_s'])}; after warm-up: {late}"))
    if c.get("after_warmup"):
        rows.append(("recompiled", ", ".join(f"{k} x{v}" for k, v in c["after_warmup_functions"].items())))
        for cause in c.get("after_warmup_causes") or []:
            rows.append(("what changed", f"{cause['function']}: {cause['kind']} at {cause['count']} (first: {cause['example']})"))
    return _kv(rows, "Steps")


def _all_in(s: dict[str, Any]) -> str:
    """All-in step time and what the steady median leaves out (`analyzers.all_in`)."""
    from tpu_perf.analyzers.all_in import Exclusion, exclusions_text

    if s.get("all_in_s") is None:
        return "n/a (fewer than 2 steps)"
    left_out = exclusions_text([Exclusion(**e) for e in s.get("excluded") or ()])
    share = "" if s.get("excluded_share") is None else f", {s['excluded_share']:.0%} of the time after the first step"
    warn = "; the headline step time is this all-in time" if s["step_basis"] == "all-in" else ""
    tool = s.get("all_in_tool_steps") or 0
    paced = s.get("steady_basis") == "device pace"  # the pace: spans of steady steps, not iterations
    counted = "the device work that finished in them" if paced else "the step time"
    over = f"the {s['all_in_steps']} steps after the first" + (f" ({tool} inside tpu-perf's trace window or FLOP count counted as {counted}: the rest of their time is tpu-perf's own)" if tool else "")
    sample = "the device pace" if paced else "the steady median"
    return f"{fmt.seconds(s['all_in_s'])} per step over {over}; {sample} leaves out {left_out}{share}{warn}"


def _device_view(s: dict[str, Any]) -> str:
    device, host = s.get("device_median_s"), s.get("host_median_s")
    if device is None:
        return f"n/a ({s.get('device_reason') or 'unknown'})"
    return f"median {fmt.seconds(device)} device (dispatch to outputs ready), {fmt.seconds(host)} host (the rest of the iteration: input, syncs, logging)"


def _call_loop(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The host side of the step the input-bound rule reads: inside jitted calls, and the loop's own work."""
    call, loop = s.get("call_median_s"), s.get("loop_median_s")
    if call is None or loop is None:
        return []
    return [("call / loop", f"median {fmt.seconds(call)} inside jitted calls, {fmt.seconds(loop)} the loop's own work outside the step call "
             f"(input, logging, framework code); {s.get('call_loop_steps', 0)} of {s['steady']} steady steps")]


def _loops(f: dict[str, Any]) -> str | None:
    """How loops whose trip count XLA did not prove were counted (None when there were none)."""
    parts = [f"{name}: {fmt.number(trips, 3)} trips per call, measured in the trace window" for name, trips in (f.get("measured_trips") or {}).items()]
    if f.get("unknown_trip_loops"):
        parts.append(f"{f['unknown_trip_loops']} loop(s) counted once: XLA proved no trip count and no traced step ran them, so FLOPs / step may be low (trace a step, or pass --flops-per-step)")
    return "; ".join(parts) or None


def _flops(doc: dict[str, Any]) -> RenderableType:
    f, m = doc["flops"], doc.get("mfu_detail") or {}
    per_chip = f" = {fmt.number(f['peak_tflops_per_chip'], 4)} per chip ({f['devices_per_chip']} device(s)/chip)" if f.get("devices_per_chip", 1) > 1 else ""
    peak = f"{fmt.number(f['peak_tflops_per_device'], 4)} TFLOP/s per device{per_chip} ({f['chip']}, {f['precision']}, {f['peak_source']})" if f["peak_tflops_per_device"] else "unknown (pass --chip, run `tpu-perf calibrate --save`, or see `tpu-perf chips`)"
    rows = [
        ("FLOPs / step", f"{fmt.flops(f['per_step'])} ({f['source'] or 'unknown'}, {f['devices']} device(s))"),
        ("achieved", f"{fmt.number(f['achieved_tflops_per_device'], 4)} TFLOP/s per device, {fmt.number(f.get('achieved_tflops_per_chip'), 4)} per chip"),
        ("peak", peak),
        ("utilisation", f"{fmt.percent(f['utilization'])} of peak (hardware FLOPs, what XLA counts)"),
    ]
    if loops := _loops(f):
        rows.insert(1, ("loops", loops))
    if m.get("mfu_per_device") is not None:
        rows.append(("model MFU", f"{fmt.percent(m['mfu_per_device'])} ({m['convention']} convention, {m['model'] or 'model'}: {fmt.flops(m['flops_per_token'])}/token, {fmt.number(m['tflops_per_device'], 4)} TFLOP/s per device, {fmt.number(m['tflops_per_chip'], 4)} per chip)"))
    elif m.get("reason"):
        rows.append(("model MFU", f"n/a ({m['reason']})"))
    return _kv(rows, "Compute")


def _memory(doc: dict[str, Any]) -> RenderableType:
    m, r = doc["memory"], doc.get("runtime") or {}
    rows = [
        ("device peak", f"{fmt.bytes_(m['peak_bytes'])} ({m['peak_source'] or 'no device samples'})"),
        ("capacity", f"{fmt.bytes_(m['capacity_bytes'])}" + (f", headroom {fmt.bytes_(m['headroom_bytes'])} ({fmt.percent(m['headroom_fraction'])})" if m["headroom_fraction"] is not None else "")),
    ]
    for d in m.get("per_device") or []:
        duty = next((x["duty_cycle_pct"] for x in r.get("per_device") or [] if x["device"] == d["device"]), None)
        used = f" ({fmt.percent(d['peak_bytes'] / d['capacity_bytes'])})" if d["capacity_bytes"] else ""
        rows.append((f"  {d['device']}", f"peak {fmt.bytes_(d['peak_bytes'])} of {fmt.bytes_(d['capacity_bytes'])}{used}, duty cycle {_pct(duty)}  [{d['source']}]"))
    if r.get("duty_cycle_pct") is not None:
        rows.append(("duty cycle", f"{_pct(r['duty_cycle_pct'])} mean over {r['samples']} samples ({', '.join(r['sources'])})"))
    if m.get("max_batch_multiplier") is not None:
        batch = f"about {m['max_batch_size']} (batch {m['batch_size']})" if m.get("max_batch_size") else f"about {m['max_batch_multiplier']:.2f} x the current batch"
        rows.append(("largest batch", f"{batch}, an estimate: linear in the batch above {fmt.bytes_(m['fixed_bytes'])} fixed ({m['fixed_basis']})"))
    rows += [("XLA analysis", f"{fmt.bytes_(m['xla_peak_bytes'])} (the step program's peak_memory_in_bytes; XLA:CPU's leaves out temporaries)" if m["xla_peak_bytes"] is not None else "n/a"),
             ("host RSS peak", fmt.bytes_(m["host_rss_peak_bytes"]))]
    if r.get("host_cpu_pct") is not None:
        rows.append(("host CPU", f"{_pct(r['host_cpu_pct'])} system, {_pct(r['process_cpu_pct'])} this process"))
    for g in r.get("gaps") or []:
        rows.append(("sampling gap", f"{g['source']}: {fmt.seconds(g['end_s'] - g['start_s'])} without samples" + (f" ({g['detail']})" if g.get("detail") else "")))
    return _kv(rows, "Memory and runtime")


def _pct(value: float | None) -> str:
    """A value already in percent (0-100)."""
    return "n/a" if value is None else f"{value:.1f} %"


def _hlo(doc: dict[str, Any]) -> RenderableType | None:
    programs = doc["hlo"]["programs"]
    if not programs:
        return None
    table = Table(title="Fusion (optimized HLO)", title_justify="left")
    for col in ("program", "fusions", "by kind", "kernels", "fused ops", "left unfused"):
        table.add_column(col)
    for p in programs:
        kinds = ", ".join(f"{k} {v}" for k, v in p["fusions_by_kind"].items())
        unfused = ", ".join(f"{k} {v}" for k, v in list(p["unfused_by_opcode"].items())[:4])
        table.add_row(p["function"] + (" (step)" if p["is_step"] else ""), str(p["fusions"]), kinds, str(p["top_level_instructions"]), str(p["fused_instructions"]), unfused)
    return table


def _trace(doc: dict[str, Any]) -> RenderableType | None:
    t = doc["trace"]
    warnings = doc["run"].get("warnings") or []
    parts: list[RenderableType] = []
    if t["logdir"]:
        parts.append(Text(f"trace: {t['logdir']}  (open with: xprof --logdir {t['logdir']}, or tensorboard --logdir {t['logdir']})", style="dim"))
    for w in warnings:
        parts.append(Text(f"warning: {w}", style="yellow"))
    return Group(*parts) if parts else None


RENDERERS: tuple[Renderer, ...] = (_header, render_inference, _steps, render_hosts, _flops, _memory, render_at_peak, _hlo, _trace, render_trace_tables, render_torch_compile, render_aot)
"""The report's parts in display order."""

TRAINING_ONLY: tuple[Renderer, ...] = (_steps, _flops)
"""Parts about steps, left out of a run that served requests and recorded no step."""


def render_report(report: Report) -> RenderableType:
    doc = report.to_dict()
    serving = doc["inference"] is not None and doc["steps"]["count"] == 0  # no step: the step and compute parts would be all n/a
    parts = [r for fn in RENDERERS if not (serving and fn in TRAINING_ONLY) and (r := fn(doc)) is not None]
    return Panel(Group(*parts), title="tpu-perf report", title_align="left")
