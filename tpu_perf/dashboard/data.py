"""How the dashboard reads runs: `list_runs` / `load_run` and the analyzers, cached with real keys.

Every cache is keyed on the run's URL and its modification stamp (`Run.modified_stamp`), so a run
that changes on disk (a live recording) is read again and one that does not is read once. Loaded
runs and report documents are kept by the server (`_Memo`, filled from worker threads too); plotted
frames in `st.cache_data`. The runs page needs only a few numbers per run; those come from the
report's summary parts (`build_report(..., summary=True)`, same code, same numbers), kept on disk
(keyed on the same stamp), so listing a store never loads every table of every run twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from tpu_perf.analyzers import report as report_module
from tpu_perf.analyzers.compare import dig
from tpu_perf.analyzers.hosts import steps_by_host
from tpu_perf.analyzers.run_values import RunValues
from tpu_perf.analyzers.run_values import run_values as analyzers_run_values
from tpu_perf.analyzers.step_phases import step_phases
from tpu_perf.analyzers.timeline import best_rows
from tpu_perf.commands import saved_report
from tpu_perf.dashboard import stamp
from tpu_perf.errors import TpuPerfError
from tpu_perf.jsonio import dumps
from tpu_perf.store import Run, layout, load_run, scan_runs
from tpu_perf.store.writer import write_atomic
from tpu_perf.version import __version__, code_key

CACHE_ENV = "TPU_PERF_CACHE_DIR"
"""Where run summaries are cached (default: $XDG_CACHE_HOME/tpu-perf/dashboard)."""

TABLES = ("steps", "compiles", "memory", "runtime", "programs", "ops")
"""Tables offered for download on the run page (each only when the run has it)."""


@dataclass(frozen=True)
class RunRef:
    """What listing a store tells about a run without reading its tables."""

    id: str
    url: str
    name: str
    status: str
    stamp: float
    started_at: float | None
    basics: tuple[tuple[str, Any], ...] = ()
    """Runs-page columns the manifest alone gives (chip, devices, framework, tags)."""


def store_location() -> str:
    """The store the server was started on (`tpu-perf dashboard STORE` sets TPU_PERF_STORE)."""
    return layout.default_store()


def list_refs(store: str) -> tuple[list[RunRef], list[str]]:
    """The store's runs, newest first, and one message per folder that could not be read; listed
    again only when the store's stamp changed (`stamp.store_stamp`: a rerun lists nothing)."""
    key = stamp.store_stamp(store)
    if key is None:
        return _list_refs(store)
    refs, errors = _LISTINGS.get((store, key), lambda: _list_refs(store))
    return list(refs), list(errors)


