"""Run page: everything about one run, how to open its trace, and its tables to download."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.analyzers import breakdown_compare, compare, ops_compare
from tpu_perf.analyzers.all_in import Exclusion, exclusions_text
from tpu_perf.dashboard import (
    advice_tab,
    aot,
    at_peak,
    bars,
    data,
    figures,
    hosts_tab,
    html_table,
    inference,
    kpi_table,
    shape,
    state,
    step_charts,
    tables,
    widgets,
)
from tpu_perf.dashboard.screens.compare import breakdown_fractions, ops_table_view
from tpu_perf.jsonio import dumps
from tpu_perf.store.fs import filesystem, join, open_regular
from tpu_perf.views import format as fmt

XPROF_PORT = 8791


def _pick(refs: list[data.RunRef]) -> data.RunRef | None:
    """The URL's run (id, unique prefix or unique name), else the newest; a URL naming no single run
    shows an error naming it and no run until one is picked: never another run in its place."""
    by_id = {r.id: r for r in refs}
    ids = list(by_id)
    wanted, problem = refs[0], None
    asked = state.selected_ids("run")
    if asked:
        wanted, problem = data.resolve(refs, asked[0], data.store_location())
    if problem and st.session_state.get("run_pick") is None:
        widgets.error_card(f"Run '{asked[0]}' from the URL cannot be shown", problem)
    index = ids.index(wanted.id) if wanted else None
    chosen = st.selectbox("Run", ids, index=index, format_func=lambda i: f"{by_id[i].name} · {i}", key="run_pick", placeholder="pick a run")
    if chosen is None:
        return None
    st.query_params["run"] = chosen
    return by_id[chosen]


def _overview(doc: dict[str, Any], ref: data.RunRef) -> None:
    rows = shape.kpi_rows({ref.name: doc}, ref.name)
    st.html(kpi_table.kpi_table_html(rows, [ref.name], {}, baseline=""))
    st.caption(steps_sentence(doc))
    inference.render(doc)  # generation requests (docs/inference.md)
    frame = data.phases_of(ref, doc)
    if frame.empty and doc.get("inference"):
        pass  # requests without steps: the inference table above is the run
    elif frame.empty:
        if data.dig(doc, "run.imported"):
            widgets.missing("Steps", "This run is an import (`tpu-perf import`) of a trace with no step markers tpu-perf could see; its ops and devices come from the trace.")
        else:
            widgets.missing("Steps", "The script ran no step tpu-perf could see; mark steps with `tpu_perf.step()`.")
    else:
        log, x = widgets.step_axes("run")
        charts = step_charts.step_charts((step_charts.source(ref.name, ref, doc),), log, x)
        left, right = st.columns(2)
        left.plotly_chart(charts[0], width="stretch", key="run_steps")
        right.plotly_chart(charts[1], width="stretch", key="run_dist")
    parts = breakdown_fractions(doc)
    if parts:
        whole = breakdown_compare.whole_trace_only(doc)
        st.html(bars.breakdown_bars({ref.name: parts}, whole_trace=[ref.name] if whole else ()))
        if whole:
            st.caption(f"Shares of the whole trace only ({breakdown_compare.whole_trace_reason(doc)}): no time per step in each part.")
        elif data.dig(doc, "breakdown_detail.note"):
            st.caption(f"Shares of the traced steps: {data.dig(doc, 'breakdown_detail.note')}.")
    else:
        widgets.missing("Step-time breakdown", "It comes from the trace window's device timeline.")
    aot.render(doc)  # record --topology
    if doc.get("mfu_detail"):  # built when opened: st.json's viewer is a chunk of its own for the browser to load and run
        detail = st.expander("MFU detail", key="run_mfu_detail", on_change="rerun")
        if detail.open:
            with detail:
                st.json(doc["mfu_detail"])


def steps_sentence(doc: dict[str, Any]) -> str:
    """"10 steps: 1 warm-up, 5 steady, 4 left out (3 compiled a new program (1.2 s), …)" adding up to the count, then p10/p90,
    achieved TFLOP/s and FLOPs per step, each part left out where unknown (never "None")."""
    s = doc["steps"]
    count = s["count"]
    if not count:
        said = "no steps (an import of a trace with no step markers)" if data.dig(doc, "run.imported") else "no steps recorded"
    else:  # the report's own attribution of the steps left out (`steps.excluded`), as `report` and the compare page say it
        left = [e for e in s["excluded"] if e["reason"] != "warmup"]
        out = f", {sum(e['steps'] for e in left)} left out ({exclusions_text([Exclusion(**e) for e in left])})" if left else ""
        said = f"{count} steps: {s['warmup']} warm-up, {s['steady']} steady{out}" + (f", marked by `{s['source']}`" if s.get("source") else "")
    parts = [said]
    if s.get("iteration_p10_s") is not None:
        ahead = " of the iterations (the loop runs ahead: mostly dispatches)" if s.get("runs_ahead") else ""
        parts.append(f"p10 {fmt.seconds(s['iteration_p10_s'])} · p90 {fmt.seconds(s.get('iteration_p90_s'))}{ahead}")
    achieved = data.dig(doc, "flops.achieved_tflops")
    if achieved is not None:
        parts.append(f"achieved {fmt.number(achieved)} TFLOP/s")
    per_step = data.dig(doc, "flops.per_step")
    if per_step is not None:
        parts.append(f"{fmt.flops(per_step)} per step ({data.dig(doc, 'flops.source') or 'source not recorded'})")
    return " · ".join(parts)


def _memory(doc: dict[str, Any], ref: data.RunRef) -> None:
    m = doc.get("memory") or {}
    facts = [
        ("Peak device memory", fmt.bytes_(m.get("peak_bytes")), f"memory.peak_bytes, source: {m.get('peak_source') or 'n/a'}"),
        ("Capacity per device", fmt.bytes_(m.get("capacity_bytes")), None),
        ("XLA analysis (step)", fmt.bytes_(m.get("xla_peak_bytes")), "memory.xla_peak_bytes: the step program's peak_memory_in_bytes by XLA's memory analysis; XLA:CPU's leaves out temporaries, so it is not the peak above"),
        ("Host RSS peak", fmt.bytes_(m.get("host_rss_peak_bytes")), None),
    ]
    duty = data.dig(doc, "runtime.duty_cycle_pct")
    if duty is not None:
        facts.append(("Duty cycle", f"{duty:.1f} %", "runtime.duty_cycle_pct: the mean share of time the chip was busy, as libtpu (TPU) or NVML (GPU) samples it"))
    st.html(html_table.facts_html(facts))
    if isinstance(m.get("per_device"), list) and m["per_device"]:
        per_device = tables.device_memory(m["per_device"], data.dig(doc, "run.started_at"))
        st.html(html_table.table_html(per_device, numeric=tables.DEVICE_MEMORY_NUMERIC, caption="Peak per device"))
    samples = data.memory_frame(ref.url, ref.stamp)
    if samples.empty:
        widgets.missing("Memory samples", "No memory time series in this run.")
    else:
        st.plotly_chart(figures.memory_timeline([(ref.name, samples)], title="Memory in use (devices and host)"), width="stretch", key="run_memory")
    at_peak.render(doc)


def _ops(doc: dict[str, Any]) -> None:
    whole = not ops_compare.has_steps(doc)
    ops = ops_compare.ops_side_by_side({"time": doc}, "time", same_program=True, whole_trace=whole)
    if ops.empty:
        widgets.missing("Per-op times", "They come from the trace window (ops.top in the report).")
    else:
        if whole:
            st.caption("No steps in this trace: times are per device over the whole trace, not per step.")
        table, config = ops_table_view(ops, ["time"], per="trace" if whole else "step")
        st.dataframe(table.drop(columns=["ops"]) if all(len(str(n)) <= ops_compare.NAME_WIDTH for n in ops.index) else table, column_config=config, width="stretch", key="run_ops")
    fusion = compare.fusion_side_by_side({"step program": doc})
    if fusion.empty:
        widgets.missing("Fusion summary", "It comes from the step program's optimized HLO.")
    else:
        st.dataframe(fusion, width="stretch", key="run_fusion")
    if isinstance(doc.get("devices"), list) and doc["devices"]:
        st.dataframe(tables.devices(doc["devices"]), hide_index=True, width="stretch", key="run_devices")


def _compiles(doc: dict[str, Any]) -> None:
    c = doc.get("compile") or {}
    cols = st.columns(3)
    unknown = c.get("reason") or "unknown"
    cols[0].metric("Compiles", "n/a" if c.get("count") is None else c["count"], help=None if c.get("count") is not None else unknown)
    total = compare.compile_seconds(doc)
    cols[1].metric("Compile time", "n/a" if total is None else fmt.seconds(total), help=None if total is not None else compare.KPI_WHY["Compile time"](doc))
    cols[2].metric("After warm-up", "n/a" if c.get("after_warmup") is None else c["after_warmup"], help="recompiles during steady state: worth a look")
    if c.get("slowest"):
        st.markdown("**Slowest compiles**")
        st.dataframe(tables.renamed(c["slowest"], tables.SLOWEST_COMPILE_COLUMNS), hide_index=True, width="stretch", key="run_slowest", column_config={"compile time (s)": st.column_config.NumberColumn(format="%.3f s")})


def _trace(doc: dict[str, Any], ref: data.RunRef) -> None:
    trace = doc.get("trace") or {}
    files = [str(f) for f in trace.get("files") or []]
    if not files:
        widgets.missing("Trace", "Record with a trace window (`--trace-steps START:STOP`, on by default).")
        return
    xplanes = [f for f in files if f.endswith(".xplane.pb")]
    chrome = [f for f in files if f.endswith((".json", ".json.gz"))]
    if xplanes:
        st.markdown("**XProf** (trace viewer, op profile, memory viewer, roofline):")
        st.code(f"xprof server --logdir {trace.get('logdir')} --port {XPROF_PORT}\n# then open http://localhost:{XPROF_PORT}", language="bash")
        st.markdown("**TensorBoard** (with the profile plugin):")
        st.code(f"tensorboard --logdir {trace.get('logdir')}", language="bash")
    if chrome:
        kind = "This Kineto (PyTorch profiler) trace" if not xplanes else "The Chrome-trace JSON"
        st.markdown(f"**Perfetto**: {kind} opens in [ui.perfetto.dev](https://ui.perfetto.dev): download it below, then *Open trace file* and pick it (a `.json.gz` is read as is, no need to unzip).")
        if not xplanes:
            st.caption("XProf and TensorBoard read XPlane captures (`.xplane.pb`); a Kineto trace has none, so they would find nothing here.")
    run = data.open_run(ref.url, ref.stamp)
    for i, rel in enumerate(files):
        label = "XPlane, for XProf/TensorBoard" if rel in xplanes else "Chrome-trace JSON, for Perfetto" if rel in chrome else "trace file"
        st.download_button(f"Download {rel} ({label})", data=_reader(run, rel), file_name=rel.rsplit("/", 1)[-1], key=f"trace_{i}", on_click="ignore")
        st.code(run.file_path(rel), language=None)


def _reader(run: Any, rel: str) -> Callable[[], bytes]:
    def read() -> bytes:
        fs, base = filesystem(run.url)  # fsspec, so remote stores work too
        with open_regular(fs, join(base, rel)) as f:
            return f.read()

    return read


def _as(frame_fn: Callable[[], pd.DataFrame], kind: str) -> Callable[[], bytes]:
    def encode() -> bytes:
        frame = frame_fn()
        if kind == "csv":
            return frame.to_csv(index=False).encode()
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()

    return encode


def _downloads(doc: dict[str, Any], ref: data.RunRef) -> None:
    st.download_button("Report (JSON, as `tpu-perf report --json`)", dumps(doc), file_name=f"{ref.id}-report.json", key="dl_report", on_click="ignore")
    for name in data.TABLES:
        frame = data.table(ref.url, ref.stamp, name)
        if frame.empty:
            continue
        cols = st.columns([2, 1, 1])
        cols[0].markdown(f"`{name}`: {len(frame):,} rows × {frame.shape[1]} columns")
        cols[1].download_button("CSV", _as(lambda n=name: data.table(ref.url, ref.stamp, n), "csv"), file_name=f"{ref.id}-{name}.csv", key=f"dl_{name}_csv", on_click="ignore")
        cols[2].download_button("Parquet", _as(lambda n=name: data.table(ref.url, ref.stamp, n), "parquet"), file_name=f"{ref.id}-{name}.parquet", key=f"dl_{name}_parquet", on_click="ignore")


def _config(ref: data.RunRef) -> None:
    manifest = data.open_run(ref.url, ref.stamp).manifest
    table = compare.config_diff({"value": manifest}, only_different=False)
    st.dataframe(table, width="stretch", key="run_config")
    with st.expander("Manifest (run.json)"):
        st.json(manifest)


def render() -> None:
    st.title("Run")
    refs, errors = data.list_refs(data.store_location())
    for message in errors:
        widgets.error_card("A run folder cannot be read", message)
    if not refs:
        st.info("No runs in this store yet.")
        return
    ref = _pick(refs)
    if ref is None:
        return
    doc, error = data.report(ref)
    if doc is None:
        widgets.error_card(f"Run {ref.name} ({ref.id}) cannot be loaded", error or "unknown error")
        return
    r = doc["run"]
    started = f"imported {fmt.timestamp(r.get('started_at'))}" if r.get("imported") else f"{r['status']} · started {fmt.timestamp(r.get('started_at'))}"
    st.markdown(f"### {widgets.STATUS_ICON.get(r['status'], '')} {fmt.md(r['name'])}  \n{fmt.md_code(r['id'])} · {fmt.md(started)} · {fmt.md_code(r.get('url'))}")
    st.markdown(f"{'Imported with' if r.get('imported') else 'Recorded with'}: {fmt.md_code(' '.join(map(str, r.get('command') or [])))}")  # not st.code: its highlighter costs the browser ~0.4 s a page
    if r.get("error"):
        st.error(f"The script failed: {fmt.md(r['error'])}")
    for warning in r.get("warnings") or []:
        st.warning(fmt.md(warning))
    findings, problem = data.advice(ref)
    fired = sum(f["outcome"] == "fired" for f in findings or [])
    parts: list[tuple[str, Callable[[], None]]] = [
        ("Overview", lambda: _overview(doc, ref)),
        (f"Advice ({fired})" if findings is not None else "Advice", lambda: advice_tab.render(findings, problem, data.advice_summary(ref))),
    ]
    if doc.get("hosts"):  # a multi-process job
        parts.append((f"Hosts ({len(doc['hosts'])})", lambda: hosts_tab.render(doc, ref)))
    parts += [
        ("Memory", lambda: _memory(doc, ref)), ("Ops & fusion", lambda: _ops(doc)), ("Compiles", lambda: _compiles(doc)),
        ("Trace", lambda: _trace(doc, ref)), ("Config", lambda: _config(ref)), ("Downloads", lambda: _downloads(doc, ref)),
    ]  # fmt: skip
    widgets.lazy_tabs(parts, key="run_tab")
