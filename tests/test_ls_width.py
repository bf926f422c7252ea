"""`tpu-perf ls` at 80 columns: ids, names and statuses whole (wrapped, never cut with "…")."""

from __future__ import annotations

from rich.console import Console

from tpu_perf.commands.ls import render_ls


def test_ls_fits_80_columns_without_cutting() -> None:
    rows = [
        {"id": "20261202-041448-81d618", "name": "lm-untuned-baseline-v6e", "status": "completed", "started_at": 1796184888.0, "steps": 120, "step_s": 0.6045, "processes": 1},
        {"id": "20261202-041520-fcd40d", "name": "lm-tuned", "status": "interrupted", "started_at": None, "steps": None, "step_s": None, "processes": 4},
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(render_ls(rows, "/tmp/some/store/of/runs", width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    lines = text.splitlines()
    header = next(line for line in lines if " id " in f" {line} " and "status" in line)
    start, stop = header.index("name"), header.index("status")
    names = "".join(line[start:stop].strip() for line in lines[lines.index(header) + 2 :])  # the name column, wrapped lines joined
    for r in rows:
        assert r["id"] in text and r["status"] in text  # each on one line
        assert r["name"] in names
    assert "n/a" in text


def test_ls_shows_tags_under_the_name_within_80_columns() -> None:
    """Two runs that differ only by tag (a `--repeat` pair of groups) do not look the same."""
    rows = [
        {"id": f"20261202-04144{i}-81d618", "name": "gate_loop", "status": "completed", "started_at": 1796184888.0, "steps": 16, "step_s": 0.01, "processes": 1, "tags": {"work": work}}
        for i, work in enumerate(("50", "150"))
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(render_ls(rows, "/tmp/store", width=80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    assert "work=50" in text and "work=150" in text
