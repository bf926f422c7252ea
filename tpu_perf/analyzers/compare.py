"""Run-to-run comparison: KPIs and their deltas, which way is better, fusion and configuration
side by side (top ops: `ops_compare`). Analysis over report documents (`Report.to_dict()`),
shared by the dashboard and the CI gate; no Streamlit, no formatting (the views format by each
KPI's `unit`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd


def dig(doc: Any, path: str) -> Any:
    """`doc["a"]["b"]` for path "a.b", or None where any part is missing."""
    for key in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


SECONDS_PER_HOUR = 3600.0


def devices(doc: Mapping[str, Any]) -> int | None:
    """Devices the step runs on (the report's FLOPs devices, else the hardware's device count)."""
    value = dig(doc, "flops.devices") or dig(doc, "run.hardware.device_count")
    return int(value) if value else None


def chips(doc: Mapping[str, Any]) -> float | None:
    """Physical chips the step runs on: devices / devices per chip (an Ironwood chip is 2 devices).
    What a price per chip-hour is multiplied by; None when the device count is unknown."""
    n = devices(doc)
    if not n:
        return None
    per_chip = dig(doc, "flops.devices_per_chip") or 1
    return n / int(per_chip)


def cost_per_million_tokens(doc: Mapping[str, Any], price_per_chip_hour: float | None) -> float | None:
    """price per chip-hour x chips x hours per million tokens, at the steady-state tokens/s; None when unknown."""
    tokens_per_s, n = dig(doc, "steps.tokens_per_s"), chips(doc)
    if not price_per_chip_hour or not tokens_per_s or not n:
        return None
    return price_per_chip_hour * n * (1e6 / tokens_per_s) / SECONDS_PER_HOUR


def cost_per_step(doc: Mapping[str, Any], price_per_chip_hour: float | None) -> float | None:
    """price per chip-hour x chips x the all-in hours per step (every step after the first); None when unknown."""
    step_s, n = dig(doc, "steps.all_in_s"), chips(doc)
    if not price_per_chip_hour or not step_s or not n:
        return None
    return price_per_chip_hour * n * step_s / SECONDS_PER_HOUR


UNITS = ("seconds", "fraction", "rate", "bytes", "money", "flops", "tflops")
"""How a KPI's value is measured; the views pick the formatting for each."""


@dataclass(frozen=True, kw_only=True)
class Kpi:
    label: str
    value: Callable[[Mapping[str, Any]], float | None]
    unit: str
    lower_is_better: bool
    help: str
    why_missing: Callable[[Mapping[str, Any]], str] = lambda d: "not in this run's report"
    """Why the value is unknown, in words (shown on hover beside "n/a")."""
    neutral: bool = False
    """A property of the workload, neither better nor worse when it changes (FLOPs per step)."""


IMPORT_NO_STEPS = "an imported trace that marks no steps has no step time (its figures are over the whole trace)"


def _steps_missing(doc: Mapping[str, Any]) -> str:
    if dig(doc, "steps.note"):
        return str(dig(doc, "steps.note"))
    if dig(doc, "run.imported") and not dig(doc, "steps.count"):
        return IMPORT_NO_STEPS
    return "no steady step was recorded (mark steps with `tpu_perf.step()`)"


def _iteration_percentile(doc: Mapping[str, Any], key: str) -> float | None:
    """A percentile of the steady iterations, unless the loop runs ahead of the device: its
    iterations are then mostly dispatches, and their spread is not the steps' (`_spread_missing`)."""
    return None if dig(doc, "steps.runs_ahead") else dig(doc, key)


def _spread_missing(doc: Mapping[str, Any]) -> str:
    if dig(doc, "steps.runs_ahead"):
        return "the loop runs ahead of the device: its iterations are mostly dispatches, and their percentiles are not step times (Step time is the device's pace)"
    return _steps_missing(doc)


def _all_in_missing(doc: Mapping[str, Any]) -> str:
    return IMPORT_NO_STEPS if dig(doc, "run.imported") and not dig(doc, "steps.count") else "fewer than 2 steps"


def _peak_missing(doc: Mapping[str, Any]) -> str:
    chip = dig(doc, "flops.chip") or dig(doc, "run.hardware.device_kind") or "this chip"
    if dig(doc, "flops.per_step") is None:
        return "no FLOP count for the step program (XLA cost analysis gave none)"
    return f"no peak FLOP/s known for {chip}"


def _mfu_missing(doc: Mapping[str, Any]) -> str:
    return str(dig(doc, "mfu_detail.reason") or "needs the model's FLOPs and the chip's peak")


