"""The compare page's "Why" block, right below the verdict: what the advisor finds on some runs
and not on others, where each step's time went in each run (side by side, with the largest change
named), and the settings that differ.

The numbers are the advisor's findings (`tpu_perf.advise.differ`) and the report's breakdown
(`tpu_perf.analyzers.breakdown_compare`); this module only lays them out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.advise.differ import FindingDiff, compare_findings
from tpu_perf.analyzers import breakdown_compare, compare
from tpu_perf.dashboard import bars, data, differing, html_table, tables, widgets
from tpu_perf.views import format as fmt
from tpu_perf.views.advice import gain_text

SHOWN_FINDINGS = 4
"""Differing findings shown at once; the rest fold into an expander (the first screen stays short)."""
OUTCOME_WORDS = {"passed": "passed", "not_evaluable": "could not be checked"}


GAIN_BASIS: dict[str | None, str] = {
    "all_in_step_time": "the verdict above compares all-in wall time per step, so the two need not match",
    "step_time": "the verdict above compares steady step time",
    None: "no verdict above to compare it with",
}
"""How an advisor's expected gain relates to the verdict's basis, said beside every gain."""


def finding_line(d: FindingDiff, basis: str | None = None) -> tuple[str, str]:
    """One differing finding in Markdown (where it fired, why, the gain) and what the other runs said.
    The gain is the advisor's estimate (`tpu-perf advise` states what it stands on); beside it, the
    verdict's basis, so a 14x gain under a 2x verdict is not read as a contradiction."""
    where = ", ".join(f"**{label}**" for label in d.fired)
    gains = {label: g for label, g in d.gains.items() if g is not None}
    best = max(gains, key=lambda label: gains[label]) if gains else None
    gain = f" Expected gain if fixed on {best}: {gain_text({'factor': gains[best]})}, the advisor's estimate ({GAIN_BASIS.get(basis, GAIN_BASIS[None])})." if best else ""
    reasons = {label: d.reasons[label].rstrip(".") for label in d.fired if d.reasons.get(label)}
    if len(set(reasons.values())) > 1:  # different on each run: say whose
        why = "; ".join(f"{label}: {reason}" for label, reason in reasons.items())
    else:  # the same on every run it fired on: once, not per run
        why = next(iter(reasons.values()), "")
    said: dict[str, list[str]] = {}
    for label, (outcome, reason) in d.others.items():
        said.setdefault(OUTCOME_WORDS.get(outcome, outcome) + (f" ({reason})" if reason else ""), []).append(label)
    others = "; ".join(f"{', '.join(labels)}: {text}" for text, labels in said.items())
    return f"**[{d.severity}] {d.title}** (`{d.id}`) on {where} only: {why}.{gain}", others


def largest_change(table: pd.DataFrame, baseline: str, label: str) -> str | None:
    """"compute (matmul) +3.20 ms per step (+45 %)": the part whose time per step moved most."""
    column = f"{label} s"
    if column not in table or f"{baseline} s" not in table:
        return None
    moved = (table[column] - table[f"{baseline} s"]).dropna()
    if moved.empty or not moved.abs().max() > 0:
        return None
    part = moved.abs().idxmax()
    change = table.loc[part, f"Δ {label}"] if f"Δ {label}" in table else None
    share = "" if change is None or (isinstance(change, float) and math.isnan(change)) else f" ({change * 100:+.0f} %)"
    sign = "+" if moved[part] > 0 else "−"
    return f"{label}: largest change in where the step goes is **{part}**, {sign}{fmt.seconds(abs(float(moved[part])))} per step{share} against {baseline}."


def step_change(docs: Mapping[str, Mapping[str, Any]], baseline: str, label: str) -> str | None:
    """"slow: step time +10.21 ms per step (+31 %) against fast; no per-step breakdown splits it":
    the milliseconds where the breakdown has no time per step (shares of the whole trace only)."""
    a, b = (data.dig(docs[x], "steps.step_s") for x in (baseline, label))
    if a is None or b is None or not a > 0:
        return None
    sign = "+" if b >= a else "−"
    return f"{label}: step time {sign}{fmt.seconds(abs(b - a))} per step ({(b / a - 1) * 100:+.0f} %) against {baseline}; no per-step breakdown splits it."


