"""`tpu-perf doctor`: is this environment able to record, trace and compile for TPUs?

One `Check` per question, each with a verdict (`ok`, `fail`, or `skip` when it does not apply
here, e.g. no TPU attached) and, when it fails, the command that fixes it. Package pairings are
read from the packages' own metadata (`tpu_perf.pairing`); the profiler and the devices from a
child process (`probe.py`), because a mismatched libtpu kills the process that traces.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tpu_perf.doctor.probe import ProbeResult, run_probe
from tpu_perf.pairing import Dists, Pairing, distributions, pairings, version
from tpu_perf.store import layout

PACKAGES = ("tpu-perf", "jax", "jaxlib", "libtpu", "torch", "torch-tpu", "xprof", "tpu-info", "grpcio")
MIN_PYTHON = (3, 11)


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    verdict: str
    """`ok`, `fail`, or `skip` (does not apply to this machine or environment)."""
    detail: str
    fix: str | None = None


@dataclass(frozen=True, kw_only=True)
class DoctorOptions:
    site: tuple[str, ...] = ()
    """Folders whose packages shadow the environment's (as a PYTHONPATH entry would)."""
    store: str = layout.DEFAULT_STORE
    tpu_metrics_addr: str | None = None
    """HOST:PORT asked for explicitly: then the metric service must answer."""
    probe: bool = True
    """Start jax in a child process (devices, profiler); off: those checks are skipped."""


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(c.verdict != "fail" for c in self.checks)


def check_python() -> Check:
    v = sys.version_info
    text = f"{v.major}.{v.minor}.{v.micro}"
    if (v.major, v.minor) < MIN_PYTHON:
        return Check(name="python", verdict="fail", detail=f"Python {text}; tpu-perf needs >= 3.11", fix="use Python 3.11 or newer")
    note = "" if (v.major, v.minor) >= (3, 12) else " (jax >= 0.11, and jax[tpu] with torch-tpu in one environment, need >= 3.12)"
    return Check(name="python", verdict="ok", detail=f"Python {text}{note}")


def check_packages(dists: Dists) -> Check:
    parts = [f"{name} {version(dists, name) or 'not installed'}" for name in PACKAGES]
    return Check(name="packages", verdict="ok", detail=", ".join(parts))


def _pair_fix(p: Pairing) -> str:
    if p.dependency == "libtpu" and p.package == "jax":
        return f"pip install 'jax[tpu]=={p.version}' (tpu-perf[tpu]); torch-tpu goes in its own environment on Python 3.11 (docs/install.md)"
    if p.dependency == "libtpu":
        return f"pip install 'torch-tpu=={p.version}' in its own environment (tpu-perf[torch-tpu]), apart from jax[tpu] on Python 3.11"
    if p.dependency == "jaxlib":
        return f"pip install 'jax=={p.version}' 'jaxlib=={p.version}'"
    return f"pip install '{p.requirement}'"


def check_pairing(p: Pairing) -> Check:
    name = f"{p.package} -> {p.dependency}"
    source = f" (its {p.extra} extra)" if p.extra else ""
    if p.ok:
        return Check(name=name, verdict="ok", detail=f"{p.package} {p.version} needs {p.requirement}{source}; found {p.dependency} {p.found}")
    found = f"{p.dependency} {p.found}" if p.found else f"no {p.dependency}"
    return Check(name=name, verdict="fail", detail=f"mismatched pair: {p.package} {p.version} needs {p.requirement}{source}, found {found}", fix=_pair_fix(p))


