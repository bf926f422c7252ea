"""The differing part of long settings, for the compare page's configuration diff.

A command or a flag string is long and differs in a few words ("… --width 384"): shown whole, a
narrow column cuts it exactly there. Each long value is shown against the most alike other run's
value of the same setting (the baseline's first among equals): words equal in both fold into "…",
a flag name (`--x`, not `--x=1`) just before a differing value stays as its context, and a
differing path keeps only what differs from the other path ("…/torch_mlp.py").
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping

import pandas as pd

WIDTH = 40
"""Values up to this many characters are shown whole."""
ABSENT = "—"
"""What `compare.config_diff` shows for a setting a run does not have."""


def _path(word: str, other: str) -> str:
    """`word` without the leading folders it shares with `other` ("…/torch_mlp.py")."""
    if "/" not in word or "/" not in other:
        return word
    common = os.path.commonprefix([word, other])
    cut = common.rfind("/")
    return f"…{word[cut:]}" if cut > 0 else word


def against(value: str, other: str, width: int = WIDTH) -> str:
    """`value` shown against `other`: equal words folded into "…", the differing ones kept."""
    if len(value) <= width or other == ABSENT or value == other:
        return value
    mine, theirs = value.split(), other.split()
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=mine, b=theirs, autojunk=False)
    codes = matcher.get_opcodes()
    for i, (tag, a0, a1, b0, b1) in enumerate(codes):
        if tag == "equal":
            run = mine[a0:a1]
            value_differs = i + 1 < len(codes) and codes[i + 1][0] == "replace"
            context = [run[-1]] if value_differs and run[-1].startswith("-") and "=" not in run[-1] else []  # the flag whose value differs
            if len(run) > len(context):
                out.append("…")
            out += context
        elif tag == "replace" and a1 - a0 == b1 - b0:  # word for word: each path against its counterpart
            out += [_path(w, o) for w, o in zip(mine[a0:a1], theirs[b0:b1], strict=True)]
        else:
            out += mine[a0:a1]
    return " ".join(out) if out else value


ALIKE = 0.5
"""A value is shown against another only when at least this share of their words match (difflib's ratio)."""


def _alike(value: str, other: str) -> float:
    return difflib.SequenceMatcher(a=value.split(), b=other.split(), autojunk=False).ratio()


def differing_parts(table: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """`compare.config_diff`'s table with each long value shown by its differing part: `against`
    the most alike other value of the setting (the baseline's first among equals), when at least
    half their words match; else whole but for a leading path's shared folders."""
    out = table.copy()
    columns = [baseline, *(c for c in table.columns if c != baseline)] if baseline in table.columns else list(table.columns)
    for setting, row in table.iterrows():
        values: Mapping[str, str] = {c: str(row[c]) for c in columns}
        if len(set(values.values())) < 2:
            continue
        for column in columns:
            mine = values[column]
            if len(mine) <= WIDTH:
                continue
            others = [values[c] for c in columns if c != column and values[c] not in (ABSENT, mine)]
            best = max(others, key=lambda o: _alike(mine, o), default=None)
            if best is not None and _alike(mine, best) >= ALIKE:
                out.loc[setting, column] = against(mine, best)
            elif others:  # unlike every other value: only its leading path, by what differs from theirs
                out.loc[setting, column] = _leading_path(mine, others)
    return out


def _leading_path(value: str, others: list[str]) -> str:
    """`value` with its first word, a path, cut to what differs from the other values' first paths
    ("…/tests/scripts/loop.py --steps 30" beside "/work/examples/mlp.py …")."""
    words = value.split(" ", 1)
    firsts = [o.split(" ", 1)[0] for o in others if "/" in o.split(" ", 1)[0]]
    if "/" not in words[0] or not firsts:
        return value
    short = max((_path(words[0], f) for f in firsts), key=len)  # the least cut: what differs from every one
    return " ".join([short, *words[1:]])