def settings_beside(manifests: Mapping[str, Mapping[str, Any]], baseline: str, label: str, shown: int = 3) -> str:
    """" Settings that differ: command `… --sleep 0.03` (fast: `… --sleep 0.02`)": the configuration
    that differs between the two runs, beside the change it may explain (each long value by its
    differing part, as the configuration table below shows it)."""
    if baseline not in manifests or label not in manifests:
        return ""
    diff = compare.config_diff({baseline: manifests[baseline], label: manifests[label]})
    if diff.empty:
        return " Same configuration, flags and versions."
    parts = differing.differing_parts(diff, baseline)
    said = [f"{setting} `{row[label]}` ({baseline}: `{row[baseline]}`)" for setting, row in parts.head(shown).iterrows()]
    more = f" and {len(parts) - shown} more" if len(parts) > shown else ""
    return f" Settings that differ: {'; '.join(said)}{more}."


@st.cache_data(max_entries=512, show_spinner=False)
def _settings_between(baseline: str, baseline_url: str, baseline_stamp: float, label: str, url: str, stamp: float) -> str:
    """`settings_beside` of two runs, kept per pair (URLs and stamps): a change of comparison
    compares again only the pairs it has not shown before."""
    manifests = {baseline: data.open_run(baseline_url, baseline_stamp).manifest, label: data.open_run(url, stamp).manifest}
    return settings_beside(manifests, baseline, label)


def _finding(d: FindingDiff, basis: str | None) -> None:
    line, others = finding_line(d, basis)
    st.markdown(line)
    st.caption(others)


def _findings(refs: Mapping[str, data.RunRef], basis: str | None) -> None:
    found: dict[str, list[dict[str, Any]]] = {}
    for label, ref in refs.items():
        findings, problem = data.advice(ref)
        if findings is None:
            st.caption(f"{label}: no advice ({problem or 'unknown reason'}).")
            continue
        found[label] = findings
    if len(found) < 2:
        return
    result = compare_findings(found)
    if not result.differing:
        fired = f" ({', '.join(f'`{r}`' for r in result.everywhere)} fired on every run)" if result.everywhere else ""
        st.markdown(f"The advisor finds the same on every run{fired}: no finding explains the difference.")
        return
    st.markdown("**Advisor findings on some runs only** (`tpu-perf advise RUN` gives each one's evidence and fix):")
    for d in result.differing[:SHOWN_FINDINGS]:
        _finding(d, basis)
    if len(result.differing) > SHOWN_FINDINGS:
        with st.expander(f"{len(result.differing) - SHOWN_FINDINGS} more"):
            for d in result.differing[SHOWN_FINDINGS:]:
                _finding(d, basis)
    if result.everywhere:
        st.caption(f"Fired on every run (no difference): {', '.join(result.everywhere)}.")


def breakdown_view(table: pd.DataFrame, labels: list[str]) -> tuple[pd.DataFrame, dict[str, str], dict[str, str]]:
    """`breakdown_side_by_side` as shown: ms per step, % of step (or of the whole trace, for a run
    with no per-step rows), change, each in its unit as text (`n/a` where unknown, never "None"),
    with a header and help per column: (table, {column: header}, {column: help})."""
    headers: dict[str, str] = {}
    helps: dict[str, str] = {}
    formats: dict[str, Any] = {}
    for label in labels:
        if f"{label} s" in table:
            formats[f"{label} s"] = tables.ms
            headers[f"{label} s"], helps[f"{label} s"] = f"{label} (ms/step)", "mean time per traced step in this part (one device lane)"
        if f"{label} %" in table:
            formats[f"{label} %"] = tables.share
            per_step = f"{label} s" in table
            headers[f"{label} %"] = f"{label} % of step" if per_step else f"{label} % of trace"
            helps[f"{label} %"] = "share of the step time" if per_step else "share of the whole trace's time: this run has no per-step breakdown, so no time per step and no change"
        if f"Δ {label}" in table:
            formats[f"Δ {label}"] = tables.change
            headers[f"Δ {label}"], helps[f"Δ {label}"] = f"Δ {label}", "change of the time per step against the baseline; n/a where the baseline spent no time in this part"
    return tables.as_text(table, formats), headers, helps


