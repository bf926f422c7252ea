"""The tuning walk-through measured: each fix the advisor asks for, its predicted and measured gain.

For every step of the chain, `examples/tuning/jax_lm.py` (or `torch_lm.py`) is recorded once with `tpu-perf record`
and read with `tpu-perf advise --json`: the top fired finding is the fix to apply next, and its
`expected_gain` is the prediction. Then all variants run plain (no recorder), interleaved round by
round so a busy shared CPU slows them alike; each run times its own steps (wall time per step after
the first, ending when the device is done). Medians over rounds; ratios of consecutive medians are
the measured gains.

    python bench/tuning_progression.py [--script jax|torch] [--rounds 5] [--steps 20]

Prints the table docs/tuning.md shows, and first/last. Targets: >= 3.7x first to last; each
prediction within 2x of its measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {"jax": ROOT / "examples" / "tuning" / "jax_lm.py", "torch": ROOT / "examples" / "tuning" / "torch_lm.py"}
FIX_FOR = {
    "jax": {"recompilation": "shapes", "op-by-op": "jit", "host-sync": "sync", "unrolled-loop": "scan", "no-donation": "donate"},
    "torch": {"recompilation": "shapes", "graph-break": "breaks"},
}
"""Each script's fix for each finding id it carries."""
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def cold(tmp: Path) -> dict[str, str]:
    """A fresh, empty compile cache for one run: inductor caches compiled graphs on disk across
    processes, which would turn every run after the first into a warm start."""
    return {**ENV, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(dir=tmp), "TRITON_CACHE_DIR": tempfile.mkdtemp(dir=tmp)}


def advise(script: str, fixes: list[str], steps: int, store: Path) -> list[dict]:
    name = "lm-" + ("-".join(fixes) or "untuned")
    record = [sys.executable, "-m", "tpu_perf", "record", "-q", "--store", str(store), "--name", name, str(SCRIPTS[script]), "--steps", str(steps), "--fix", ",".join(fixes)]
    store.mkdir(parents=True, exist_ok=True)
    subprocess.run(record, env=cold(store), check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-m", "tpu_perf", "advise", "--store", str(store), name, "--json"], env=ENV, check=True, capture_output=True, text=True)
    return [f for f in json.loads(out.stdout)["findings"] if f["outcome"] == "fired"]


def chain(script: str, steps: int, store: Path) -> list[tuple[list[str], dict | None]]:
    """[(fixes applied, the finding that led to the last one)], following the advisor's top finding."""
    fix_for = FIX_FOR[script]
    fixes: list[str] = []
    out: list[tuple[list[str], dict | None]] = [([], None)]
    while True:
        fired = [f for f in advise(script, fixes, steps, store) if f["id"] in fix_for and fix_for[f["id"]] not in fixes]
        if not fired:
            return out
        top = fired[0]
        fixes = [*fixes, fix_for[top["id"]]]
        out.append((fixes, top))
        print(f"advisor: {'+'.join(out[-2][0]) or 'untuned'} -> top finding {top['id']} (predicted {_x((top.get('expected_gain') or {}).get('factor'))})", flush=True)


def per_step(script: str, fixes: list[str], steps: int, tmp: Path) -> float:
    out = tmp / "t.json"
    subprocess.run([sys.executable, str(SCRIPTS[script]), "--steps", str(steps), "--fix", ",".join(fixes), "--time-json", str(out)], env=cold(tmp), check=True, capture_output=True)
    return json.loads(out.read_text())["per_step_s"]


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="jax")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        steps = chain(args.script, args.steps, tmp / "runs")
        times: list[list[float]] = [[] for _ in steps]
        for r in range(args.rounds):
            for i, (fixes, _) in enumerate(steps):
                times[i].append(per_step(args.script, fixes, args.steps, tmp))
            print(f"round {r + 1}: " + "  ".join(f"{t[-1] * 1e3:.0f}" for t in times) + " ms/step", flush=True)
    medians = [statistics.median(t) for t in times]
    print(f"\n{args.rounds} interleaved rounds, {args.steps} steps each, median wall time per step after the first; CPU shared with other work\n")
    print("| step | finding applied | fix | ms/step | predicted gain | measured gain | predicted / measured |")
    print("|---|---|---|---|---|---|---|")
    for i, (fixes, finding) in enumerate(steps):
        if finding is None:
            print(f"| 0 | (untuned) | | {medians[0] * 1e3:.0f} | | | |")
            continue
        predicted = (finding.get("expected_gain") or {}).get("factor")
        measured = medians[i - 1] / medians[i]
        ratio = f"{predicted / measured:.2f}" if predicted else "n/a"
        print(f"| {i} | {finding['id']} | `--fix {','.join(fixes)}` | {medians[i] * 1e3:.0f} | {_x(predicted)} | {_x(measured)} | {ratio} |")
    print(f"\nfirst -> last: {medians[0] / medians[-1]:.2f}x faster per step ({medians[0] * 1e3:.0f} -> {medians[-1] * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