def check_pairings(dists: Dists) -> list[Check]:
    checks = [check_pairing(p) for p in pairings(dists)]
    if version(dists, "jax") and not version(dists, "libtpu"):
        checks.append(Check(name="jax -> libtpu", verdict="skip", detail="no libtpu installed: jax runs on CPU/GPU here"))
    if os.environ.get("TPU_LIBRARY_PATH"):  # jax and torch-tpu load this file, whatever the package says
        checks.append(Check(name="libtpu path", verdict="ok", detail=f"TPU_LIBRARY_PATH={os.environ['TPU_LIBRARY_PATH']}: this libtpu.so is loaded, not the libtpu package's; the pairs above assume the package's"))
    if not version(dists, "jax") and not version(dists, "torch-tpu"):
        checks.append(Check(name="framework", verdict="skip", detail="neither jax nor torch-tpu is installed: nothing to pair"))
    return checks


def check_profiler(probe: ProbeResult | None, dists: Dists) -> Check:
    if probe is None:
        return Check(name="profiler", verdict="skip", detail="not probed (--no-probe)" if version(dists, "jax") else "jax not installed")
    if probe.profiler_ok:
        return Check(name="profiler", verdict="ok", detail=f"jax.profiler traced on {probe.devices['platform'] if probe.devices else '?'} with the TPU plugin loaded as on a TPU VM")
    how = "timed out" if probe.returncode is None else f"was killed by signal {-probe.returncode}" if probe.returncode < 0 else "survived a profiler API mismatch this time" if probe.returncode == 0 else f"exited {probe.returncode}"
    bad = next((p for p in pairings(dists) if p.package == "jax" and p.dependency == "libtpu" and not p.ok), None)
    cause = f"; cause: jax {bad.version} with libtpu {bad.found} (jax pins {bad.requirement})" if bad else ""
    fix = _pair_fix(bad) if bad else "run `python -c \"import jax; jax.profiler.start_trace('/tmp/t')\"` to see the error"
    return Check(name="profiler", verdict="fail", detail=f"a jax.profiler trace {how} ({probe.error or 'no message'}){cause}", fix=fix)


def check_chip(probe: ProbeResult | None) -> Check:
    from tpu_perf.hardware import lookup_chip

    if probe is None or probe.devices is None:
        return Check(name="chip", verdict="skip", detail="no device list (jax not installed, not probed, or it failed to start)")
    d = probe.devices
    if d["platform"] == "cpu":
        return Check(name="chip", verdict="skip", detail=f"no accelerator attached: {d['count']} CPU device(s)")
    chip = lookup_chip(d["device_kind"])
    if chip is None:
        return Check(name="chip", verdict="fail", detail=f"{d['count']} x {d['device_kind']} ({d['platform']}) is not in the chip catalogue", fix="record with --chip NAME (`tpu-perf chips` lists them) or measure it: `tpu-perf calibrate --save`")
    return Check(name="chip", verdict="ok", detail=f"{d['count']} x {d['device_kind']} = {chip.name} (catalogue: {chip.peak_tflops.get('bf16', 'n/a')} bf16 TFLOP/s per chip)")


def check_metric_service(addr: str | None, probe: ProbeResult | None) -> Check:
    """libtpu's metric service, read with the recorder's own client (`LibtpuSource`)."""
    from tpu_perf.collectors.runtime.libtpu import LibtpuSource, resolve_address

    address, origin = resolve_address(addr)
    on_tpu = bool(probe and probe.devices and probe.devices["platform"] == "tpu")
    required = origin != "default" or on_tpu
    try:
        source = LibtpuSource(address, interval_s=1.0, timeout_s=1.0, origin=origin)
    except ImportError as exc:
        verdict = "fail" if required else "skip"
        return Check(name="metric service", verdict=verdict, detail=f"cannot query it: {exc}", fix="pip install 'tpu-perf[tpu]' (tpu-info and grpcio)" if required else None)
    try:
        rows = source.sample()
    finally:
        source.close()
    if source.state == "live":
        devices = sorted({r["device"] for r in rows if r.get("device")})
        total = next((r["limit_bytes"] for r in rows if r.get("limit_bytes")), None)
        hbm = f", {total / 2**30:.1f} GiB HBM each" if total else ""
        return Check(name="metric service", verdict="ok", detail=f"libtpu answered at {address} ({origin}): {len(devices)} device(s){hbm}")
    if required:
        return Check(name="metric service", verdict="fail", detail=f"no answer at {address} ({origin})", fix="libtpu serves it only while a program holds the TPU: start one, or pass the port it uses (--tpu-metrics-addr HOST:PORT, TPU_RUNTIME_METRICS_PORTS)")
    return Check(name="metric service", verdict="skip", detail=f"no TPU attached and nothing answers at {address}")