def whole_trace_words(docs: Mapping[str, Mapping[str, Any]], baseline: str) -> list[str]:
    """What a breakdown of the whole trace leaves out, said once per reason: no time per step and
    no change for those runs, and no change for any run when the baseline is one of them."""
    said: dict[str, list[str]] = {}
    for label, doc in docs.items():
        if breakdown_compare.whole_trace_only(doc):
            said.setdefault(breakdown_compare.whole_trace_reason(doc), []).append(label)
    lines = [f"{', '.join(labels)}: shares of the whole trace only ({reason}), so no time per step and no change against the baseline." for reason, labels in said.items()]
    others = [label for label, doc in docs.items() if label != baseline and breakdown_compare.per_step_parts(doc) is not None]
    if others and baseline in docs and breakdown_compare.whole_trace_only(docs[baseline]):
        lines.append(f"No change per step for {', '.join(others)}: the baseline {baseline} has shares of the whole trace only; pick a baseline with a per-step breakdown to see one.")
    return lines


def _breakdown(docs: Mapping[str, dict[str, Any]], refs: Mapping[str, data.RunRef], baseline: str) -> None:
    table = breakdown_compare.breakdown_side_by_side(docs, baseline)
    base = refs.get(baseline)
    for label in docs:  # the change in ms, and the settings beside it, with or without a breakdown
        if label != baseline:
            said = (None if table.empty else largest_change(table, baseline, label)) or step_change(docs, baseline, label)
            if said:
                ref = refs[label]
                st.markdown(said + (_settings_between(baseline, base.url, base.stamp, label, ref.url, ref.stamp) if base is not None else ""))
    if table.empty:
        widgets.missing("Step-time breakdown", "It comes from the trace window's device timeline; record with a trace window (the default).")
        return
    shown, headers, helps = breakdown_view(table, list(docs))
    st.html(html_table.table_html(shown, index=True, numeric=list(shown.columns), labels=headers, helps=helps))  # scrolls in its box with many runs
    for line in whole_trace_words(docs, baseline):
        st.caption(line)
    for label, doc in docs.items():  # per run: its traced steps ran unlike its step time
        note = (doc.get("breakdown_detail") or {}).get("note")
        if note and not breakdown_compare.whole_trace_only(doc):
            st.caption(f"{label}: {note}.")
    fractions = {label: {p: float(v) for p, v in table[f"{label} %"].dropna().items()} for label in docs if f"{label} %" in table}
    whole = [label for label in fractions if f"{label} s" not in table]
    st.html(bars.breakdown_bars(fractions, whole_trace=whole))
    for label in docs:
        if f"{label} %" not in table:
            st.caption(f"{label}: no breakdown recorded.")


def _config(refs: Mapping[str, data.RunRef], baseline: str) -> None:
    left, right = st.columns(2)
    everything = left.toggle("Show settings that are the same too", key="cmp_all_settings")
    whole = right.toggle("Show long values whole", key="cmp_whole_values", help="by default a long value (a command, a flag string) shows the part that differs from the most alike other run's, the rest as …")
    shown = _config_table(tuple((label, ref.url, ref.stamp) for label, ref in refs.items()), baseline, everything, whole)
    if shown.empty:
        st.success("Same configuration, flags, versions and hardware.")
        return
    what = "the value" if whole else "a long value: the part that differs from the most alike other run's value (the baseline's first), … standing for words equal in both"
    st.html(html_table.table_html(shown, index=True, wrap=list(shown.columns), helps=dict.fromkeys(shown.columns, what)))


@st.cache_data(max_entries=256, show_spinner=False)
def _config_table(runs: tuple[tuple[str, str, float], ...], baseline: str, everything: bool, whole: bool) -> pd.DataFrame:
    """The settings table as shown, per (runs' labels, URLs and stamps, baseline, toggles): a rerun of
    a comparison shown before does not diff its manifests again (3.3 ms of 3 runs' every rerun)."""
    manifests = {label: data.open_run(url, stamp).manifest for label, url, stamp in runs}
    diff = compare.config_diff(manifests, only_different=not everything)
    return diff if whole or diff.empty else differing.differing_parts(diff, baseline)


def render(docs: Mapping[str, dict[str, Any]], refs: Mapping[str, data.RunRef], baseline: str, *, basis: str | None = None) -> None:
    """The block, in its own container (`st-key-why` in the page); `basis`: the verdict's timed metric."""
    with st.container(border=True, key="why"):
        st.subheader("Why")
        _findings(refs, basis)
        st.markdown("**Where each step's time goes**")
        _breakdown(docs, refs, baseline)
        st.markdown("**Configuration and environment**")
        _config(refs, baseline)
