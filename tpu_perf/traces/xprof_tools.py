"""XProf's own converters, run on scratch copies of the user's files.

xprof writes cache files (`*.op_stats_v2.pb`, `*.hlo_proto.pb`, ...) next to the XSpace it reads,
so it never sees the user's only copy: each call converts copies in a temporary folder.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tpu_perf.errors import DataError


@contextmanager
def scratch_copies(paths: Sequence[Path]) -> Iterator[list[str]]:
    """Copies of `paths` in a fresh temporary folder, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="tpu-perf-xprof-") as tmp:
        copies = []
        for i, path in enumerate(paths):
            dest = Path(tmp) / f"h{i}" / Path(path).name
            dest.parent.mkdir()
            shutil.copyfile(path, dest)
            copies.append(str(dest))
        yield copies


def tool_data(paths: Sequence[Path], tool: str, params: dict[str, Any] | None = None) -> Any:
    """`xprof.convert.raw_to_tool_data.xspace_to_tool_data` on copies of `paths`, parsed from JSON."""
    from xprof.convert import raw_to_tool_data as rtd

    with scratch_copies(paths) as copies:
        try:
            data, _ = rtd.xspace_to_tool_data(copies, tool, dict(params or {}))
        except Exception as exc:
            names = ", ".join(str(p) for p in paths)
            raise DataError(f"{names}: xprof cannot convert it ({type(exc).__name__}: {exc}); is it a complete .xplane.pb?") from None
    if data is None:
        return None
    return json.loads(data)


def datatable_rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of a Google-Visualization DataTable (`cols`, `rows`) as dicts keyed by column id."""
    ids = [c["id"] for c in table.get("cols", [])]
    return [{k: (cell or {}).get("v") for k, cell in zip(ids, row.get("c", []), strict=False)} for row in table.get("rows", [])]


def op_profile_leaves(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Leaf ops of XProf's op_profile (by program): program id, name, category, expression, FLOPs, bytes.

    op_profile aggregates over every device of the capture; these are per-op totals.
    """
    doc = tool_data(paths, "op_profile", {"group_by": "program"})
    if not doc:
        return []
    out: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        xla = node.get("xla")
        grouped = "and its duplicate" in node.get("name", "")
        if xla and not grouped and xla.get("expression") and xla.get("programId", "0") != "0":
            m = node.get("metrics") or {}
            out.append({
                "program_id": xla.get("programId"),
                "name": node.get("name", ""),
                "category": xla.get("category"),
                "expression": xla.get("expression"),
                "occurrences": m.get("occurrences") or 0,
                "raw_flops": m.get("rawFlops") or 0.0,
                "raw_bytes": sum(m.get("rawBytesAccessedArray") or [0.0]),
            })
            return  # children of a leaf op are the ops fused inside it
        for child in node.get("children") or []:
            walk(child)

    walk(doc.get("byProgram") or {})
    return out