def tpu_attached() -> bool:
    """A TPU VM exposes its chips as /dev/accel* (v4, v5p) or VFIO groups (v5e, v6e), as tpu-info finds them."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def check_tpu_metadata(dists: Dists) -> Check:
    """libtpu asks the GCE metadata server for the TPU's topology, retrying for minutes when there
    is none (off GCP): torch-tpu then stalls inside the first backward() on a CPU machine. jax sets
    TPU_SKIP_MDS_QUERY itself when it loads libtpu; torch-tpu does not."""
    name = "libtpu metadata"
    if not version(dists, "libtpu") or not version(dists, "torch-tpu"):
        return Check(name=name, verdict="skip", detail="torch-tpu with libtpu not installed")
    if tpu_attached():
        return Check(name=name, verdict="ok", detail="a TPU is attached: libtpu reads its topology from the metadata server")
    if os.environ.get("TPU_SKIP_MDS_QUERY"):
        return Check(name=name, verdict="ok", detail=f"no TPU attached and TPU_SKIP_MDS_QUERY={os.environ['TPU_SKIP_MDS_QUERY']}: libtpu will not wait on the metadata server")
    return Check(name=name, verdict="fail", detail="no TPU attached and TPU_SKIP_MDS_QUERY unset: with torch-tpu auto-loaded, libtpu retries the GCE metadata server for minutes (a training script stalls in backward())", fix="export TPU_SKIP_MDS_QUERY=1, or TORCH_DEVICE_BACKEND_AUTOLOAD=0 to keep torch-tpu from loading on this machine")


def check_store(store: str) -> Check:
    """Write and delete one file in the store (or, for a local store not made yet, where it would go)."""
    from tpu_perf.store.fs import filesystem, is_local, join

    try:
        fs, base = filesystem(store)
        if is_local(store):
            where = Path(base)
            while not where.exists() and where != where.parent:
                where = where.parent
            if not where.is_dir():
                raise NotADirectoryError(f"{where} is a file, not a folder")
            with tempfile.NamedTemporaryFile(dir=where, prefix=".tpu-perf-doctor-"):
                pass
        else:
            probe = join(base, f".tpu-perf-doctor-{os.getpid()}")
            fs.pipe(probe, b"ok")
            fs.rm(probe)
    except Exception as exc:
        return Check(name="store", verdict="fail", detail=f"{store}: not writable ({type(exc).__name__}: {exc})", fix="pass a writable --store (a folder or an fsspec URL) or set TPU_PERF_STORE")
    return Check(name="store", verdict="ok", detail=f"{store}: writable")


def check_xprof(dists: Dists) -> Check:
    found = version(dists, "xprof")
    if found:
        return Check(name="xprof", verdict="ok", detail=f"xprof {found}: open a run's trace with `xprof --logdir RUN/trace`")
    return Check(name="xprof", verdict="fail", detail="xprof is not installed: traces cannot be opened or turned into op tables", fix="pip install 'tpu-perf[traces]'")


def diagnose(options: DoctorOptions) -> Diagnosis:
    """Every check, in the order a user would fix them."""
    dists = distributions(options.site)
    probe = run_probe(options.site) if (options.probe and version(dists, "jax")) else None
    checks = [check_python(), check_packages(dists), *check_pairings(dists), check_tpu_metadata(dists), check_profiler(probe, dists), check_chip(probe)]
    checks += [check_metric_service(options.tpu_metrics_addr, probe), check_store(options.store), check_xprof(dists)]
    return Diagnosis(checks=tuple(checks))
