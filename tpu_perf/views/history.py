"""Renders a `History`: the JSON document, a terminal table, and Markdown for a CI job summary."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tpu_perf.analyzers.history import DETECTABLE_STEP, ChangePoint, History, Series
from tpu_perf.views import format as fmt


def value_text(value: float | None, unit: str) -> str:
    if unit == "seconds":
        return fmt.seconds(value)
    if unit == "bytes":
        return fmt.bytes_(value)
    if unit == "fraction":
        return fmt.percent(value)
    return fmt.number(value)


def history_doc(history: History) -> dict[str, Any]:
    """The `--json` document: series (points, change points), a flat `change_points` list with
    each one's series index, excluded runs, notes and the detector's settings."""
    series = []
    for i, s in enumerate(history.series):
        series.append({
            "index": i, "fingerprint_key": s.fingerprint_key, "fingerprint": dict(s.fingerprint), "differs": list(s.differs), "note": s.note,
            "noise": s.noise, "detectable_change": s.detectable,
            "points": [{"key": p.key, "value": p.value, "low": p.low, "high": p.high, "n": p.n, "runs": list(p.runs), "started_at": p.started_at} for p in s.points],
            "change_points": [_change_doc(cp) for cp in s.change_points],
        })
    return {
        "metric": history.metric, "column": history.column, "unit": history.unit, "order_by": history.order_by,
        "series": series, "change_points": [{"series": i, **_change_doc(cp)} for i, cp in history.change_points],
        "excluded": [dict(e) for e in history.excluded], "notes": list(history.notes), "detector": dict(history.detector),
    }


def _change_doc(cp: ChangePoint) -> dict[str, Any]:
    return {"at": cp.at, "previous": cp.previous, "run": cp.run, "index": cp.index, "before": cp.before, "after": cp.after, "change": cp.change, "p_value": cp.p_value}


def _changes_line(cp: ChangePoint, unit: str) -> str:
    return f"{cp.previous} → {cp.at}: {value_text(cp.before, unit)} → {value_text(cp.after, unit)} ({cp.change:+.1%}, p={cp.p_value:.3f}), first run {cp.run}"


def noise_line(s: Series) -> str | None:
    """"noise 28.0 % point to point; the smallest step this series finds 80 % of the time: ±58.1 %
    (in its middle; a change in its last few points needs more)"; None when the noise is unknown."""
    if s.noise is None:
        return None
    first = min(DETECTABLE_STEP)
    if s.detectable is None:
        return f"noise {s.noise * 100:.1f} % point to point; with {len(s.points)} points no change point can be significant: a series needs {first} or more"
    bound = "≤ " if len(s.points) > max(DETECTABLE_STEP) else ""
    return f"noise {s.noise * 100:.1f} % point to point; the smallest step this series finds 80 % of the time: {bound}±{s.detectable * 100:.1f} % (in its middle; a change in its last few points needs more)"


def render_history(history: History) -> Group:
    parts: list[Any] = []
    for i, s in enumerate(history.series):
        marks = {cp.index for cp in s.change_points}
        title = f"{history.metric} by {history.order_by}, series {i + 1}/{len(history.series)}" + (f" (differs in {', '.join(s.differs)})" if s.differs else "")
        table = Table(title=title, title_justify="left")
        for col in ("", history.order_by.replace("tag:", ""), history.metric, "spread", "runs"):
            table.add_column(col)
        for j, p in enumerate(s.points):
            spread = f"{value_text(p.low, history.unit)}–{value_text(p.high, history.unit)}" if p.n > 1 else ""
            table.add_row("▲" if j in marks else "", p.key, value_text(p.value, history.unit), spread, str(p.n))
        parts.append(table)
        parts += [Text(f"change point: {_changes_line(cp, history.unit)}", style="bold yellow") for cp in s.change_points]
        noise = noise_line(s)
        if not s.change_points:
            parts.append(Text((s.note or "no change point") + (f": {noise}" if noise else "")))
        elif noise:
            parts.append(Text(noise, style="dim"))
    parts += [Text(f"note: {note}") for note in history.notes]
    if history.excluded:
        parts.append(Text(f"{len(history.excluded)} run(s) left out: " + "; ".join(f"{e['run']} ({e['reason']})" for e in history.excluded[:5]) + (" ..." if len(history.excluded) > 5 else ""), style="dim"))
    if not history.series:
        parts.append(Text("no run has this metric; nothing to show"))
    return Group(*parts)


def render_markdown(history: History) -> str:
    """Markdown for $GITHUB_STEP_SUMMARY: the change points first, then each series' points."""
    lines = [f"## tpu-perf history: {history.metric} by {history.order_by}", ""]
    changes = history.change_points
    if changes:
        lines += ["| series | change (commit range) | before | after | change | p-value | first run |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {i + 1} | {cp.previous} → **{cp.at}** | {value_text(cp.before, history.unit)} | {value_text(cp.after, history.unit)} | {cp.change:+.1%} | {cp.p_value:.3f} | `{cp.run}` |" for i, cp in changes]
    else:
        lines.append("No change point.")
    lines += [f"- series {i + 1}: {line}" for i, s in enumerate(history.series) if (line := noise_line(s))]
    for note in history.notes:
        lines += ["", f"> {note}"]
    for i, s in enumerate(history.series):
        marks = {cp.index for cp in s.change_points}
        lines += ["", f"<details><summary>series {i + 1}: {len(s.points)} points" + (f", differs in {', '.join(s.differs)}" if s.differs else "") + "</summary>", "", "| key | value | spread | runs |", "|---|---|---|---|"]
        for j, p in enumerate(s.points):
            spread = f"{value_text(p.low, history.unit)}–{value_text(p.high, history.unit)}" if p.n > 1 else ""
            lines.append(f"| {'▲ ' if j in marks else ''}{p.key} | {value_text(p.value, history.unit)} | {spread} | {p.n} |")
        lines += ["", "</details>"]
    if history.excluded:
        lines += ["", f"{len(history.excluded)} run(s) left out (not completed, damaged, or without the metric or the order key)."]
    return "\n".join(lines) + "\n"
