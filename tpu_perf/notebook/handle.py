"""What `tpu_perf.record()` gives back, and the notebook's views of runs.

Each view is an object Jupyter displays as HTML (`_repr_html_`) and a terminal as rich text
(`__rich__`), built from the same analyzers and the same rich renderables as the CLI's commands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType

from tpu_perf.notebook import html
from tpu_perf.store import layout


@dataclass(frozen=True)
class View:
    """One displayed result: `renderable()` for a terminal, `html()` for Jupyter; `data` is the
    JSON-ready document behind it (the same as the command's `--json`)."""

    title: str
    renderable: Callable[[], RenderableType]
    parts: Callable[[], list[str]]
    data: Any = None

    def _repr_html_(self) -> str:
        return html.document(self.title, self.parts())

    def __rich__(self) -> RenderableType:
        return self.renderable()

    def __repr__(self) -> str:
        console = Console(record=True, width=120, file=html._Null(), force_jupyter=False)
        console.print(self.renderable())
        return console.export_text().rstrip()


class RunHandle:
    """A recorded run: `id`, `folder` (its URL), `report()`, `advise()`, `load()`."""

    def __init__(self, run_id: str, folder: str, store: str) -> None:
        self.id = run_id
        self.folder = folder
        self.store = store

    def __repr__(self) -> str:
        return f"<tpu-perf run {self.id} in {self.folder}>"

    def load(self) -> Any:
        """The run (`tpu_perf.Run`) as it is on disk now."""
        from tpu_perf.store import load_run

        return load_run(self.folder)

    @property
    def status(self) -> str:
        return str(self.load().status)

    def report(self, *, chart: bool = True, convention: str | None = None) -> View:
        return report_view(self.folder, chart=chart, convention=convention)

    def advise(self, *, target: str | None = None, show_all: bool = False) -> View:
        return advise_view(self.folder, target=target, show_all=show_all)

    def summary_line(self) -> str:
        """One line for the end of a recording: status, steps, median iteration."""
        from tpu_perf.analyzers.report import build_report
        from tpu_perf.errors import TpuPerfError
        from tpu_perf.views.report import one_line

        try:
            report = build_report(self.load(), summary=True)
        except TpuPerfError as exc:
            return f"tpu-perf: run {self.id} saved at {self.folder}, but it cannot be summarised: {exc}"
        warnings = "".join(f"\ntpu-perf: warning: {w}" for w in report.run.warnings)
        return f"tpu-perf: {one_line(report)}; .report() and .advise() show it{warnings}"


def report_view(run: str, *, store: str | None = None, chart: bool = True, convention: str | None = None) -> View:
    """`tpu-perf report RUN` as a view, with the step-time chart after the Steps section."""
    from tpu_perf.advise.document import report_advice
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.commands.options import convention_name
    from tpu_perf.store import load_run
    from tpu_perf.views import report as terminal
    from tpu_perf.views.advice import render_advice_section

    loaded = load_run(run, store=store or layout.default_store())
    report = build_report(loaded, convention=convention_name(convention))
    doc = report.to_dict()
    advice = report_advice(loaded, report)

    def parts() -> list[str]:
        out = []
        for render in terminal.RENDERERS:
            out.append(html.to_html(render(doc)))
            if render is terminal._steps and chart:
                out.append(step_chart([(loaded.name, loaded, report.steps)]))
        return [*out, html.to_html(render_advice_section(advice))]

    return View(f"tpu-perf report: {loaded.name} ({loaded.id})", lambda: Group(terminal.render_report(report), render_advice_section(advice)), parts, {**doc, "advice": advice})


def advise_view(run: str, *, store: str | None = None, target: str | None = None, show_all: bool = False) -> View:
    """`tpu-perf advise RUN` as a view."""
    from tpu_perf.advise import advise
    from tpu_perf.advise.document import advice_document
    from tpu_perf.errors import UsageError
    from tpu_perf.hardware import lookup_chip, unknown_chip_message
    from tpu_perf.store import load_run
    from tpu_perf.views.advice import render_advice

    if target is not None and lookup_chip(target) is None:
        raise UsageError(unknown_chip_message("target", target))
    loaded = load_run(run, store=store or layout.default_store())
    doc = advice_document(loaded, advise(loaded, target=target))
    return View(f"tpu-perf advise: {loaded.name} ({loaded.id})", lambda: render_advice(doc, show_all=show_all), lambda: [html.to_html(render_advice(doc, show_all=show_all))], doc)


def step_chart(runs: Sequence[tuple[str, Any, Any]]) -> str:
    """The dashboard's step-time figure of (label, run, its report's `StepStats`), as offline HTML; a
    line saying why when plotly is not installed (it comes with the `notebook` extra)."""
    from tpu_perf.analyzers.step_phases import step_phases

    try:
        from tpu_perf.dashboard import figures
    except ImportError:
        return html.to_html("step-time chart: n/a (plotly is not installed: pip install 'tpu-perf[notebook]')")
    return html.figure(figures.step_times([(label, step_phases(run, s.warmup, paced=s.steady_basis == "device pace")) for label, run, s in runs]))


def check_view(baseline: str | Sequence[str], candidate: str | Sequence[str], *, store: str | None = None, baseline_store: str | None = None, chart: bool = True, **options: Any) -> View:
    """`tpu-perf check --baseline ... --candidate ...` as a view: the verdict, its table, and the
    step times of both sides on one chart. `options` are `CheckOptions`' (margin, alpha, metrics...)."""
    from tpu_perf.analyzers.regression import CheckOptions, check_sets
    from tpu_perf.commands.check import side_values
    from tpu_perf.errors import TpuPerfError, UsageError
    from tpu_perf.store import load_run
    from tpu_perf.views.check import render_check

    store = store or layout.default_store()
    sides = [[s] if isinstance(s, str) else list(s) for s in (baseline, candidate)]
    try:
        check_options = CheckOptions(**options)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    base = side_values(sides[0], baseline_store or store, flag="baseline")
    cand = side_values(sides[1], store, flag="candidate")
    result = check_sets(base, cand, check_options)

    def parts() -> list[str]:
        out = [html.to_html(render_check(result))]
        runs = []
        for values, where in [(v, baseline_store or store) for v in base] + [(v, store) for v in cand]:
            try:
                runs.append(load_run(values.run_id, store=where))
            except TpuPerfError:  # an entry of a saved baseline file: numbers without a run folder
                continue
        if chart and runs:
            out.append(step_chart([(f"{r.name} ({r.id[:8]})", r, _steps(r)) for r in runs]))
        return out

    title = f"tpu-perf check: {result.verdict.value}"
    return View(title, lambda: render_check(result), parts, result)


def _steps(run: Any) -> Any:
    from tpu_perf.analyzers.steps import analyze_steps

    return analyze_steps(run)


def runs_view(store: str | None = None) -> View:
    """`tpu-perf ls` as a view."""
    from tpu_perf.commands.ls import ls_rows, render_ls
    from tpu_perf.store.writable import check_readable_store

    store = store or layout.default_store()
    check_readable_store(store)
    rows = ls_rows(store)
    return View(f"tpu-perf ls: {len(rows)} runs in {store}", lambda: render_ls(rows, store), lambda: [html.to_html(render_ls(rows, store))], rows)
