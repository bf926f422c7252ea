"""Renderings of a check's verdict: terminal table, Markdown summary, JUnit XML, GitHub annotations.

All from one `CheckResult`, so the exit code, the JUnit failures, the annotations and the Markdown
never disagree: REGRESSION, BAD_DATA and NOT_COMPARABLE are failures everywhere; INCONCLUSIVE is a
failure (exit 3, a JUnit failure, an ::error) unless `--inconclusive-ok` makes it exit 0, and then a
skip and a ::warning (`failing`). A JUnit file has failures exactly when the exit code is not 0.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from rich import box
from rich.console import Group, RenderableType
from rich.text import Text

from tpu_perf.analyzers.regression import CheckResult
from tpu_perf.analyzers.verdicts import PRECEDENCE, Check, Verdict
from tpu_perf.views import format as fmt
from tpu_perf.views.check_words import author_summary
from tpu_perf.views.format import PlainTable as Table

STYLE: dict[Verdict, str] = {
    Verdict.PASS: "green", Verdict.IMPROVEMENT: "bold green", Verdict.CHANGED: "cyan", Verdict.UNCHANGED: "green",
    Verdict.INCONCLUSIVE: "yellow", Verdict.REGRESSION: "bold red", Verdict.BAD_DATA: "magenta",
    Verdict.NOT_COMPARABLE: "bold magenta",
}
FAILURES = (Verdict.REGRESSION, Verdict.BAD_DATA, Verdict.NOT_COMPARABLE)
ICON: dict[Verdict, str] = {
    Verdict.PASS: "✅", Verdict.IMPROVEMENT: "🚀", Verdict.CHANGED: "🔁", Verdict.UNCHANGED: "🟰", Verdict.INCONCLUSIVE: "❔",
    Verdict.REGRESSION: "❌", Verdict.BAD_DATA: "⚠️", Verdict.NOT_COMPARABLE: "🚫",
}


def value(check: Check, number: float | None) -> str:
    """One per-run value in the check's unit; n/a when unknown."""
    if number is None:
        return "n/a"
    if check.unit == "s":
        return fmt.seconds(number)
    if check.unit == "bytes":
        return fmt.bytes_(number)
    if check.unit == "fraction":
        return fmt.percent(number, 2)
    return f"{number:,.4g}"


def change(check: Check) -> str:
    """The ratio as a signed percentage with its interval, e.g. `+10.2 % [+8.1, +12.4]`."""
    if check.ratio is None:
        return "n/a" if check.baseline else ""
    text = f"{(check.ratio - 1) * 100:+.1f} %"
    if check.low is not None and check.high is not None:
        text += f" [{(check.low - 1) * 100:+.1f}, {(check.high - 1) * 100:+.1f}]"
    return text


def cvs(check: Check) -> str:
    if check.baseline_cv is None and check.candidate_cv is None:
        return ""
    return f"{fmt.percent(check.baseline_cv)} / {fmt.percent(check.candidate_cv)}"


def summary(check: Check, center: float | None, side: tuple[float | None, ...]) -> str:
    """A side in one cell: its summary value and how many runs, e.g. `1.37 ms ×5`."""
    return f"{value(check, center)} ×{len(side)}" if side else ""


def values(check: Check, side: tuple[float | None, ...]) -> str:
    return ", ".join(value(check, v) for v in side) if side else ""


def shown_verdict(check: Check) -> str:
    """The check's verdict, in brackets when it does not decide the overall one (a steady metric on the all-in basis)."""
    return check.verdict.value if check.decides else f"({check.verdict.value}, not deciding)"


def render_check(result: CheckResult) -> RenderableType:
    """The terminal view: the verdict first, then one row per check."""
    head = Text.assemble(Text(f" {result.verdict.value} ", style=f"reverse {STYLE[result.verdict]}"), f"  exit {result.exit_code}  ", f"{len(result.baseline_runs)} baseline vs {len(result.candidate_runs)} candidate runs")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("check", "verdict", "baseline", "candidate", "change", "CV b/c"):
        table.add_column(col, no_wrap=True)
    for c in result.checks:
        if not (c.baseline or c.candidate):
            table.add_row(c.name, Text(shown_verdict(c), style=STYLE[c.verdict] if c.decides else "dim"))
            continue
        cv = "/".join("n/a" if v is None else f"{v * 100:.1f}" for v in (c.baseline_cv, c.candidate_cv)) + "%" if c.baseline_cv is not None or c.candidate_cv is not None else ""
        ratio = "n/a" if c.ratio is None else f"{(c.ratio - 1) * 100:+.1f}%"
        table.add_row(c.name, Text(shown_verdict(c), style=STYLE[c.verdict] if c.decides else "dim"), value(c, c.baseline_value), value(c, c.candidate_value), ratio, cv)
    notes = Text("\n".join(f"{c.name}: {c.message}" for c in result.checks))
    return Group(head, *([Text(result.sentence)] if result.sentence else []), table, notes)


