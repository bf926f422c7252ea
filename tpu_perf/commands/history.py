"""`tpu-perf history`: a metric over a series of runs (nightly CI), with its change points.

Reads the runs index (`<store>/.index/`), never every run folder: a nightly store holds thousands.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console

from tpu_perf.errors import RunNotFoundError, UsageError
from tpu_perf.store import layout

out = Console()
err = Console(stderr=True, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("history")(history_command)


def select_rows(rows: Sequence[Mapping[str, Any]], selectors: Sequence[str], *, flag: str = "SELECTOR") -> list[Mapping[str, Any]]:
    """Index rows a list of selectors names: `tag:KEY=VALUE`, `tag:KEY` (any value), `name:NAME`,
    a run id or unique id prefix, or `all`. A selector that matches nothing is an error."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for selector in selectors:
        kind, sep, rest = selector.partition(":")
        if selector == "all":
            found = list(rows)
        elif sep and kind == "tag":
            key, has_value, wanted = rest.partition("=")
            found = [r for r in rows if key in (r.get("tags") or {}) and (not has_value or str(r["tags"][key]) == wanted)]
        elif sep and kind == "name":
            found = [r for r in rows if r.get("name") == rest]
        else:
            exact = [r for r in rows if r["id"] == selector]
            found = exact or [r for r in rows if str(r["id"]).startswith(selector)] or [r for r in rows if r.get("name") == selector]
        if not found:
            raise RunNotFoundError(f"{flag} {selector}: no run matches; `tpu-perf ls` lists them")
        for row in found:
            chosen.setdefault(str(row["id"]), row)
    return sorted(chosen.values(), key=lambda r: (r.get("started_at") or 0, r["id"]))


def history_command(
    selectors: Annotated[list[str], typer.Argument(help="Runs: tag:KEY=VALUE, tag:KEY (any value), name:NAME, id or prefix, or all.", show_default=False)],
    store: Annotated[str, typer.Option("--store", envvar=layout.STORE_ENV, help="Run store (a folder or fsspec URL).")] = layout.DEFAULT_STORE,
    order_by: Annotated[str, typer.Option("--order-by", help="started, or tag:KEY (e.g. tag:commit): one point per value.")] = "started",
    metric: Annotated[str, typer.Option(help="step_time, all_in, cpu_step_time (the process's CPU time per step: steadier on a shared CPU runner), mfu, tokens_per_s, peak_memory; for generation runs ttft_p99, tpot_p50, generated_tokens_per_s or mbu.")] = "step_time",
    as_json: Annotated[bool, typer.Option("--json", help="Print the history as JSON.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print Markdown (for a CI job summary; also appended to $GITHUB_STEP_SUMMARY when set).")] = False,
) -> None:
    """A metric over runs, one point per order key, with change points (where the level moved and
    between which keys). Runs with different fingerprints are separate series."""
    from tpu_perf.analyzers.history import build_history
    from tpu_perf.analyzers.index_row import load_index
    from tpu_perf.jsonio import dumps
    from tpu_perf.store.writable import check_readable_store
    from tpu_perf.views.history import history_doc, render_history, render_markdown

    check_readable_store(store)
    try:
        rows = select_rows(load_index(store), selectors)
        history = build_history(rows, metric=metric, order_by=order_by)
    except RunNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if markdown:
        text = render_markdown(history)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            try:
                with open(summary, "a", encoding="utf-8") as f:
                    f.write(text + "\n")
            except OSError as exc:
                err.print(f"tpu-perf: warning: $GITHUB_STEP_SUMMARY {summary}: cannot append ({exc.strerror or exc})", style="yellow", highlight=False)
        if not as_json:
            sys.stdout.write(text)
    if as_json:
        sys.stdout.write(dumps(history_doc(history)) + "\n")
    elif not markdown:
        out.print(render_history(history))


def baseline_runs(selector: str, store: str, *, flag: str) -> list[str]:
    """`check --baseline history:SEL`: the run ids of SEL's series from its last change point on
    (step time, ordered by start), so the baseline follows changes that were accepted."""
    from tpu_perf.analyzers.history import build_history, since_last_change
    from tpu_perf.analyzers.index_row import load_index

    rows = select_rows(load_index(store), [selector], flag=f"{flag} history:")
    ids = since_last_change(build_history(rows, metric="step_time", order_by="started"))
    if not ids:
        raise RunNotFoundError(f"{flag} history:{selector}: no completed run with a step time")
    return ids


def expand_history(selectors: Sequence[str], store: str, *, flag: str) -> list[str]:
    """`history:SEL` selectors replaced by the folders of SEL's runs since its last change point."""
    from tpu_perf.store.fs import filesystem, join, to_url

    expanded: list[str] = []
    for selector in selectors:
        kind, sep, rest = selector.partition(":")
        if not (sep and kind == "history"):
            expanded.append(selector)
            continue
        if not rest:
            raise UsageError(f"{flag} history:: give the runs of the series, e.g. history:tag:branch=main or history:name:nightly")
        fs, base = filesystem(store)
        expanded += [to_url(fs, join(base, run_id)) for run_id in baseline_runs(rest, store, flag=flag)]
    return expanded