def _list_refs(store: str) -> tuple[list[RunRef], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            runs, damaged = scan_runs(store)
        except TpuPerfError as exc:  # an unreadable store is shown, never a crashed page
            return [], [str(exc)]
        except Exception as exc:
            return [], [f"{store}: cannot be listed ({type(exc).__name__}: {exc})"]
    errors = [f"damaged run {d.run_id}: {d}" for d in damaged] + [str(w.message) for w in caught]
    refs = []
    for run in runs:
        try:
            stamp = run.modified_stamp
        except Exception as exc:
            errors.append(f"{run.url}: cannot be read ({type(exc).__name__}: {exc})")
            continue
        hardware = run.manifest.get("hardware") or {}
        basics = {
            "chip": hardware.get("device_kind"),
            "devices": hardware.get("device_count"),
            "framework": ", ".join(run.manifest.get("frameworks") or []) or None,
            "tags": ", ".join(f"{k}={v}" for k, v in sorted(run.tags.items())),
        }
        refs.append(RunRef(id=run.id, url=run.url, name=run.name, status=run.status, stamp=stamp, started_at=run.started_at, basics=tuple(basics.items())))
    refs.sort(key=lambda r: (r.started_at or 0, r.id), reverse=True)
    return refs, errors


def resolve(refs: list[RunRef], wanted: str, store: str) -> tuple[RunRef | None, str | None]:
    """The run a URL names, as `tpu_perf.load_run` resolves it within the store: an id, a unique id
    prefix, or a unique name; else (None, one line naming `wanted` and why). Never another run."""
    exact = [r for r in refs if r.id == wanted]
    if exact:
        return exact[0], None
    prefixed = [r for r in refs if r.id.startswith(wanted)]
    if len(prefixed) == 1:
        return prefixed[0], None
    if len(prefixed) > 1:
        return None, f"run '{wanted}' is ambiguous in {store}: {', '.join(sorted(r.id for r in prefixed)[:5])}; give more of the id"
    named = [r for r in refs if r.name == wanted]
    if len(named) == 1:
        return named[0], None
    if len(named) > 1:
        runs = "; ".join(f"{r.id} ({r.status})" for r in sorted(named, key=lambda r: r.id, reverse=True))
        return None, f"{len(named)} runs in {store} are named '{wanted}': {runs}; give a run id instead"
    return None, f"no run '{wanted}' in {store}; the Runs page lists {len(refs)} run(s)"


class _Memo:
    """A small thread-safe LRU of computed values, shared by every session of the server.

    Streamlit's own caches are for the script's thread; these are filled from worker threads too
    (runs loaded in parallel), so the runs and reports they load are kept for the pages that follow."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()  # outside the lock: two threads may compute one key, never block each other
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_RUNS = _Memo(32)
_LISTINGS = _Memo(4)
_REPORTS = _Memo(256)
_VALUES = _Memo(256)
_SUMMARIES = _Memo(4096)
_INDEXED = _Memo(4)
CHECKS = _Memo(256)
"""`tpu-perf check` between two sides of a comparison (`export.checks`), per the sides' labels and
their runs' ids, stamps and live statuses: a change of comparison back to a pair shown before, or
a click on a tab, checks no pair again. Shared and read-only, as the reports are."""
_PREFETCH = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tpu-perf-prefetch")
"""Reads a page is likely to need next, off the script's thread (a Run keeps the tables it read)."""
WORKERS = max(2, min(4, os.cpu_count() or 1))
"""Runs loaded at once. Parquet decoding (pyarrow) releases the GIL, so on free cores a second
thread overlaps one run's reads with another's analysis; the analysis itself holds the GIL."""


def clear_caches() -> None:
    """Forget loaded runs and reports (a fresh server; Streamlit's caches are cleared apart)."""
    _RUNS.clear()
    _LISTINGS.clear()
    _REPORTS.clear()
    _VALUES.clear()
    _SUMMARIES.clear()
    _INDEXED.clear()
    CHECKS.clear()


def open_run(url: str, stamp: float) -> Run:
    """One loaded Run per (url, stamp); it keeps the tables it has read. Shared: treat as read-only."""
    return _RUNS.get((url, stamp), lambda: load_run(url))


def _build(url: str, stamp: float) -> bytes:
    """The run's report, advice and check numbers: saved with the run when its recording ended
    (`commands.saved_report`), else built here."""
    run = open_run(url, stamp)
    built = saved_report.load(run)
    if built is None:
        built = saved_report.build(run)  # reads the tables the pages read next, as a side effect
    else:  # the Memory tabs' table, read while the page draws: a saved report read none
        _PREFETCH.submit(run.table, "memory")
    if built.values is not None:  # the verdict's numbers from the same report, not a second build
        _VALUES.get((url, stamp), lambda: built.values)
    got: dict[str, Any] = {"doc": built.doc, "error": built.error, "advice_error": built.advice_error}
    got["advice"] = built.advice["findings"] if built.advice else None
    got["advice_summary"] = {k: built.advice[k] for k in ("next", "nothing_left", "also", "conclusion", "target")} if built.advice else None
    return dumps(got, indent=None).encode()


def _report(url: str, stamp: float) -> dict[str, Any]:
    """{"doc", "error"}; kept as JSON text, so every caller gets its own copy to shape as it likes."""
    return json.loads(_REPORTS.get((url, stamp), lambda: _build(url, stamp)))


def load_reports(refs: list[RunRef]) -> None:
    """Build the reports of `refs` not loaded yet, WORKERS at a time (a comparison of new runs)."""
    missing = [r for r in refs if (r.url, r.stamp) not in _REPORTS]
    if len(missing) < 2:
        return
    with ThreadPoolExecutor(max_workers=min(WORKERS, len(missing))) as pool:
        list(pool.map(lambda r: _REPORTS.get((r.url, r.stamp), lambda: _build(r.url, r.stamp)), missing))


def report(ref: RunRef) -> tuple[dict[str, Any] | None, str | None]:
    """(report document, None) or (None, error message). The status is the live one."""
    got = _report(ref.url, ref.stamp)
    doc = got["doc"]
    if doc is not None:
        doc = {**doc, "run": {**doc.get("run", {}), "status": ref.status}}
    return doc, got["error"]


def run_values(ref: RunRef) -> RunValues:
    """`tpu-perf check`'s numbers for the run (`analyzers.run_values`), kept per (url, stamp): a
    comparison's verdict is checked again on every rerun, its runs' reports are not rebuilt."""
    return _VALUES.get((ref.url, ref.stamp), lambda: analyzers_run_values(open_run(ref.url, ref.stamp)))


def advice(ref: RunRef) -> tuple[list[dict[str, Any]] | None, str | None]:
    """(every rule's finding, ranked as `tpu-perf advise` ranks them, None) or (None, why not)."""
    got = _report(ref.url, ref.stamp)
    return got.get("advice"), got.get("advice_error") or got.get("error")


def advice_summary(ref: RunRef) -> dict[str, Any] | None:
    """The advisor's `next`, `nothing_left`, `also`, `conclusion` and `target` for the run, or None."""
    return _report(ref.url, ref.stamp).get("advice_summary")


@st.cache_data(max_entries=256, show_spinner=False)
def table(url: str, stamp: float, name: str) -> pd.DataFrame:
    """A run table by name; empty when the run has none."""
    return open_run(url, stamp).table(name)


@st.cache_data(max_entries=256, show_spinner=False)
def step_frame(url: str, stamp: float, warmup: int, paced: bool) -> pd.DataFrame:
    """The steps the analyzers use, with their phase and start (`analyzers.step_phases`), for the
    report's `steps.warmup` and whether its steady step time is the device's pace."""
    return step_phases(open_run(url, stamp), warmup, paced=paced)


def phases_of(ref: RunRef, doc: dict[str, Any]) -> pd.DataFrame:
    """`step_frame` of a run as its report (`doc`) decided it."""
    return step_frame(ref.url, ref.stamp, int(dig(doc, "steps.warmup")), dig(doc, "steps.steady_basis") == "device pace")


@st.cache_data(max_entries=64, show_spinner=False)
def hosts_frame(url: str, stamp: float) -> pd.DataFrame:
    """One row per process per step of a multi-process job (`analyzers.hosts.steps_by_host`); empty otherwise."""
    return steps_by_host(open_run(url, stamp))


@st.cache_data(max_entries=256, show_spinner=False)
def memory_frame(url: str, stamp: float) -> pd.DataFrame:
    """Memory samples with time since the run started (`t_s`): each device from its best source
    (as the analyzers read it: libtpu > NVML > JAX > torch; two sources of one device would draw a
    zig-zag), and the host's rows."""
    run = open_run(url, stamp)
    memory = run.memory
    if memory.empty or "time_s" not in memory:
        return pd.DataFrame(columns=["t_s", "device", "bytes_in_use", "source"])
    best = best_rows(run, "memory")
    host = memory[memory["device"] == "host"] if "device" in memory else memory.iloc[0:0]
    rows = pd.concat([best, host], ignore_index=True) if not host.empty else best
    start = run.started_at or float(memory["time_s"].min())
    out = rows.assign(t_s=rows["time_s"].astype(float) - float(start))
    return out.sort_values("t_s", kind="stable").reset_index(drop=True)


# -- run summaries for the runs page --------------------------------------------------------------
def _cache_dir() -> Path:
    base = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tpu-perf", "dashboard")
    return Path(base)


def _sections_key() -> str:
    """Changes when tpu-perf's code or its report layout changes, so old summaries are not reused."""
    return f"{__version__}/{report_module.REPORT_VERSION}/{code_key()}"


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """The runs page's row for one report document (values as the report has them)."""
    hardware = dig(doc, "run.hardware") or {}
    tags = dig(doc, "run.tags") or {}
    return {
        "chip": dig(doc, "flops.chip") or hardware.get("device_kind"),
        "devices": dig(doc, "flops.devices") or hardware.get("device_count"),
        "framework": ", ".join(dig(doc, "run.frameworks") or []) or None,
        "tags": ", ".join(f"{k}={v}" for k, v in sorted(tags.items())),
        "steps": dig(doc, "steps.count"),
        "step_s": dig(doc, "steps.step_s"),
        "step_basis": dig(doc, "steps.step_basis"),
        "mfu": doc.get("mfu"),
        "mfu_basis": doc.get("mfu_basis"),
        "tokens_per_s": dig(doc, "steps.tokens_per_s"),
        "peak_hbm_bytes": dig(doc, "memory.peak_bytes"),
    }


def _summary_path(ref: RunRef) -> tuple[Path, dict[str, Any]]:
    path = _cache_dir() / f"{hashlib.sha1(ref.url.encode()).hexdigest()[:24]}.json"
    return path, {"url": ref.url, "stamp": ref.stamp, "code": _sections_key()}


def _kept_summary(ref: RunRef) -> dict[str, Any] | None:
    path, key = _summary_path(ref)
    try:
        cached = json.loads(path.read_text())
        if cached.get("key") == key:
            return cached["summary"]
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    return None


def _summary_doc(ref: RunRef) -> dict[str, Any]:
    """The report's summary sections, from a Run of its own (not kept: a store has many runs);
    the full report when it is loaded already."""
    if (ref.url, ref.stamp) in _REPORTS:
        return _report(ref.url, ref.stamp)
    try:
        return {"doc": report_module.build_report(load_run(ref.url), summary=True).to_dict(), "error": None}
    except Exception as exc:  # a run that fails to load gets an error card
        return {"doc": None, "error": f"{ref.url}: {type(exc).__name__}: {exc}"}


def _disk_summary(ref: RunRef) -> dict[str, Any]:
    kept = _kept_summary(ref)
    if kept is not None:
        return kept
    path, key = _summary_path(ref)
    got = _summary_doc(ref)
    summary = summarize(got["doc"]) if got["doc"] is not None else {"error": got["error"]}
    if ref.status != "running":  # a live run's summary changes every few seconds: keep it in memory only
        try:
            write_atomic(path, dumps({"key": key, "summary": summary}, indent=None).encode())
        except OSError:
            pass  # a read-only home is no reason to fail; the summary is just not kept
    return summary


def _summary(ref: RunRef) -> dict[str, Any]:
    return _SUMMARIES.get((ref.url, ref.stamp), lambda: _disk_summary(ref))


ROW_SLACK_S = 2.0
"""A run's row file is written just after its `indexed_at`: a folder stamp this close to it is the row's own."""


def indexed_summaries(store: str, refs: list[RunRef]) -> dict[str, dict[str, Any]]:
    """The runs page's numbers of every finished run the store's runs index holds a row for
    (README "The runs index"), by run id: no run analysed. Runs without a row (older ones) are
    analysed as before. Empty when the index cannot be read. Read again only when a run's stamp
    changed (a row written changes its folder's): a rerun reads no row file. Shared: read-only."""
    key = (store, tuple((r.id, r.stamp) for r in refs))
    return _INDEXED.get(key, lambda: _indexed_summaries(store, refs))


def _indexed_summaries(store: str, refs: list[RunRef]) -> dict[str, dict[str, Any]]:
    from tpu_perf.store.index import known_rows

    try:
        rows = known_rows(store, [r.id for r in refs])
    except Exception:
        return {}
    return {
        run_id: {
            "chip": r.get("chip"), "devices": r.get("chip_count"), "steps": r.get("steps"), "step_s": r.get("step_s"), "step_basis": r.get("step_basis"),
            "mfu": r.get("mfu"), "tokens_per_s": r.get("tokens_per_s"), "peak_hbm_bytes": r.get("peak_memory_bytes"),
            "indexed_at": r.get("indexed_at"),
        }
        for run_id, r in rows.items()
        if r.get("status") in layout.FINAL_STATUSES
    }


def summary(ref: RunRef, *, compute: bool = True, indexed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The row the runs page shows for `ref` (with `error` set when the run cannot be analysed):
    `indexed` (its runs-index numbers) when given for a finished run, else from its report.

    With compute=False, a run not analysed before gets only its manifest's columns and `pending`.
    """
    base = _base_row(ref)
    fresh = indexed is not None and ref.status != "running" and ref.stamp <= (indexed.get("indexed_at") or 0) + ROW_SLACK_S
    if fresh:  # a run folder changed after its row was written (repaired, damaged) is analysed again
        return {**base, **{k: v for k, v in indexed.items() if k != "indexed_at" and (v is not None or k not in base)}}
    if not compute and (ref.url, ref.stamp) not in _SUMMARIES and _kept_summary(ref) is None:
        return {**base, "pending": True}
    return {**base, **_summary(ref)}


def _base_row(ref: RunRef) -> dict[str, Any]:
    return {"id": ref.id, "name": ref.name, "status": ref.status, "started_at": ref.started_at, "url": ref.url, "error": None, **dict(ref.basics)}


def analyse(refs: list[RunRef]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index in refs, row as `summary` gives it) for each run, as each is analysed, WORKERS at a
    time; finished runs' summaries are kept on disk. Call from the script thread: workers do no Streamlit."""
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    try:
        futures = {pool.submit(_summary, ref): i for i, ref in enumerate(refs)}
        for future in as_completed(futures):
            i = futures[future]
            yield i, {**_base_row(refs[i]), **future.result()}
    finally:  # a rerun that stops the page mid-way does not wait for the runs left
        pool.shutdown(wait=False, cancel_futures=True)
