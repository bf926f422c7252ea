"""One run as the handful of numbers a regression check compares, read through ONE adapter.

`run_values(run)` is the only place `tpu-perf check` (and a saved baseline) reads a run: the
report's steady-state numbers, its status, and the fingerprint of what makes two runs comparable.
A saved baseline file holds `RunValues.to_dict()` per run, so a file and a run folder compare alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tpu_perf.analyzers.all_in import Exclusion, needs_all_in
from tpu_perf.analyzers.flops import run_chip
from tpu_perf.store import Run

if TYPE_CHECKING:
    from tpu_perf.analyzers.report import Report
    from tpu_perf.analyzers.steps import StepStats

FINGERPRINT_FIELDS: tuple[str, ...] = (
    "chip", "chip_count", "topology", "framework",
    "jax", "jaxlib", "libtpu", "torch", "torch_tpu",
    "xla_flags", "libtpu_init_args", "tokens_per_step", "model",
)
"""What must match for two runs' numbers to be comparable (a difference is NOT_COMPARABLE)."""

_FRAMEWORK_PACKAGES: dict[str, tuple[str, ...]] = {
    "jax": ("jax", "jaxlib", "libtpu"),
    "torch": ("torch", "torch-tpu", "libtpu"),
}
"""Versions that matter per framework the run used (torch installed beside a JAX run does not)."""


