"""Compare page: two or more runs side by side, each number against a baseline run."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.analyzers import breakdown_compare, compare, ops_compare, verdict
from tpu_perf.analyzers.run_values import fingerprint
from tpu_perf.dashboard import (
    at_peak,
    data,
    export,
    figures,
    kpi_table,
    shape,
    state,
    step_charts,
    tables,
    why,
    widgets,
)


def _pick(refs: list[data.RunRef]) -> list[data.RunRef]:
    """The URL's runs (ids, unique prefixes or names) and the runs page's selection; each entry that
    names no single run stays in the URL and on the page as an error naming it."""
    by_id = {r.id: r for r in refs}
    wanted, unknown = [], []
    for asked in state.selected_ids("runs"):
        ref, problem = data.resolve(refs, asked, data.store_location())
        if ref is None:
            unknown.append(asked)
            widgets.error_card(f"Run '{asked}' from the URL cannot be compared", problem or "unknown run")
        elif ref.id not in wanted:
            wanted.append(ref.id)
    chosen = st.multiselect("Runs to compare", list(by_id), default=wanted, format_func=lambda i: f"{by_id[i].name} · {i}", key="compare_runs", placeholder="pick two or more runs")
    st.query_params["runs"] = ",".join(chosen + unknown)
    return [by_id[i] for i in chosen]


def _load(chosen: list[data.RunRef]) -> tuple[dict[str, dict[str, Any]], dict[str, data.RunRef]]:
    """Report documents by display label; runs that fail to load get an error card and are left out."""
    labels = compare.labels_for([(r.id, r.name) for r in chosen])
    docs, refs = {}, {}
    data.load_reports(chosen)  # runs not loaded before: in parallel
    for label, ref in zip(labels, chosen, strict=True):
        doc, error = data.report(ref)
        if doc is None:
            widgets.error_card(f"Run {ref.name} ({ref.id}) cannot be loaded", error or "unknown error")
            continue
        docs[label], refs[label] = doc, ref
    return docs, refs


def _header(doc: dict[str, Any]) -> str:
    chip = data.dig(doc, "flops.chip") or data.dig(doc, "run.hardware.device_kind") or "unknown chip"
    frameworks = ", ".join(data.dig(doc, "run.frameworks") or []) or "no framework"
    n, c = compare.devices(doc), compare.chips(doc)
    count = "?" if n is None else f"{n}" if c in (None, n) else f"{n} devices ({c:g} chips)"
    return f"{doc['run']['status']} · {chip} × {count} · {frameworks} · {doc['run']['id']}"


def _verdict(docs: dict[str, dict[str, Any]], refs: dict[str, data.RunRef], baseline: str) -> tuple[list[export.Checked], str | None]:
    """First thing on the page: is it fair, and which run is faster per step, by how much: the
    sentence read off `tpu-perf check`'s own result for the same runs (`export.checks`).
    Returns the checks (for the export and the colours) and the like-for-like banner."""
    fingerprints = {label: fingerprint(data.open_run(ref.url, ref.stamp)) for label, ref in refs.items()}
    mismatch = verdict.mismatch_text(verdict.differing_fields(fingerprints))
    if mismatch:
        st.warning(mismatch, icon=":material/warning:")
    checked = export.checks(docs, refs, baseline)
    with st.container(border=True, key="verdict"):
        for c in checked:
            if c.sentence.kind == "not_compared":
                st.error(c.sentence.text, icon=":material/block:")
            elif c.sentence.headline:  # who is faster, by how much, on what basis; the evidence behind it
                basis = verdict.BASIS_WORDS.get(c.sentence.basis or "", c.sentence.basis)
                st.markdown(f"**{c.sentence.headline}**" + (f" · on {basis.split(' (')[0]}" if basis else ""))
                st.expander("How this was decided").markdown(c.sentence.text)
            else:
                st.markdown(f"**{c.sentence.text}**")
            if c.groups:
                text = verdict.group_sentence(c.baseline, c.candidate, c.result)
                (st.error if c.result.exit_code else st.success)(text, icon=":material/rule:")
        st.caption(_how(checked))
    return checked, mismatch


def _how(checked: list[export.Checked]) -> str:
    """How the interval was made, in one line (the same engine and margin as `tpu-perf check`)."""
    margin = f"{checked[0].result.options.margin:.0%}" if checked else "3 %"
    if any(c.groups for c in checked):
        return f"The verdict is `tpu-perf check`'s: Welch on the logs of per-run values of the repeat groups, {margin} margin."
    return (f"The verdict is `tpu-perf check`'s on one run a side: an interval over each run's steps by batch means (contiguous batches, so "
            f"correlated steps do not shrink it), {margin} margin; run-to-run noise is not in it (`tpu-perf record --repeat N` measures that).")


def _export(checked: list[export.Checked], refs: dict[str, data.RunRef], baseline: str, said: tuple[list[str], str | None], rows: pd.DataFrame) -> None:
    """Markdown (the verdict and `tpu-perf check`'s table) and CSV (every KPI), built on click."""
    ids = {label: ref.id for label, ref in refs.items()}
    stem = "-vs-".join(ref.id for ref in refs.values()) if len(refs) <= 3 else f"{len(refs)}-runs"
    left, right, _ = st.columns([2, 2, 3])
    left.download_button(
        "Export as Markdown", lambda: export.comparison_markdown(said[0], checked, ids, said[1]),
        file_name=f"compare-{stem}.md", mime="text/markdown", key="export_md", icon=":material/download:", on_click="ignore",
        help="The verdict, then `tpu-perf check`'s Markdown table for each run (or repeat group) against the baseline: what `tpu-perf check --markdown` writes",
    )  # fmt: skip
    right.download_button("Export as CSV", lambda: export.comparison_csv(rows, ids, baseline), file_name=f"compare-{stem}.csv", mime="text/csv", key="export_csv", icon=":material/download:", on_click="ignore", help="every KPI of every run in SI units (s, bytes, fraction) with its change against the baseline")


def _kpis(docs: dict[str, dict[str, Any]], baseline: str, checked: list[export.Checked]) -> pd.DataFrame:
    """The KPI table, its deltas coloured only where the verdict can claim them; returns its rows (for the CSV export)."""
    price = float(st.session_state.get(state.PRICE) or 0.0) or None
    rows = shape.kpi_rows(docs, baseline, price)
    if not rows.empty:
        rows["claim"] = export.claims(rows, checked)
    unusable = {label for label, doc in docs.items() if doc["run"]["status"] in verdict.NO_DELTA_STATUSES}
    if unusable and not rows.empty:  # no "93.9 % better" on a run that broke: no delta at all
        rows.loc[rows["run"].isin(unusable) | (baseline in unusable), "delta"] = None
    st.html(kpi_table.kpi_table_html(rows, list(docs), {label: _header(doc) for label, doc in docs.items()}, baseline))
    if price and all(compare.cost_per_million_tokens(d, price) is None for d in docs.values()):
        st.caption("Cost per million tokens needs tokens per step: record with `--tokens-per-step N`.")
    elif not price:
        st.caption("Set a price per chip-hour in the sidebar to see cost per million tokens.")
    return rows


def _steps(docs: dict[str, dict[str, Any]], refs: dict[str, data.RunRef]) -> None:
    runs = tuple(step_charts.source(label, refs[label], doc) for label, doc in docs.items())
    if step_charts.step_charts(runs, True, "step") is None:
        widgets.missing("Steps", "None of these runs recorded a step.")
        return
    log, x = widgets.step_axes("cmp")
    times, distribution = step_charts.step_charts(runs, log, x)
    left, right = st.columns(2)
    left.plotly_chart(times, width="stretch", key="cmp_steps")
    right.plotly_chart(distribution, width="stretch", key="cmp_dist")


def _memory(docs: dict[str, dict[str, Any]], refs: dict[str, data.RunRef]) -> None:
    frames = [(label, data.memory_frame(ref.url, ref.stamp)) for label, ref in refs.items()]
    device = [(label, f[f["device"] != "host"] if not f.empty else f) for label, f in frames]  # every run: colours by position
    if any(not f.empty for _, f in device):
        st.plotly_chart(figures.memory_band(device), width="stretch", key="cmp_hbm")
    else:
        widgets.missing("Device memory samples", "These runs have no device memory time series (CPU runs have none; TPU/GPU runs sample it).")
        host = [(label, f[f["device"] == "host"] if not f.empty else f) for label, f in frames]
        if any(not f.empty for _, f in host):
            st.plotly_chart(figures.memory_band(host, title="Host memory (RSS) instead"), width="stretch", key="cmp_host")
    at_peak.render_compare(docs)


def breakdown_fractions(doc: dict[str, Any]) -> dict[str, float] | None:
    """The report's `breakdown` as {part: fraction} (`breakdown_compare.fractions`); None without one."""
    return breakdown_compare.fractions(doc) or None


def ops_table_view(ops: pd.DataFrame, labels: list[str], per: str = "step") -> tuple[pd.DataFrame, dict[str, Any]]:
    """`ops_compare.ops_side_by_side` as shown: ms per step per device, % of step, change, each in
    its unit and `n/a` where unknown (a run without the op, an import with no steps), names
    shortened (the full names in the last column), with a column header and help for each."""
    shown = ops.drop(columns=[c for c in ops.columns if str(c).endswith("% of step") and ops[c].isna().all()])
    config: dict[str, Any] = {
        "ops": st.column_config.TextColumn("full name(s)", help="the ops each row holds, full names"),
        "what": st.column_config.TextColumn("kind", help="op class · fusion kind (or trace category)"),
        "bound": st.column_config.TextColumn("bound", help="compute- or memory-bound against the chip's roofline ridge point; n/a where the op's FLOPs and bytes or the chip's peaks are unknown"),
    }
    formats: dict[str, Any] = {}
    unit = "ms/step/device" if per == "step" else "ms/device, whole trace"
    for label in labels:
        if label in shown:
            formats[label] = tables.ms
            what = "time per step on one device (the trace window's total / steps / devices)" if per == "step" else "time on one device over the whole trace (total / devices)"
            config[label] = st.column_config.TextColumn(f"{label} ({unit})", help=f"{what}; n/a: the run has no such op, or no steps")
            formats[f"{label} % of step"] = tables.share
            config[f"{label} % of step"] = st.column_config.TextColumn(help="of the run's step time; n/a without a step time, or where the row's ops nest inside each other (CPU ops of a PyTorch trace) and add up to more than the step")
    for column in shown.columns:
        if str(column).startswith("Δ"):
            formats[column] = tables.change
            config[column] = st.column_config.TextColumn(help="change of the time per step against the baseline; n/a where either run lacks the op")
    shown = tables.as_text(shown, formats)
    shown.index = [ops_compare.short_name(str(i)) for i in shown.index]
    shown.index.name = "op"
    return shown, config


def _ops(docs: dict[str, dict[str, Any]], baseline: str) -> None:
    digests = {doc.get("program_hash") for doc in docs.values()}  # the report's, as `check` reads it
    same = len(digests) == 1 and None not in digests
    ops = ops_compare.ops_side_by_side(docs, baseline, same_program=same)
    stepless = [label for label, doc in docs.items() if not ops_compare.has_steps(doc)]
    if stepless:
        st.caption(f"{', '.join(stepless)}: no steps in the trace, so no time per step and no column here (a run's page lists its ops over the whole trace).")
    if baseline in stepless and len(stepless) < len(docs):
        st.caption(f"No change per op: the baseline {baseline} has no steps; pick a baseline with steps to see one.")
    if ops.empty:
        widgets.missing("Per-op times per step", "They come from the trace window's steps (ops.top in the report).")
    else:
        st.caption("Matched by HLO name: every run ran the same step program." if same else "Matched by what they are (op class · fusion kind or trace category): the runs ran different step programs, whose HLO names are numbered apart.")
        table, config = ops_table_view(ops, list(docs))
        st.dataframe(table, column_config=config, width="stretch", key="cmp_ops_table")
        st.plotly_chart(figures.top_ops(ops, list(docs)), width="stretch", key="cmp_ops")


def _fusion(docs: dict[str, dict[str, Any]]) -> None:
    fusion = compare.fusion_side_by_side(docs)
    if fusion.empty:
        widgets.missing("Fusion summaries", "They come from the step program's optimized HLO (JAX runs save it).")
        return
    left, right = st.columns(2)
    left.dataframe(fusion, width="stretch", key="cmp_fusion_table")
    by_kind = {label: doc["hlo"].get("fusions_by_kind") or {} for label, doc in docs.items() if (doc.get("hlo") or {}).get("fusions") is not None}
    right.plotly_chart(figures.fusion_bars(by_kind, list(docs)), width="stretch", key="cmp_fusion")


def render() -> None:
    st.title("Compare runs")
    refs, errors = data.list_refs(data.store_location())
    for message in errors:
        widgets.error_card("A run folder cannot be read", message)
    chosen = _pick(refs)
    if len(chosen) < 2:
        st.info("Pick two or more runs here, or select them on the Runs page.")
        return
    docs, loaded = _load(chosen)
    if len(docs) < 2:
        st.warning("Fewer than two of the chosen runs could be loaded; nothing to compare.")
        return
    labels = list(docs)
    oldest = min(range(len(labels)), key=lambda i: (data.dig(docs[labels[i]], "run.started_at") or float("inf"), i))
    baseline = st.selectbox("Baseline (deltas are relative to it; the oldest run unless picked)", labels, index=oldest, key="compare_baseline")
    checked, mismatch = _verdict(docs, loaded, baseline)
    said = ([c.sentence.text for c in checked], mismatch)
    why.render(docs, loaded, baseline, basis=checked[0].result.basis if checked else None)
    rows = _kpis(docs, baseline, checked)
    _export(checked, loaded, baseline, said, rows)
    widgets.lazy_tabs([
        ("Step time", lambda: _steps(docs, loaded)), ("Memory", lambda: _memory(docs, loaded)),
        ("Top ops", lambda: _ops(docs, baseline)), ("Fusion", lambda: _fusion(docs)),
    ], key="compare_tab")  # fmt: skip
