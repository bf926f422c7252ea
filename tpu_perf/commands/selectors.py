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
from tpu_perf.store.fs import filesystem, join, open_regular, to_url
from tpu_perf.store.manifest import Damage
from tpu_perf.store.reader import DamagedRunError, Run, load_run
from tpu_perf.store.writer import write_atomic

BASELINE_KIND = "tpu-perf-baseline"
BASELINE_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The runs a list of selectors names, and the saved run entries of any baseline files."""

    runs: tuple[Run, ...]
    saved: tuple[dict[str, Any], ...]
    """One dict per saved run (`RunValues.to_dict()` layout), from `file:` selectors."""
    grouped: frozenset[str] = frozenset()
    """Ids of the runs a `tag:` or `name:` selector found: one of them that turns out damaged is
    skipped with a note (a run named by its id is an error instead)."""
    skipped: tuple[Damage, ...] = ()
    """Damaged runs in the store, passed over by `tag:` and `name:` selectors."""


def select(selectors: Sequence[str], store: str, *, flag: str) -> Selection:
    """Resolve every selector of one side; a selector that matches nothing is an error naming it."""
    runs: dict[str, Run] = {}
    saved: list[dict[str, Any]] = []
    grouped: set[str] = set()
    skipped: dict[str, Damage] = {}
    for selector in selectors:
        kind, sep, rest = selector.partition(":")
        if sep and kind == "file":
            saved += read_baseline_file(rest, flag=flag)["runs"]
        elif sep and kind in ("tag", "name"):
            found, damaged = _matching(kind, rest, store, flag=flag)
            for run in found:
                runs.setdefault(run.id, run)
                grouped.add(run.id)
            skipped.update((d.run_id, d) for d in damaged)
        else:
            run = load_run(selector, store=store)
            runs.setdefault(run.id, run)
    return Selection(runs=tuple(runs.values()), saved=tuple(saved), grouped=frozenset(grouped), skipped=tuple(skipped.values()))


def _matching(kind: str, value: str, store: str, *, flag: str) -> tuple[list[Run], list[Damage]]:
    """Runs by tag or name, found in the store's runs index (not by opening every run folder),
    and the store's damaged runs (their tags and names cannot be trusted: skipped with a note).
    Only the runs that match are loaded."""
    from tpu_perf.analyzers.index_row import load_index  # builds rows the index lacks

    fs, base = filesystem(store)
    rows = load_index(store)
    damaged = [Damage(url=to_url(fs, join(base, r["id"])), reason=str(r.get("error") or "damaged"), run_id=r["id"]) for r in rows if r["status"] == "damaged"]
    healthy = [r for r in rows if r["status"] != "damaged"]
    if kind == "tag":
        key, sep, wanted = value.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} tag:{value}: expected tag:KEY=VALUE, e.g. tag:repeat=20261201-0612")
        ids = [r["id"] for r in healthy if key in (r.get("tags") or {}) and str(r["tags"][key]) == wanted]
    else:
        ids = [r["id"] for r in healthy if r.get("name") == value]
    found = []
    for run_id in ids:
        try:
            found.append(load_run(to_url(fs, join(base, run_id))))
        except DamagedRunError as exc:  # damaged since its row was written
            damaged.append(Damage(url=exc.damage.url, reason=exc.damage.reason, run_id=run_id))
    if not found:
        raise RunNotFoundError(f"{flag} {kind}:{value}: no run in {store} matches" + (f" ({len(damaged)} damaged run(s) could not be read)" if damaged else "") + f"; `tpu-perf ls --store {store}` lists them")
    return found, damaged


MAX_BASELINE_BYTES = 256 * 2**20
"""A saved baseline holds a few KB per run; a larger file is not read."""


def read_baseline_file(path: str | Path, *, flag: str = "file:") -> dict[str, Any]:
    """A saved baseline document; one-line DataError if it is missing, damaged or not a baseline."""
    where = Path(path)
    try:
        fs, local = filesystem(str(where))
        with open_regular(fs, local, limit=MAX_BASELINE_BYTES) as f:  # never /dev/zero, a FIFO, or a file too large for memory
            doc = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise RunNotFoundError(f"{flag} file:{path}: no such file; save one with `tpu-perf baseline save NAME SELECTOR... --out {path}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
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

    from tpu_perf.git_state import git_state
    from tpu_perf.store.layout import hostname
    from tpu_perf.version import __version__

    return {"tpu_perf": __version__, "command": list(sys.argv), "host": hostname(), "git": git_state(Path.cwd())}


def write_baseline_file(path: str | Path, name: str, runs: Sequence[Any]) -> Path:
    """Write a baseline document whole (temporary name, then rename): a reader never sees half."""
    where = Path(path)
    doc = {"kind": BASELINE_KIND, "schema_version": BASELINE_VERSION, "name": name, "created_at": time.time(), "saved_by": saved_by(), "runs": list(runs)}
    where.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(where, (jsonio.dumps(doc) + "\n").encode("utf-8"))
    return where