def _device_missing(doc: Mapping[str, Any]) -> str:
    said = dig(doc, "steps.device_reason")
    if said:
        return str(said)
    if dig(doc, "run.imported"):
        return "an imported trace has no per-step device time"
    return "the device time per step was not measured in this run"


def compile_seconds(doc: Mapping[str, Any]) -> float | None:
    """`compile.total_s`; unknown (not 0 s) when no compile was seen in a run without JAX: tpu-perf
    sees XLA compiles through JAX, so a PyTorch run's 0 compiles mean "not seen", not "none"."""
    if not dig(doc, "compile.count") and "jax" not in (dig(doc, "run.frameworks") or []):
        return None
    return dig(doc, "compile.total_s")


def compile_missing(doc: Mapping[str, Any]) -> str:
    """Why the compile time is unknown (`compile_seconds` is None): the report's words and the pages'."""
    said = dig(doc, "compile.reason")
    if said:
        return str(said)
    if dig(doc, "run.imported"):
        return "compiles cannot be seen in an imported trace"
    return "no compile seen: tpu-perf sees XLA compiles of JAX programs, and this run has none (PyTorch, torch-tpu)"


KPIS: tuple[Kpi, ...] = (
    Kpi(label="Step time", value=lambda d: dig(d, "steps.step_s"), unit="seconds", lower_is_better=True, help="steps.step_s, the run's one step time (as `report`, `ls` and the runs table show it): the steady step time (median wall-clock iteration with warm-up, compiled and traced steps left out; where the loop runs ahead of the device, its pace), or the all-in time where the steady sample is too small or leaves out over 25 % of the time: steps.step_basis", why_missing=_steps_missing),
    Kpi(label="All-in step time", value=lambda d: dig(d, "steps.all_in_s"), unit="seconds", lower_is_better=True, help="steps.all_in_s: wall time per step over every step after the first (recompiles and evals included; the extra time of tpu-perf's own trace window and FLOP count not)", why_missing=_all_in_missing),
    Kpi(label="p10 step time", value=lambda d: _iteration_percentile(d, "steps.iteration_p10_s"), unit="seconds", lower_is_better=True, help="steps.iteration_p10_s: 10th percentile of the steady iterations (n/a where the loop runs ahead of the device)", why_missing=_spread_missing),
    Kpi(label="p90 step time", value=lambda d: _iteration_percentile(d, "steps.iteration_p90_s"), unit="seconds", lower_is_better=True, help="steps.iteration_p90_s: 90th percentile of the steady iterations: stragglers, host stalls (n/a where the loop runs ahead of the device)", why_missing=_spread_missing),
    Kpi(label="Device time / step", value=lambda d: dig(d, "steps.device_median_s"), unit="seconds", lower_is_better=True, help="steps.device_median_s: dispatch to outputs ready, median", why_missing=_device_missing),
    Kpi(label="MFU", value=lambda d: d.get("mfu"), unit="fraction", lower_is_better=False, help="mfu (basis: mfu_basis): model FLOPs per second / chip peak", why_missing=_mfu_missing),
    Kpi(label="Hardware FLOPs utilisation", value=lambda d: dig(d, "flops.utilization"), unit="fraction", lower_is_better=False, help="flops.utilization: XLA-counted FLOPs per device / chip peak", why_missing=_peak_missing),
    Kpi(label="FLOPs / step", value=lambda d: dig(d, "flops.per_step"), unit="flops", lower_is_better=False, neutral=True, help="flops.per_step: FLOPs XLA counts in the step program, all devices (the workload: a change is neither better nor worse)", why_missing=lambda d: "no FLOP count for the step program (XLA cost analysis gave none; PyTorch eager has none)"),
    Kpi(label="Achieved TFLOP/s", value=lambda d: dig(d, "flops.achieved_tflops"), unit="tflops", lower_is_better=False, help="flops.achieved_tflops: FLOPs per step / step time", why_missing=lambda d: "needs FLOPs per step and a step time"),
    Kpi(label="Tokens/s", value=lambda d: dig(d, "steps.tokens_per_s"), unit="rate", lower_is_better=False, help="steps.tokens_per_s: tokens per step / step time", why_missing=lambda d: "tokens per step unknown: record with `--tokens-per-step N`"),
    Kpi(label="Peak HBM", value=lambda d: dig(d, "memory.peak_bytes"), unit="bytes", lower_is_better=True, help="memory.peak_bytes (source: memory.peak_source): the highest device's sampled peak, else the bytes live at the step program's peak by XLA's liveness, else XLA's memory analysis", why_missing=lambda d: "no device memory source (runtime sampler or XLA memory analysis)"),
    Kpi(label="Compile time", value=compile_seconds, unit="seconds", lower_is_better=True, help="compile.total_s: all backend compiles", why_missing=compile_missing),
)


