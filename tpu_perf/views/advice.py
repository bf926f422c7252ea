"""Terminal rendering of the advisor's findings (`tpu-perf advise`, and the report's Advice section)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from tpu_perf.views.format import PlainTable as Table

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}
OUTCOME_STYLE = {"fired": "bold", "passed": "green", "not_evaluable": "dim"}


def gain_text(gain: dict[str, Any] | None) -> str:
    factor = (gain or {}).get("factor")
    return "n/a" if factor is None else f"{factor:.2f}x"


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "n/a" if v is None else str(v)


def render_finding(f: dict[str, Any]) -> RenderableType:
    head = Text.assemble((f"[{f['severity']}] ", SEVERITY_STYLE[f["severity"]]), (f["id"], "bold"), f"  {f['title']}")
    lines: list[RenderableType] = [head, Text(f"  why: {f['reason']}")]
    gain = f.get("expected_gain")
    if gain:
        lines.append(Text(f"  expected gain: {gain_text(gain)} step time ({gain['basis']})"))
    if f["evidence"]:
        lines.append(Text("  evidence: " + ", ".join(f"{e['name']}={_value(e['value'])} [{e['source']}]" for e in f["evidence"])))
    fix = f.get("fix") or {}
    if fix:
        lines.append(Text(f"  fix: {fix['summary']}"))
        for label in ("jax", "pytorch"):
            if fix.get(label):
                lines.append(Text(f"    {label}: " + fix[label].replace("\n", "\n      "), style="green"))
    if f.get("docs"):
        lines.append(Text("  docs: " + " ".join(f["docs"]), style="dim"))
    return Group(*lines)


def render_advice(doc: dict[str, Any], *, show_all: bool = False) -> RenderableType:
    """Fired findings in full, ranked; with `show_all`, a table of every rule's outcome after them."""
    findings = doc["findings"]
    fired = [f for f in findings if f["outcome"] == "fired"]
    target = f"judged for {doc['target']} ({doc['target_from']})" if doc.get("target") else "no target chip (hardware rules need --target CHIP on non-TPU runs)"
    parts: list[RenderableType] = [Text(f"advice for {doc['run']['name']} ({doc['run']['id']}): {len(fired)} of {len(findings)} rules fired; {target}", style="bold")]
    parts += [render_finding(f) for f in fired] or [Text("no finding fired", style="green")]
    if show_all:
        table = Table(title="every rule", title_justify="left")
        for col in ("rule", "severity", "outcome", "gain", "reason"):
            table.add_column(col)
        for f in findings:
            table.add_row(f["id"], f["severity"], Text(f["outcome"], style=OUTCOME_STYLE[f["outcome"]]), gain_text(f.get("expected_gain")), f["reason"] or "")
        parts.append(table)
    else:
        counts = {o: sum(f["outcome"] == o for f in findings) for o in ("passed", "not_evaluable")}
        parts.append(Text(f"{counts['passed']} passed, {counts['not_evaluable']} not evaluable (--all lists them with reasons)", style="dim"))
    return Group(*parts)


def render_advice_section(top: list[dict[str, Any]]) -> RenderableType:
    """The report's short Advice section: the top fired findings, one line each."""
    table = Table(title="Advice (tpu-perf advise RUN for evidence and fixes)", title_justify="left")
    for col in ("finding", "severity", "expected gain", "why"):
        table.add_column(col)
    for f in top:
        table.add_row(f["id"], Text(f["severity"], style=SEVERITY_STYLE[f["severity"]]), gain_text(f.get("expected_gain")), f["reason"])
    if not top:
        table.add_row("none fired", "", "", "")
    return table
