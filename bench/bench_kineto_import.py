"""Import speed and peak memory on a >= 100 MB Kineto trace, against a whole-document JSON load and,
when installed, Holistic Trace Analysis's loader (HTA: ~17-20 MB/s, peak 5-6x the JSON size).

The trace is made here: a real torch.profiler capture of a small CPU model, whose steps are
replicated (shifted in time) until the JSON passes the target size. Never committed.
Run: PYTHONPATH=$PWD python bench/bench_kineto_import.py [target_mb]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LOADERS = {
    "tpu-perf": "from tpu_perf.traces.kineto import read_kineto; t = read_kineto(P); n = len(t.ops)",
    "json.load": "import json; d = json.load(open(P)); n = len(d['traceEvents'])",
    "hta": "from hta.common.trace_parser import parse_trace_dataframe; n = 1; parse_trace_dataframe(str(P), {})",
}


def make_trace(target_mb: float, out: Path) -> Path:
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
    size_per_copy = len(json.dumps(events))
    copies = int(target_mb * 1e6 / size_per_copy) + 1
    with open(out, "w") as f:
        header = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write("{\n" + json.dumps(header)[1:-1] + ',\n"traceEvents": [\n')
        for c in range(copies):
            for i, e in enumerate(events):
                e2 = dict(e, ts=e["ts"] + c * span * 1.01)
                if e2.get("name", "").startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{c}"
                f.write(("" if c == 0 and i == 0 else ",\n") + json.dumps(e2))
        f.write("\n]}\n")
    return out


def measure(loader: str, path: Path) -> tuple[float, float] | None:
    code = f"import resource, time, sys; from pathlib import Path; P = Path({str(path)!r}); base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n" \
           f"_t0 = time.perf_counter()\n{LOADERS[loader]}\nprint(time.perf_counter() - _t0, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    if proc.returncode != 0:
        print(f"{loader}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    secs, peak = proc.stdout.split()[-2:]
    return float(secs), float(peak)


def main() -> None:
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    target = float(sys.argv[1]) if len(sys.argv) > 1 else 110
    with tempfile.TemporaryDirectory() as tmp:
        path = make_trace(target, Path(tmp) / "big.json")
        size = path.stat().st_size
        print(f"trace: {size / 1e6:.1f} MB")
        results = {name: measure(name, path) for name in LOADERS}
        for name, r in results.items():
            if r is None:
                print(f"{name:10s} not available (not installed or failed)")
                continue
            secs, peak = r
            print(f"{name:10s} {secs:6.2f} s  {size / 1e6 / secs:7.1f} MB/s  peak +{peak / 1e6:7.1f} MB = {peak / size:4.2f}x JSON")
        ours = results["tpu-perf"]
        hta_mb_s = 18.5  # FACTS.md: HTA loads Kineto at about 17-20 MB/s
        if ours:
            print(f"speed vs HTA's published ~{hta_mb_s} MB/s: {size / 1e6 / ours[0] / hta_mb_s:.1f}x; peak memory {ours[1] / size:.2f}x JSON (target <= 2x)")
            if results["json.load"]:
                print(f"speed vs whole-document json.load: {results['json.load'][0] / ours[0]:.2f}x; memory {results['json.load'][1] / max(ours[1], 1):.1f}x less")
            if results["hta"]:
                print(f"speed vs HTA measured here: {results['hta'][0] / ours[0]:.1f}x; memory {results['hta'][1] / max(ours[1], 1):.1f}x less")


if __name__ == "__main__":
    main()
