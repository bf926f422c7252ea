"""`ls`'s rows and table, shared by `tpu-perf ls` and the notebook's `%tpu_perf ls` / `runs_view`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from tpu_perf.text import printable

LS_HEADLINE: tuple[str, ...] = ("step_s", "step_basis", "tokens_per_s", "mfu", "peak_memory_bytes", "peak_memory_source", "program_hash")
"""The report's one answer in each `ls --json` row, under the index's names (the report's
`steps.step_s`, `steps.step_basis`, `steps.tokens_per_s`, `mfu`, `memory.peak_bytes`,
`memory.peak_source`, `program_hash`)."""


def ls_rows(store: str) -> list[dict[str, Any]]:
    """One row per run of `store` for `ls`, from the runs index: id, name, status, start, steps,
    the report's one answer (the headline step time `step_s` and its `step_basis`, tokens/s, MFU,
    peak memory and its source, the program hash), processes, url, tags, and why a damaged run is
    damaged (`damage`)."""
    from tpu_perf.analyzers.index_row import load_index
    from tpu_perf.store.fs import filesystem, join, to_url

    fs, base = filesystem(store)
    return [
        # a folder's name is user text too (undecodable bytes, control characters): shown escaped
        {"id": printable(row["id"]), "name": row["name"], "status": row["status"], "started_at": row["started_at"], "steps": row.get("steps"),
         **{key: row.get(key) for key in LS_HEADLINE}, "processes": row.get("processes") or 1, "url": printable(to_url(fs, join(base, row["id"]))), "tags": row.get("tags") or {},
         "damage": row.get("error") and printable(row["error"])}
        for row in load_index(store)
    ]


LS_FULL_WIDTH = 100
"""Below this many columns `ls` shows when a run started without the year and seconds."""


def render_ls(rows: list[dict[str, Any]], store: str, width: int | None = None) -> Table:
    """The runs as a table that fits the terminal (80 columns too) without cutting an id, a name or
    a status: no vertical rules, a shorter start time when narrow, and any long cell wrapped whole
    (`overflow="fold"`), never cut with "…". Every cell is plain text (names, statuses and reasons
    are user text). `width` defaults to the terminal's."""
    from rich import box
    from rich.text import Text

    from tpu_perf.commands.console import out
    from tpu_perf.views import format as fmt
    from tpu_perf.views.report import STATUS_STYLE

    narrow = (width or out.width) < LS_FULL_WIDTH
    table = Table(title=Text(f"runs in {store}"), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("id", "name (tags)" if any(r.get("tags") for r in rows) else "name", "status", "started", "steps", "step time"):
        whole = col in ("id", "status", "started")
        table.add_column(col, no_wrap=whole, overflow="fold", min_width=max(len(r[col]) for r in rows) if col in ("id", "status") and rows else None)  # ids are copied whole
    for r in rows:
        name = str(r["name"] or "") if r["processes"] == 1 else f"{r['name']} ×{r['processes']} processes"
        steps = str(r["steps"]) if r["steps"] is not None else "n/a"
        if r.get("damage"):
            name, steps = f"{r['url']}: {r['damage']}", "n/a"
        started = fmt.timestamp(r["started_at"])
        if narrow and r["started_at"] is not None:
            started = started[5:16]  # "12-02 04:14" of "2026-12-02 04:14:48"
        step = fmt.seconds(r["step_s"]) + (" all-in" if r.get("step_basis") == "all-in" else "")
        named = Text(name)
        if r.get("tags"):  # under the name (a column would squeeze it at 80): runs that differ only by tag tell apart
            named.append("\n" + " ".join(f"{k}={v}" for k, v in r["tags"].items()), style="dim")
        table.add_row(Text(r["id"]), named, Text(r["status"], style=STATUS_STYLE.get(r["status"], "red")), started, steps, step)
    if any(r.get("step_basis") == "all-in" for r in rows):
        table.caption = "all-in: the wall time per step after the first (the steady steps were too few, or most of the time lay outside them)"
        table.caption_justify = "left"
    return table
