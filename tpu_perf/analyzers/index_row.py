"""One run as one row of the store's runs index: who it is, what it ran on, its headline numbers.

`index_row(run)` is what a run writes into `<store>/.index/` when it ends, and what the index
rebuilds for a run that has no row (older runs, crashed ones). The numbers are the summary
report's (`build_report(..., summary=True)`: same code, same numbers as `report` and the runs page),
plus the all-in step time. A run that cannot be analysed gets a row with status `damaged` and the
reason, so listing a store never fails on one bad folder.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpu_perf.store import Run

INDEX_VERSION = 4
"""Bumped when a row's meaning changes: rows of an older version are rebuilt on read (2: `step_s` is the
headline step time, all-in where the steady sample is too small; the peak is `memory.peak_bytes`; 3: a generation run's `ttft_p99_s`, `tpot_p50_s`,
`generated_tokens_per_s` and `mbu`; 4: `cpu_step_s`, the process's CPU time per steady step)."""

FINGERPRINT_KEYS: tuple[str, ...] = ("chip", "chip_count", "topology", "framework", "jax", "jaxlib", "libtpu", "torch", "torch_tpu", "xla_flags", "libtpu_init_args", "tokens_per_step", "model", "script")
"""What must match for two runs to be one series in `history` (the check's fingerprint plus the script)."""


def fingerprint_key(fingerprint: dict[str, Any]) -> str:
    """A short stable id of a fingerprint: equal fingerprints, equal keys."""
    text = json.dumps({k: fingerprint.get(k) for k in FINGERPRINT_KEYS}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _base(run_id: str, manifest: dict[str, Any], status: str) -> dict[str, Any]:
    hardware = manifest.get("hardware") or {}
    return {
        "id": run_id,
        "name": str(manifest.get("name") or run_id),
        "status": status,
        "started_at": manifest.get("started_at"),
        "ended_at": manifest.get("ended_at"),
        "tags": json.dumps(dict(manifest.get("tags") or {}), sort_keys=True),
        "chip": hardware.get("device_kind"),
        "chip_count": hardware.get("device_count"),
        "framework": "+".join(sorted(manifest.get("frameworks") or [])) or None,
        "script": manifest.get("script") or manifest.get("module"),
        "processes": int(manifest.get("process_count") or 1) if manifest.get("job") else 1,
        "index_version": INDEX_VERSION,
        "indexed_at": time.time(),
    }


def index_row(run: Run) -> dict[str, Any]:
    """The run's row (see `tpu_perf.store.index.COLUMNS`); a run whose analysis fails is `damaged`."""
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.analyzers.run_values import fingerprint

    row = _base(run.id, run.manifest, run.status)
    try:
        report = build_report(run, summary=True)
        prints = {**fingerprint(run), "script": row["script"]}
    except Exception as exc:  # one bad run is a row that says so, never a failed listing
        return damaged_row(run.id, f"{type(exc).__name__}: {exc}", run.manifest)
    steps = report.steps
    row.update(
        chip=prints.get("chip") or row["chip"],
        fingerprint=json.dumps(prints, sort_keys=True),
        fingerprint_key=fingerprint_key(prints),
        steps=steps.count,
        step_s=steps.step_s,  # the report's headline (`steps.step_s`), with its basis
        step_basis=steps.step_basis,
        all_in_s=steps.all_in_s,  # analyzers.all_in: the report's own definition
        mfu=report.mfu.value,
        tokens_per_s=steps.tokens_per_s,
        peak_memory_bytes=report.memory.peak_bytes,
        peak_memory_source=report.memory.peak_source,
        program_hash=report.program_hash,
        compiles_after_warmup=steps.compiled_after_warmup,
        cpu_step_s=steps.cpu_median_s,  # the process's CPU time per steady step: `history --metric cpu_step_time`
        error=None,
    )
    inference = report.inference  # a generation run's metrics, for `history`
    if inference is not None:
        row.update(ttft_p99_s=inference.ttft_s.p99 if inference.ttft_s else None, tpot_p50_s=inference.tpot_s.p50 if inference.tpot_s else None,
                   generated_tokens_per_s=inference.tokens_per_s, mbu=inference.mbu)
    return row


def damaged_row(run_id: str, reason: str, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """The row of a run that cannot be read or analysed: status `damaged`, the reason in `error`."""
    row = _base(run_id, manifest or {}, "damaged")
    row.update(error=reason)
    return row


def load_index(store: str) -> list[dict[str, Any]]:
    """Every run of `store` as its index row, oldest first (rows missing from the index are built
    and written now). `tags` and `fingerprint` are parsed into dicts."""
    from tpu_perf.store.index import runs_index

    rows = runs_index(store, summarize=index_row, damaged=damaged_row, version=INDEX_VERSION)
    seen: dict[str, dict[str, Any]] = {}  # a series' runs share their fingerprint's text: parsed once
    for row in rows:
        row["tags"] = _parsed(row.get("tags"), seen)
        row["fingerprint"] = _parsed(row.get("fingerprint"), seen)
    return rows


def _parsed(text: Any, seen: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The JSON object `text` as a dict of its own (a copy of the one parsed before for equal text)."""
    if isinstance(text, dict):
        return text
    if isinstance(text, str) and text in seen:
        return dict(seen[text])
    value = _parse(text)
    if isinstance(text, str):
        seen[text] = value
    return dict(value)


def _parse(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def final_run(run: Run, store: str) -> Run | None:
    """The run a finished recording leaves in `store`: `run`, or for one process of a job the job;
    None while it is still running (nothing is written for it then)."""
    from tpu_perf.store import layout, load_run
    from tpu_perf.store.fs import filesystem, join, to_url

    shard = run.manifest.get("process_index") is not None or f"/{layout.HOSTS_DIR}/" in run.url.replace("\\", "/")
    if shard and not run.is_job:  # one process of a job: the job's row
        fs, base = filesystem(store)
        run = load_run(to_url(fs, join(base, run.id)))
    return run if run.status in layout.FINAL_STATUSES else None


def write_index_row(run: Run, store: str) -> dict[str, Any] | None:
    """Write `run`'s row into `store`'s index when the run is final; the row, or None when not
    written (still running, or the store cannot be written: the index rebuilds it on read)."""
    from tpu_perf.store.index import write_row

    final = final_run(run, store)
    if final is None:
        return None
    row = index_row(final)
    if row["status"] == "damaged":
        return None
    try:
        write_row(store, row)
    except OSError:
        return None
    return row
