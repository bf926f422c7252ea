"""User text made safe to show: names, tags, paths and messages quoted from run files.

A run's name is whatever a script or a hand edit put in run.json. Shown raw, `a\x1b[31m` recolours
the terminal, a lone surrogate (`"\ud800"`, valid JSON) ends every printer in a UnicodeEncodeError,
and a bidi override reorders what the reader sees. `printable` writes each such character as the
escape a Python string literal would use, so the text stays readable and unambiguous; every other
character (any script, any emoji) is kept.
"""

from __future__ import annotations

import re
from typing import Any

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""C0 and C1 control characters but tab and newline, DEL, bidi controls and lone surrogates."""
_UNSAFE_LINE = re.compile("[\t\n]|" + _UNSAFE.pattern)


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, *, multiline: bool = False) -> str:
    """`text` with control characters, bidi controls and lone surrogates written as `\\x1b`,
    `\\u202e`, `\\ud800`; tab and newline are escaped too unless `multiline`."""
    pattern = _UNSAFE if multiline else _UNSAFE_LINE
    return pattern.sub(_escape, text) if pattern.search(text) else text


def printable_tree(value: Any, *, multiline: bool = True) -> Any:
    """`value` (decoded JSON) with every string, keys included, through `printable` (by default
    `multiline`: a manifest's messages keep their lines); other values are returned as they are."""
    if isinstance(value, str):
        return printable(value, multiline=multiline)
    if isinstance(value, dict):
        return {printable(k, multiline=multiline): printable_tree(v, multiline=multiline) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_tree(v, multiline=multiline) for v in value]
    return value
