"""Number formatting for people: units always shown, "n/a" only here, never in data. Times are
`units.seconds` (shared with the analyzers' own sentences, so a time reads the same everywhere)."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from tpu_perf.text import printable
from tpu_perf.units import seconds

if TYPE_CHECKING:
    from tpu_perf.analyzers.steps import StepStats

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~$#])")


def md(text: object) -> str:
    """User text (a run name, tag, path, error message) as Markdown that shows it literally: every
    character Markdown, tables, HTML or LaTeX (Streamlit) would act on is backslash-escaped, and
    control characters, bidi controls and lone surrogates are written as escapes (`tpu_perf.text`)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", printable(str(text), multiline=True))


def md_code(text: object) -> str:
    """User text (a path, an id) as a Markdown code span, shown literally; `md()` where the text
    itself holds a backtick (it would end the span)."""
    text = printable(str(text), multiline=True)
    return f"`{text}`" if "`" not in text and text.strip() == text and text else md(text)


def step_time(steps: StepStats) -> str:
    """The run's headline step time in one phrase, with its basis (the summary after `record`, a
    notebook handle): `StepStats.step_s`, the one every surface shows."""
    if steps.step_s is None:
        return "step time n/a (no steady step)"
    if steps.step_basis == "all-in":
        return (f"step time {seconds(steps.step_s)} (all-in: {steps.step_basis_reason}; "
                f"steady {steps.steady_basis} {seconds(steps.steady_step_s)})")
    if steps.runs_ahead:
        return (f"step time {seconds(steps.step_s)} ({steps.step_basis}: the loop runs ahead of the device; "
                f"median iteration {seconds(steps.iteration_median_s)})")
    return f"step time {seconds(steps.step_s)} (median iteration)"


def bytes_(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value} B"


def flops(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} FLOP"


def percent(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value * 100:.{digits}f} %"


def number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def timestamp(epoch: float | None) -> str:
    if epoch is None:
        return "n/a"
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


class PlainTable(Table):
    """A rich Table whose string cells and title are shown as written: a run name, function name
    or error message such as `[bold]x[/]` or `[/]` is text, never console markup."""

    def __init__(self, *args: Any, title: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, title=Text(title) if isinstance(title, str) else title, **kwargs)

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(Text(r) if isinstance(r, str) else r for r in renderables), **kwargs)