KPI_WHY = {kpi.label: kpi.why_missing for kpi in KPIS}
"""Why each KPI is unknown for a run, by label (the run page's metrics say the same as the table)."""


def delta(value: float | None, base: float | None) -> float | None:
    """Relative change from the baseline; None when either is unknown or the baseline is zero."""
    if value is None or base is None or base == 0:
        return None
    return (value - base) / abs(base)


def kpi_rows(docs: Mapping[str, Mapping[str, Any]], baseline: str, price_per_chip_hour: float | None = None) -> pd.DataFrame:
    """One row per KPI and run: value, unit, relative delta to the baseline run (None against an
    unknown value on either side)."""
    kpis = list(KPIS)
    if price_per_chip_hour:
        kpis.append(Kpi(label="Cost / 1M tokens", value=lambda d: cost_per_million_tokens(d, price_per_chip_hour), unit="money", lower_is_better=True, help="price per chip-hour x chips (devices / devices per chip) x hours per 1M tokens at the steady tokens/s", why_missing=lambda d: "needs tokens/s: record with `--tokens-per-step N`"))
        kpis.append(Kpi(label="Cost / step", value=lambda d: cost_per_step(d, price_per_chip_hour), unit="money", lower_is_better=True, help="price per chip-hour x chips (devices / devices per chip) x the all-in hours per step", why_missing=lambda d: "needs the all-in step time and the device count"))
    rows = []
    for kpi in kpis:
        base = kpi.value(docs[baseline]) if baseline in docs else None
        for label, doc in docs.items():
            value = kpi.value(doc)
            rows.append({"kpi": kpi.label, "run": label, "value": value, "unit": kpi.unit, "delta": None if label == baseline else delta(value, base), "lower_is_better": kpi.lower_is_better, "neutral": kpi.neutral, "help": kpi.help, "why": None if value is not None else kpi.why_missing(doc)})
    return pd.DataFrame(rows)


def fusion_side_by_side(docs: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Fusion counts of each run's step program: totals and per kind."""
    columns = {}
    for label, doc in docs.items():
        hlo = doc.get("hlo") or {}
        if hlo.get("fusions") is None:
            continue
        column = {"fusions": hlo.get("fusions"), "top-level instructions": hlo.get("top_level_instructions")}
        column.update({f"kind {k}": v for k, v in sorted((hlo.get("fusions_by_kind") or {}).items())})
        columns[label] = column
    return pd.DataFrame(columns).fillna(0).astype("int64") if columns else pd.DataFrame()


DIFF_SECTIONS = ("config", "env", "versions", "hardware", "tags", "host_facts", "git")
"""Manifest parts compared by the configuration diff (flags, versions, batch, chip...)."""


def _flatten(value: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            _flatten(inner, f"{prefix}.{key}", out)
    elif value not in (None, {}, []):
        out[prefix] = " ".join(map(str, value)) if isinstance(value, list) else str(value)


def config_diff(manifests: Mapping[str, Mapping[str, Any]], *, only_different: bool = True) -> pd.DataFrame:
    """Configuration and environment side by side, one row per setting; by default only those that differ."""
    flat: dict[str, dict[str, str]] = {}
    for label, manifest in manifests.items():
        row: dict[str, str] = {}
        for part in DIFF_SECTIONS:
            _flatten(manifest.get(part), part, row)
        _flatten(manifest.get("command"), "command", row)
        _flatten(manifest.get("frameworks"), "frameworks", row)
        flat[label] = row
    table = pd.DataFrame(flat).fillna("—").sort_index()
    if only_different and not table.empty:
        table = table[[len(set(values)) > 1 for values in table.itertuples(index=False, name=None)]]  # not nunique(axis=1): 10x slower (a function call per row)
    table.index.name = "setting"
    return table


def labels_for(names: Sequence[tuple[str, str]]) -> list[str]:
    """Display labels for (id, name) pairs: the name, with the id appended where names repeat."""
    counts: dict[str, int] = {}
    for _, name in names:
        counts[name] = counts.get(name, 0) + 1
    return [name if counts[name] == 1 else f"{name} · {run_id[-6:]}" for run_id, name in names]
