"""Kineto import speed and peak memory on a >= 100 MB trace, against Holistic Trace Analysis (HTA).

The trace is made here: a real torch.profiler capture of a small CPU model, whose events are
replicated (shifted in time) until the JSON passes the target size. Never committed.

Each loader runs in its own subprocess, timed from after its imports; peak memory is the peak RSS
(VmHWM, reset after the imports) minus the RSS after those imports. Loaders:
- tpu-perf: `read_kineto`, i.e. all four tables (ops, timeline, device_steps, devices);
- hta: `hta.common.trace.parse_trace_file`, the per-rank loader `TraceAnalysis` runs;
- hta-json: `hta.common.trace_parser.parse_trace_dataframe`, HTA's JSON + DataFrame stage alone;
- json+pandas: `json.load` + `pd.DataFrame(traceEvents)`, the stand-in when HTA is not installed.
HTA is bench-only: `pip install --no-deps HolisticTraceAnalysis pyyaml` (its jupyterlab dependency
is not needed to load traces).

Run: PYTHONPATH=$PWD python bench/bench_kineto_import.py [--mb 110] [--repeat 3] [--layout lines|indent|min]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

import subprocess_measure  # bench/ is sys.path[0] when a bench runs as a script

LOADERS = {
    "tpu-perf": ("from tpu_perf.traces.kineto import read_kineto", "t = read_kineto(P)"),
    "hta": ("from hta.common.trace import parse_trace_file", "parse_trace_file(str(P))"),
    "hta-json": ("from hta.common.trace_parser import parse_trace_dataframe; from hta.configs.parser_config import ParserConfig",
                 "parse_trace_dataframe(str(P), ParserConfig.get_default_cfg())"),
    "json+pandas": ("import json, pandas as pd", "d = pd.DataFrame(json.load(open(P))['traceEvents'])"),
}
HTA_PUBLISHED_MB_S = 18.5  # HTA's documented loading speed, about 17-20 MB/s


def make_trace(target_mb: float, out: Path, layout: str) -> Path:
    import torch
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            with torch.profiler.record_function("ProfilerStep#0"):
                loss = model(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
    src = out.with_suffix(".seed.json")
    prof.export_chrome_trace(str(src))
    doc = json.loads(src.read_text())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    span = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events)
    copies = int(target_mb * 1e6 / len(json.dumps(events))) + 1
    dump = {"lines": json.dumps, "indent": lambda e: json.dumps(e, indent=2), "min": lambda e: json.dumps(e, separators=(",", ":"))}[layout]
    with open(out, "w") as f:
        header = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write("{\n" + json.dumps(header)[1:-1] + ',\n"traceEvents": [\n')
        for c in range(copies):
            for i, e in enumerate(events):
                e2 = dict(e, ts=e["ts"] + c * span * 1.01)
                if e2.get("name", "").startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{c}"
                f.write(("" if c == 0 and i == 0 else ",\n") + dump(e2))
        f.write("\n]}\n")
    return out


def measure(loader: str, path: Path) -> tuple[float, float] | str:
    setup, run = LOADERS[loader]
    return subprocess_measure.measure(setup, run, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=110)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layout", choices=("lines", "indent", "min"), default="lines")
    ap.add_argument("--loaders", default="tpu-perf,hta,hta-json,json+pandas")
    args = ap.parse_args()
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    with tempfile.TemporaryDirectory() as tmp:
        path = make_trace(args.mb, Path(tmp) / "big.json", args.layout)
        size = path.stat().st_size
        print(f"trace: {size / 1e6:.1f} MB ({args.layout} layout), {args.repeat} runs per loader, medians")
        med: dict[str, tuple[float, float]] = {}
        for name in args.loaders.split(","):
            runs = [measure(name, path) for _ in range(args.repeat)]
            ok = [r for r in runs if not isinstance(r, str)]
            if not ok:
                print(f"{name:12s} not available: {runs[0]}")
                continue
            secs, peak = statistics.median(r[0] for r in ok), statistics.median(r[1] for r in ok)
            med[name] = (secs, peak)
            print(f"{name:12s} {secs:6.2f} s {size / 1e6 / secs:7.1f} MB/s  peak +{peak / 1e6:6.0f} MB = {peak / size:4.2f}x JSON"
                  f"   (runs: {', '.join(f'{r[0]:.2f}s' for r in ok)})")
    ours = med.get("tpu-perf")
    if not ours:
        return
    print(f"tpu-perf peak memory: {ours[1] / size:.2f}x the JSON size (target <= 2x)")
    ref = "hta" if "hta" in med else "json+pandas"
    label = "HTA parse_trace_file (TraceAnalysis' loader)" if ref == "hta" else "json.load + pandas (STAND-IN: HTA not installed or not run)"
    if ref in med:
        print(f"speed vs {label}: {med[ref][0] / ours[0]:.1f}x (target >= 5x); memory {med[ref][1] / max(ours[1], 1):.1f}x less")
    if "hta-json" in med:
        print(f"speed vs HTA's JSON + DataFrame stage alone: {med['hta-json'][0] / ours[0]:.1f}x")
    print(f"speed vs HTA's published ~{HTA_PUBLISHED_MB_S} MB/s: {size / 1e6 / ours[0] / HTA_PUBLISHED_MB_S:.1f}x")


if __name__ == "__main__":
    main()
