"""file:line of an HLO op, from the stack-frame tables jax writes into the optimized module's text
(FileNames, FunctionNames, FileLocations, StackFrames; an op's metadata names its stack_frame_id)."""

from __future__ import annotations

import re

_TABLE_ROW = re.compile(r"^(\d+) (.*)$")


class Frames:
    """file:line of an op from the module's stack-frame tables (FileNames, FileLocations, StackFrames)."""

    def __init__(self, text: str) -> None:
        self.tables: dict[str, dict[int, str]] = {}
        table = None
        for line in text.splitlines():
            if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
                table = self.tables.setdefault(line, {})
            elif table is not None and (m := _TABLE_ROW.match(line)):
                table[int(m.group(1))] = m.group(2)
            elif line.startswith(("ENTRY", "%", "HloModule")) or not line.strip():
                table = None if line.strip() else table

    def _field(self, row: str, key: str) -> int | None:
        m = re.search(rf"\b{key}=(\d+)", row)
        return int(m.group(1)) if m else None

    def _location(self, frame: int) -> str | None:
        loc = self.tables.get("FileLocations", {}).get(self._field(self.tables.get("StackFrames", {}).get(frame, ""), "file_location_id") or -1)
        if loc is None:
            return None
        file = self.tables.get("FileNames", {}).get(self._field(loc, "file_name_id") or -1, "?").strip('"')
        return f"{file}:{self._field(loc, 'line')}"

    def source(self, frame: int) -> str | None:
        """The innermost frame outside installed libraries, else the innermost frame."""
        seen, first = set(), None
        stacks = self.tables.get("StackFrames", {})
        while frame in stacks and frame not in seen:
            seen.add(frame)
            where = self._location(frame)
            first = first or where
            if where and "site-packages" not in where and "/jax/" not in where:
                return where
            frame = self._field(stacks[frame], "parent_frame_id") or -1
        return first
