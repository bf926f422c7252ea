"""Run sets from selectors, and saved baseline files: how `check` and `baseline save` find runs.

A selector is a run id, unique id prefix or name, a run folder (path or URL), `tag:KEY=VALUE`
(every run with that tag), `name:NAME` (every run with that name), or `file:PATH.json` (a baseline
saved by `tpu-perf baseline save`: per-run values, no run folders needed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_perf import jsonio
from tpu_perf.errors import DataError, RunNotFoundError, UsageError
from tpu_perf.store.reader import Run, list_runs, load_run
from tpu_perf.store.writer import write_atomic

BASELINE_KIND = "tpu-perf-baseline"
BASELINE_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The runs a list of selectors names, and the saved run entries of any baseline files."""

    runs: tuple[Run, ...]
    saved: tuple[dict[str, Any], ...]
    """One dict per saved run (`RunValues.to_dict()` layout), from `file:` selectors."""


def select(selectors: Sequence[str], store: str, *, flag: str) -> Selection:
    """Resolve every selector of one side; a selector that matches nothing is an error naming it."""
    runs: dict[str, Run] = {}
    saved: list[dict[str, Any]] = []
    for selector in selectors:
        kind, sep, rest = selector.partition(":")
        if sep and kind == "file":
            saved += read_baseline_file(rest, flag=flag)["runs"]
        elif sep and kind in ("tag", "name"):
            for run in _matching(kind, rest, store, flag=flag):
                runs.setdefault(run.id, run)
        else:
            run = load_run(selector, store=store)
            runs.setdefault(run.id, run)
    return Selection(runs=tuple(runs.values()), saved=tuple(saved))


def _matching(kind: str, value: str, store: str, *, flag: str) -> list[Run]:
    if kind == "tag":
        key, sep, wanted = value.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} tag:{value}: expected tag:KEY=VALUE, e.g. tag:repeat=20261201-0612")
        found = [r for r in list_runs(store) if r.tags.get(key) == wanted]
    else:
        found = [r for r in list_runs(store) if r.name == value]
    if not found:
        raise RunNotFoundError(f"{flag} {kind}:{value}: no run in {store} matches; `tpu-perf ls --store {store}` lists them")
    return found


def read_baseline_file(path: str | Path, *, flag: str = "file:") -> dict[str, Any]:
    """A saved baseline document; one-line DataError if it is missing, damaged or not a baseline."""
    where = Path(path)
    try:
        doc = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunNotFoundError(f"{flag} file:{path}: no such file; save one with `tpu-perf baseline save NAME SELECTOR... --out {path}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{flag} file:{path}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != BASELINE_KIND or not isinstance(doc.get("runs"), list):
        raise DataError(f"{flag} file:{path}: not a tpu-perf baseline (no kind '{BASELINE_KIND}' with a runs list)")
    if not isinstance(doc.get("schema_version"), int) or doc["schema_version"] > BASELINE_VERSION:
        raise DataError(f"{flag} file:{path}: baseline schema_version {doc.get('schema_version')} is newer than this tpu-perf reads ({BASELINE_VERSION}); upgrade tpu-perf")
    if not all(isinstance(r, dict) for r in doc["runs"]):
        raise DataError(f"{flag} file:{path}: every entry of 'runs' must be an object")
    return doc


def saved_by() -> dict[str, Any]:
    """Who wrote a baseline file: tpu-perf's version, the command line, the host, the git state of
    the working directory (each run entry carries its own `provenance` and `fingerprint`)."""
    import sys

    from tpu_perf import __version__
    from tpu_perf.collectors.environment import git_state
    from tpu_perf.store.layout import hostname

    return {"tpu_perf": __version__, "command": list(sys.argv), "host": hostname(), "git": git_state(Path.cwd())}


def write_baseline_file(path: str | Path, name: str, runs: Sequence[Any]) -> Path:
    """Write a baseline document whole (temporary name, then rename): a reader never sees half."""
    where = Path(path)
    doc = {"kind": BASELINE_KIND, "schema_version": BASELINE_VERSION, "name": name, "created_at": time.time(), "saved_by": saved_by(), "runs": list(runs)}
    where.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(where, (jsonio.dumps(doc) + "\n").encode("utf-8"))
    return where