@dataclass(frozen=True, kw_only=True)
class RunValues:
    """The numbers of one run that a check compares; None where the run does not know one."""

    run_id: str
    name: str
    status: str
    """completed | failed | interrupted | crashed | running: only `completed` runs are good data."""
    step_s: float | None
    """The steady-state step time in seconds (`StepStats.steady_step_s`): what the `step_time`
    metric compares, over `steady_samples_s`. The run's headline is `headline_step_s`."""
    mfu: float | None
    tokens_per_s: float | None
    peak_memory_bytes: int | None
    peak_memory_source: str | None
    """Where the peak came from: a runtime source (libtpu, jax, nvml, ...) or `xla_memory_analysis`."""
    compiles_after_warmup: int | None
    steady_steps: int
    fingerprint: Mapping[str, str | None] = field(default_factory=dict)
    aot: tuple[Mapping[str, Any], ...] = ()
    """TPU compile metrics per topology (the report's `aot` section), empty when the run has none."""
    all_in_s: float | None = None
    """Wall time per step over every step after the first (`analyzers.all_in`)."""
    excluded: tuple[Exclusion, ...] = ()
    excluded_share: float | None = None
    steady_samples_s: tuple[float, ...] = ()
    """The steady steps' iterations in order (where the loop runs ahead of the device, its per-step
    pace: `steps.pace_samples`): a single run's interval (batch means); not saved."""
    all_in_tool_steps: int = 0
    """Steps after the first whose extra time the all-in time leaves out as tpu-perf's own (`all_in.tool_steps`)."""
    all_in_samples_s: tuple[float, ...] = ()
    """The iterations of every step after the first, in order, tpu-perf's own as the all-in time
    counts them (`all_in.counted_durations`); not saved."""
    flops_per_step: float | None = None
    """FLOPs per step (XLA's cost analysis, the FLOP counter or --flops-per-step): exact tier."""
    hlo_hash: str | None = None
    """Hash of the step's optimized HLO as a computation (`analyzers.exact.hlo_hash`): exact tier."""
    bytes_accessed: float | None = None
    """Bytes the step program accesses per call (XLA's cost analysis, `exact.step_bytes_accessed`): exact tier."""
    error: str | None = None
    """Why a run that did not complete stopped (its recorded error message); None when it did."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """Which code ran, where and how: git sha (and dirty), command, host, tpu-perf version (`provenance`)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """The run's tags (`record --tag`): `check --pair-by tag:KEY` matches runs by one of them."""
    headline_step_s: float | None = None
    """The run's one headline step time (`StepStats.step_s`): what the report, `ls`, the dashboard
    and the notebook show for it; `check --json` lists it per run."""
    step_basis: str | None = None
    """What `headline_step_s` is (`StepStats.step_basis`: median iteration, device pace, mean
    iteration, all-in); None in a baseline saved before report version 3."""
    step_basis_reason: str | None = None
    """Why the headline is the all-in time (`StepStats.step_basis_reason`)."""
    ttft_p99_s: float | None = None
    """Generation: time to first token, p99 over requests (`inference.ttft_s.p99`); None without requests."""
    tpot_p50_s: float | None = None
    """Generation: time per output token, median over requests (`inference.tpot_s.p50`)."""
    generated_tokens_per_s: float | None = None
    """Generation: generated tokens over the requests' wall time (`inference.tokens_per_s`)."""
    mbu: float | None = None
    """Generation: memory-bandwidth utilisation of a decode step (`inference.mbu`)."""
    tpot_samples_s: tuple[float, ...] = ()
    """Each request's time per output token (a single run's interval); not saved."""
    cpu_step_s: float | None = None
    """The process's CPU time per steady step (`StepStats.cpu_median_s`): `check --timing cpu`'s
    timing metric on a CPU runner (`analyzers.timing`); None where the run did not record it."""
    cpu_samples_s: tuple[float, ...] = ()
    """The steady steps' CPU times in order (a single run's interval); not saved."""

    @property
    def all_in_reason(self) -> str | None:
        """Why this run's comparisons must use the all-in time: the reason its headline is the all-in
        time (one decision, `steps.headline_step_time`); None: the steady step time will do. A
        baseline saved before the headline carried its basis decides by `all_in.needs_all_in`."""
        if self.step_basis is not None:
            return self.step_basis_reason
        return needs_all_in(self.steady_steps, self.excluded_share)

    def headline(self) -> dict[str, Any]:
        """The run's one answer as the report names it (`check --json`'s `runs`): its headline step
        time and basis, tokens/s, MFU, peak memory and program hash."""
        return {
            "run_id": self.run_id, "name": self.name, "status": self.status, "step_s": self.headline_step_s, "step_basis": self.step_basis,
            "tokens_per_s": self.tokens_per_s, "mfu": self.mfu, "peak_memory_bytes": self.peak_memory_bytes, "peak_memory_source": self.peak_memory_source,
            "program_hash": self.hlo_hash,
        }

    SAMPLES: ClassVar[tuple[str, ...]] = ("steady_samples_s", "all_in_samples_s", "tpot_samples_s", "cpu_samples_s")
    """The per-step (per-request) samples a single run's interval is made of: left out of a saved
    baseline, kept with a run's saved report (`to_dict(samples=True)`)."""

    def to_dict(self, *, samples: bool = False) -> dict[str, Any]:
        kept = {name: list(getattr(self, name)) for name in self.SAMPLES} if samples else {}
        return kept | {
            "run_id": self.run_id, "name": self.name, "status": self.status, "step_s": self.step_s,
            "mfu": self.mfu, "tokens_per_s": self.tokens_per_s, "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_source": self.peak_memory_source, "compiles_after_warmup": self.compiles_after_warmup,
            "steady_steps": self.steady_steps, "fingerprint": dict(self.fingerprint), "aot": [dict(a) for a in self.aot],
            "all_in_s": self.all_in_s, "excluded": [vars(e) for e in self.excluded], "excluded_share": self.excluded_share,
            "all_in_tool_steps": self.all_in_tool_steps, "flops_per_step": self.flops_per_step, "hlo_hash": self.hlo_hash, "bytes_accessed": self.bytes_accessed, "tags": dict(self.tags),
            "provenance": dict(self.provenance), "error": self.error,
            "headline_step_s": self.headline_step_s, "step_basis": self.step_basis, "step_basis_reason": self.step_basis_reason,
            "ttft_p99_s": self.ttft_p99_s, "tpot_p50_s": self.tpot_p50_s, "generated_tokens_per_s": self.generated_tokens_per_s, "mbu": self.mbu,
            "cpu_step_s": self.cpu_step_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunValues:
        """Inverse of `to_dict` (a saved baseline's run); KeyError/TypeError/ValueError on a bad entry."""
        def num(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        memory = data.get("peak_memory_bytes")
        compiles = data.get("compiles_after_warmup")
        return cls(
            run_id=str(data["run_id"]), name=str(data.get("name") or data["run_id"]), status=str(data["status"]),
            step_s=num("step_s"), mfu=num("mfu"), tokens_per_s=num("tokens_per_s"),
            peak_memory_bytes=None if memory is None else int(memory), peak_memory_source=data.get("peak_memory_source"),
            compiles_after_warmup=None if compiles is None else int(compiles), steady_steps=int(data.get("steady_steps") or 0),
            fingerprint={str(k): None if v is None else str(v) for k, v in dict(data.get("fingerprint") or {}).items()},
            aot=_aot_entries(data.get("aot")), all_in_s=num("all_in_s"), excluded_share=num("excluded_share"),
            excluded=tuple(Exclusion(**e) for e in data.get("excluded") or ()), all_in_tool_steps=int(data.get("all_in_tool_steps") or 0),
            flops_per_step=num("flops_per_step"), bytes_accessed=num("bytes_accessed"), hlo_hash=None if data.get("hlo_hash") is None else str(data["hlo_hash"]),
            tags={str(k): str(v) for k, v in dict(data.get("tags") or {}).items()},
            provenance=dict(data.get("provenance") or {}), error=None if data.get("error") is None else str(data["error"]),
            headline_step_s=num("headline_step_s"), step_basis=None if data.get("step_basis") is None else str(data["step_basis"]),
            step_basis_reason=None if data.get("step_basis_reason") is None else str(data["step_basis_reason"]),
            ttft_p99_s=num("ttft_p99_s"), tpot_p50_s=num("tpot_p50_s"), generated_tokens_per_s=num("generated_tokens_per_s"), mbu=num("mbu"),
            cpu_step_s=num("cpu_step_s"),
            **{name: tuple(float(v) for v in data[name]) for name in cls.SAMPLES if data.get(name) is not None},
        )


def run_values(run: Run, report: Report | None = None) -> RunValues:
    """The check's numbers for `run`, from its report (`report`, when the caller has built it, else
    built here); the fingerprint from its manifest."""
    from tpu_perf.analyzers.exact import step_bytes_accessed
    from tpu_perf.analyzers.report import build_report

    report = report if report is not None else build_report(run)
    steps, memory = report.steps, report.memory
    return RunValues(
        run_id=run.id,
        name=run.name,
        status=run.status,
        step_s=steps.steady_step_s,
        mfu=report.mfu.value,
        tokens_per_s=steps.tokens_per_s,
        peak_memory_bytes=memory.peak_bytes,
        peak_memory_source=memory.peak_source,
        compiles_after_warmup=report.compile.after_warmup if report.compile is not None else None,
        steady_steps=steps.steady,
        fingerprint=fingerprint(run),
        aot=tuple({k: getattr(a, k) for k in AOT_FIELDS} for a in report.aot or ()),
        all_in_s=steps.all_in_s, excluded=steps.excluded, excluded_share=steps.excluded_share, all_in_tool_steps=steps.all_in_tool_steps,
        flops_per_step=report.flops.per_step, hlo_hash=report.program_hash, bytes_accessed=step_bytes_accessed(run),
        tags={str(k): str(v) for k, v in run.tags.items()}, provenance=provenance(run),
        error=(run.manifest.get("error") or {}).get("message"),
        headline_step_s=steps.step_s, step_basis=steps.step_basis, step_basis_reason=steps.step_basis_reason,
        cpu_step_s=steps.cpu_median_s,
        **step_samples(run, steps),
        **serving_values(run, report),
    )


def serving_values(run: Run, report: Report) -> dict[str, Any]:
    """The inference metrics `check` and `history` compare (the report's `inference` section), and
    each request's time per output token for a single run's interval; nothing for a training run."""
    i = report.inference
    if i is None:
        return {}
    from tpu_perf.analyzers.inference import request_tpots

    return {
        "ttft_p99_s": i.ttft_s.p99 if i.ttft_s else None, "tpot_p50_s": i.tpot_s.p50 if i.tpot_s else None,
        "generated_tokens_per_s": i.tokens_per_s, "mbu": i.mbu, "tpot_samples_s": request_tpots(run),
    }


def provenance(run: Run) -> dict[str, Any]:
    """Which code ran (git sha, dirty, repository root), the command, the host and tpu-perf's version,
    from the run's manifest; None where it did not record one."""
    m = run.manifest
    git = m.get("git") or {}
    return {
        "git_sha": git.get("sha"), "git_dirty": git.get("dirty"), "git_root": git.get("root"),
        "command": m.get("command"), "host": m.get("host"), "tpu_perf": (m.get("versions") or {}).get("tpu-perf"),
    }


def step_samples(run: Run, stats: StepStats) -> dict[str, tuple[float, ...]]:
    """The steady iterations (where the loop runs ahead of the device, its per-step pace), the
    iterations after the first step and the steady steps' CPU times, in order (a single run's
    interval), from the same steady sample and steady step time as the report's (`stats`)."""
    import pandas as pd

    from tpu_perf.analyzers.all_in import after_first, counted_durations
    from tpu_perf.analyzers.steps import pace_samples, run_steps, steady_mask

    steps = run_steps(run)
    if steps.empty:
        return {"steady_samples_s": (), "all_in_samples_s": (), "cpu_samples_s": ()}
    durations = steps["duration_s"].to_numpy(dtype=float)
    mask = steady_mask(steps, stats.warmup).to_numpy()
    steady = pace_samples(steps, mask) if stats.steady_basis == "device pace" else durations[mask]  # a loop that runs ahead: its device's pace
    counted, _ = counted_durations(steps, stats.warmup, stats.steady_step_s, runs_ahead=stats.runs_ahead)
    cpu = pd.to_numeric(steps["cpu_s"], errors="coerce").to_numpy(dtype=float)[mask] if "cpu_s" in steps and stats.cpu_median_s is not None else ()
    return {"steady_samples_s": tuple(float(d) for d in steady if d == d), "all_in_samples_s": tuple(float(d) for d in counted[after_first(steps, runs_ahead=stats.runs_ahead)] if d == d),
            "cpu_samples_s": tuple(float(d) for d in cpu if d == d)}


AOT_FIELDS: tuple[str, ...] = ("topology", "chip", "chips", "flops_per_step", "peak_hbm_bytes", "optimal_step_s")
"""The parts of a report's `aot` entry that a check compares or names (a saved baseline keeps these)."""


def _aot_entries(section: Any) -> tuple[Mapping[str, Any], ...]:
    """The `aot` section as per-topology dicts of AOT_FIELDS: absent, one dict, or a list of them."""
    entries = [section] if isinstance(section, Mapping) else list(section) if isinstance(section, list | tuple) else []
    return tuple({k: entry.get(k) for k in AOT_FIELDS} for entry in entries if isinstance(entry, Mapping))


def fingerprint(run: Run) -> dict[str, str | None]:
    """What the run ran on and with: chip, count, topology, framework, versions, flags, workload."""
    m = run.manifest
    hardware, config, env = m.get("hardware") or {}, m.get("config") or {}, m.get("env") or {}
    versions = m.get("versions") or {}
    frameworks = sorted(m.get("frameworks") or [])
    chip = run_chip(run)
    wanted = {pkg for fw in frameworks for pkg in _FRAMEWORK_PACKAGES.get(fw, ())}

    def version(package: str) -> str | None:
        return versions.get(package) if package in wanted else None

    def text(value: Any) -> str | None:
        return None if value in (None, "", []) else str(value)

    return {
        "chip": chip.name if chip else text(hardware.get("device_kind")),
        "chip_count": text(hardware.get("device_count")),
        "topology": text(hardware.get("topology") or env.get("TPU_TOPOLOGY") or env.get("TPU_ACCELERATOR_TYPE")),
        "framework": text("+".join(frameworks)),
        "jax": version("jax"), "jaxlib": version("jaxlib"), "libtpu": version("libtpu"),
        "torch": version("torch"), "torch_tpu": version("torch-tpu"),
        "xla_flags": text(env.get("XLA_FLAGS")), "libtpu_init_args": text(env.get("LIBTPU_INIT_ARGS")),
        "tokens_per_step": text(config.get("tokens_per_step")),
        "model": text(config.get("model") or (config.get("architecture") or {}).get("name") or config.get("hf_config")),
    }
