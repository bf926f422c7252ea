"""Terminal rendering of the advisor's findings (`tpu-perf advise`, and the report's Advice section)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from tpu_perf.views.format import PlainTable as Table

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}
OUTCOME_STYLE = {"fired": "bold", "passed": "green", "not_evaluable": "dim"}


KIND_WORDS = {"estimate": "estimate", "upper_bound": "upper bound", "none": "no estimate"}


def gain_text(gain: dict[str, Any] | None) -> str:
    """`1.42x step time (upper bound)`, or a compile-time / memory finding's own figure."""
    gain = gain or {}
    factor, kind = gain.get("factor"), KIND_WORDS.get(gain.get("kind") or "", "")
    said = f" ({kind})" if kind else ""  # no "()" when the kind is not given
    if factor is not None:
        return f"{factor:.2f}x step time{said}"
    amount, unit = gain.get("amount"), gain.get("unit")
    if amount is not None and unit == "compile_s":
        return f"{amount:.3g} s of compiles{said}"
    if amount is not None and unit == "bytes":
        return f"{amount / 2**20:.4g} MiB of memory{said}"
    if amount is not None and unit == "tokens_per_s_factor":
        return f"{amount:.2f}x generated tokens/s{said}"
    return "n/a" if not gain else f"n/a ({gain.get('benefit', 'step_time').replace('_', ' ')})"


def _split(findings: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(fired step-time findings, fired "also" findings: compile time, memory, throughput, risk)."""
    fired = [f for f in findings if f["outcome"] == "fired"]
    also = [f for f in fired if (f.get("expected_gain") or {}).get("benefit", "step_time") != "step_time"]
    return [f for f in fired if f not in also], also


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "n/a" if v is None else str(v)


def render_finding(f: dict[str, Any]) -> RenderableType:
    head = Text.assemble((f"[{f['severity']}] ", SEVERITY_STYLE[f["severity"]]), (f["id"], "bold"), f"  {f['title']}")
    lines: list[RenderableType] = [head, Text(f"  why: {f['reason']}")]
    gain = f.get("expected_gain")
    if gain:
        lines.append(Text(f"  expected gain: {gain_text(gain)}: {gain['basis']}"))
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
    step, also = _split(findings)
    target = f"judged for {doc['target']} ({doc['target_from']})" if doc.get("target") else "no target chip (hardware rules need --target CHIP on non-TPU runs)"
    parts: list[RenderableType] = [Text(f"advice for {doc['run']['name']} ({doc['run']['id']}): {len(step) + len(also)} of {len(findings)} rules fired; {target}", style="bold")]
    parts += [render_finding(f) for f in step] or [Text("no step-time finding fired", style="green")]
    if also:
        parts.append(Text("also (not step time: compile time, memory, throughput or risk, each with its own figure):", style="bold"))
        parts += [render_finding(f) for f in also]
    if doc.get("conclusion"):
        parts.append(Text(doc["conclusion"], style="bold green" if doc.get("nothing_left") else "bold"))
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


def render_advice_section(advice: dict[str, Any]) -> RenderableType:
    """The report's short Advice section: the top step-time findings and the "also" list, one line
    each, and the conclusion (`report_advice`)."""
    table = Table(title="Advice (tpu-perf advise RUN for evidence and fixes)", title_justify="left", caption=advice.get("conclusion"), caption_justify="left")
    for col in ("finding", "severity", "expected gain", "why"):
        table.add_column(col)
    for f in advice["top"]:
        table.add_row(f["id"], Text(f["severity"], style=SEVERITY_STYLE[f["severity"]]), gain_text(f.get("expected_gain")), f["reason"])
    for f in advice["also"]:
        table.add_row(f"also: {f['id']}", Text(f["severity"], style=SEVERITY_STYLE[f["severity"]]), gain_text(f.get("expected_gain")), f["reason"])
    if not advice["top"] and not advice["also"]:
        table.add_row("none fired", "", "", "")
    return table
