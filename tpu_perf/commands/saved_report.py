"""A run's report, built once when its recording ends and saved in its folder (`.report.json`), so
a later reader opens the run without analysing it again: the dashboard's run page, a comparison
that adds a run no page has loaded yet.

What is saved is what the dashboard reads of a run: the report document (`tpu-perf report
--json`'s, without its `advice` key), the advisor's document (`tpu-perf advise --all --json`'s),
and `tpu-perf check`'s numbers for it with their per-step samples (`RunValues`). A saved report is
reused only while it is what a build would give now: written by this same code
(`version.code_key`: in a checkout the version alone does not move with an analyzer fix), of the
run's files as they are (`store.index.folder_stamp`: a table rewritten or a tag changed and it is
built again), read where it was written (the report names the run's folder: a store moved or a
run copied elsewhere builds its report again). Anything
else, or a file that cannot be read, and the reader builds the report itself, as before; nothing
fails for want of one. The file is a dot name: readers of the run folder skip it, and the stamp of
the run's files (`folder_stamp`) leaves it out.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpu_perf.jsonio import dumps

if TYPE_CHECKING:
    from tpu_perf.analyzers.run_values import RunValues
    from tpu_perf.store import Run

SAVED_FILE = ".report.json"
FORMAT = 1
"""Bumped when the file's own layout changes (the report's is covered by the code key)."""
MAX_BYTES = 256 * 2**20
"""The largest saved report read (a 10k-step run's is 0.5 MB, mostly its per-step samples)."""


@dataclass(frozen=True)
class Built:
    """One run's report document, advice and check numbers, or why each is missing."""

    doc: dict[str, Any] | None
    error: str | None
    advice: dict[str, Any] | None
    advice_error: str | None
    values: RunValues | None


def build(run: Run) -> Built:
    """Build the run's report (a failure is said, not raised: a damaged run gets an error card),
    the advisor's document from it, and the check's numbers from the same report."""
    from tpu_perf.advise import advise
    from tpu_perf.advise.document import advice_document
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.analyzers.run_values import run_values

    try:
        report = build_report(run)
    except Exception as exc:
        return Built(doc=None, error=f"{run.url}: {type(exc).__name__}: {exc}", advice=None, advice_error=None, values=None)
    values = None
    with contextlib.suppress(Exception):  # else the reader builds them itself and says what failed
        values = run_values(run, report)
    try:
        advice, advice_error = advice_document(run, advise(run, report)), None
    except Exception as exc:  # the report still shows; the advice part says why it is missing
        advice, advice_error = None, f"the advisor failed on {run.url}: {type(exc).__name__}: {exc}"
    return Built(doc=report.to_dict(), error=None, advice=advice, advice_error=advice_error, values=values)


def _path(run: Run) -> tuple[Any, str, str]:
    from tpu_perf.store.fs import filesystem, join

    fs, folder = filesystem(run.url)
    return fs, folder, join(folder, SAVED_FILE)


def save(run: Run, store: str) -> bool:
    """Build and save the report of a run whose recording just ended (a job's once its last
    process ends); False where nothing was saved (still running, a failed build, a store that
    cannot be written: readers then build it themselves)."""
    from tpu_perf.analyzers.index_row import final_run
    from tpu_perf.store.fs import is_local
    from tpu_perf.store.index import folder_stamp
    from tpu_perf.version import code_key

    try:
        final = final_run(run, store)
        built = build(final) if final is not None else None
        if final is None or built is None or built.doc is None:
            return False
        fs, folder, path = _path(final)
        local = is_local(final.url)
        saved = {
            "format": FORMAT, "code": code_key(), "url": final.url, "files_stamp": folder_stamp(fs, folder) if local else None,
            "doc": built.doc, "advice": built.advice, "advice_error": built.advice_error,
            "values": built.values.to_dict(samples=True) if built.values is not None else None,
        }  # fmt: skip
        data = dumps(saved, indent=None).encode()
        if local:
            from pathlib import Path

            from tpu_perf.store.writer import write_atomic

            write_atomic(Path(path), data)
        else:
            fs.pipe_file(path, data)
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - a convenience for later readers: the recording is saved and reported already, so a Ctrl-C here ends the saving, not with a traceback
        return False
    return True


def load(run: Run) -> Built | None:
    """The run's saved report where it is still what a build would give (see the module's
    docstring); None otherwise."""
    from tpu_perf.analyzers.run_values import RunValues
    from tpu_perf.store.fs import is_local, open_regular
    from tpu_perf.store.index import folder_stamp
    from tpu_perf.version import code_key

    fs, folder, path = _path(run)
    try:
        with open_regular(fs, path, limit=MAX_BYTES) as f:  # never a FIFO's endless wait, never an unbounded read
            saved = json.loads(f.read())
        if saved.get("format") != FORMAT or saved.get("code") != code_key() or saved.get("url") != run.url:
            return None
        if saved.get("files_stamp") != (folder_stamp(fs, folder) if is_local(run.url) else None):  # an object store's runs are trusted, as its index rows are
            return None
        values = RunValues.from_dict(saved["values"]) if saved.get("values") is not None else None
        return Built(doc=saved["doc"], error=None, advice=saved.get("advice"), advice_error=saved.get("advice_error"), values=values)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent, damaged or of another layout: built again
        return None