def render_markdown(result: CheckResult) -> str:
    """A table a reviewer reads in five seconds: verdict first, then checks, worst first."""
    order = {v: i for i, v in enumerate(PRECEDENCE)}
    lines = [
        f"### {ICON[result.verdict]} tpu-perf check: **{result.verdict.value}** (exit {result.exit_code})",
        "",
        f"{len(result.baseline_runs)} baseline vs {len(result.candidate_runs)} candidate runs; margin {result.options.margin:.0%}, alpha {result.options.alpha}, max CV {result.options.max_cv:.0%}.",
        "",
        *([f"**{result.sentence}**", ""] if result.sentence else []),
        *([f"Timing: {fmt.md(result.timing_reason)}.", ""] if result.timing_reason else []),
        *author_summary(result),
        "| check | verdict | baseline | candidate | change [interval] | CV base / cand | detail |",
        "|---|---|---|---|---|---|---|",
    ]
    for check in sorted(result.checks, key=lambda c: (not c.decides, order[c.verdict])):
        detail = fmt.md(check.message)
        lines.append(f"| {check.name} | {ICON[check.verdict] if check.decides else ''} {shown_verdict(check)} | {summary(check, check.baseline_value, check.baseline)} | {summary(check, check.candidate_value, check.candidate)} | {change(check)} | {cvs(check)} | {detail} |")
    return "\n".join(lines) + "\n"


def failing(result: CheckResult) -> tuple[Verdict, ...]:
    """The verdicts that fail the build for this result: FAILURES, plus INCONCLUSIVE when it exits
    non-zero (3; not with --inconclusive-ok)."""
    return (*FAILURES, Verdict.INCONCLUSIVE) if result.exit_code != 0 else FAILURES


def render_junit(result: CheckResult) -> str:
    """JUnit XML, one testcase per check; failures and skips agree with the exit code."""
    fail = failing(result)
    failures = sum(c.verdict in fail and c.decides for c in result.checks)
    skipped = sum(c.verdict == Verdict.INCONCLUSIVE and c.verdict not in fail and c.decides for c in result.checks)
    suite = ET.Element("testsuite", name="tpu-perf check", tests=str(len(result.checks)), failures=str(failures), errors="0", skipped=str(skipped))
    if result.timing_reason:  # which clock timed the steps (`--timing cpu`), and why
        ET.SubElement(ET.SubElement(suite, "properties"), "property", name="timing", value=result.timing_reason)
    for check in result.checks:
        case = ET.SubElement(suite, "testcase", classname="tpu-perf.check", name=check.name)
        text = check.message + (f"\nbaseline: {values(check, check.baseline)}\ncandidate: {values(check, check.candidate)}" if check.baseline else "")
        if check.verdict in fail and check.decides:
            ET.SubElement(case, "failure", type=check.verdict.value, message=check.message).text = text
        elif check.verdict == Verdict.INCONCLUSIVE and check.decides:
            ET.SubElement(case, "skipped", message=f"INCONCLUSIVE: {check.message}")
        else:
            ET.SubElement(case, "system-out").text = f"{check.verdict.value}: {text}"
    root = ET.Element("testsuites", name="tpu-perf", tests=suite.get("tests", "0"), failures=str(failures), errors="0", skipped=str(skipped))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def github_annotations(result: CheckResult) -> list[str]:
    """`::error` for failures (`failing`), `::warning` for CHANGED and an allowed INCONCLUSIVE."""
    lines, fail = [], failing(result)
    for check in (c for c in result.checks if c.decides):
        level = "error" if check.verdict in fail else "warning" if check.verdict in (Verdict.INCONCLUSIVE, Verdict.CHANGED, Verdict.UNCHANGED) else None
        if level:
            message = _escape(f"{check.verdict.value}: {check.message}")
            lines.append(f"::{level} title={_escape(f'tpu-perf check {check.name}', prop=True)}::{message}")
    return lines


def _escape(text: str, *, prop: bool = False) -> str:
    """GitHub workflow-command escaping (`%`, CR, LF; plus `:` and `,` in properties)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text
