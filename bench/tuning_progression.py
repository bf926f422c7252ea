"""The tuning walk-through measured: each fix the advisor asks for, its predicted and measured gain.

For every step of the chain, `examples/tuning/jax_lm.py` (or `torch_lm.py`) is recorded once with `tpu-perf record`
and read with `tpu-perf advise --json`: the advisor's `next` (its top step-time finding promising
>= 1.05x) is the fix to apply next, and its `expected_gain` is the prediction. The chain stops where
the advisor says nothing is left (`nothing_left`); compile-time and memory findings (its "also"
list) are never applied as step-time fixes. Then all variants run plain (no recorder), interleaved round by
round so a busy shared CPU slows them alike; each run times its own steps (wall time per step after
the first, ending when the device is done). Medians over rounds; ratios of consecutive medians are
the measured gains.

    python bench/tuning_progression.py [--script jax|torch] [--rounds 5] [--steps 20]

Prints the table docs/tuning.md shows, and first/last. Exits 1 when a fix the advisor proposed for
step time made the measured step more than 5 % slower, or a numeric prediction is not within 2x of
its measurement.
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


SLOWER_TOLERANCE = 1.05
"""A proposed step-time fix fails the bench when the step got more than 5 % slower."""
WITHIN = 2.0
"""Each numeric prediction within 2x of its measured gain."""


def advise(script: str, fixes: list[str], steps: int, store: Path) -> dict:
    name = "lm-" + ("-".join(fixes) or "untuned")
    record = [sys.executable, "-m", "tpu_perf", "record", "-q", "--store", str(store), "--name", name, str(SCRIPTS[script]), "--steps", str(steps), "--fix", ",".join(fixes)]
    store.mkdir(parents=True, exist_ok=True)
    subprocess.run(record, env=cold(store), check=True, capture_output=True)
    out = subprocess.run([sys.executable, "-m", "tpu_perf", "advise", "--store", str(store), name, "--json"], env=ENV, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def chain(script: str, steps: int, store: Path) -> list[tuple[list[str], dict | None]]:
    """[(fixes applied, the finding that led to the last one)], following the advisor's `next`
    until it says nothing is left (or names a finding this script has no fix for)."""
    fix_for = FIX_FOR[script]
    fixes: list[str] = []
    out: list[tuple[list[str], dict | None]] = [([], None)]
    while True:
        doc = advise(script, fixes, steps, store)
        top = next((f for f in doc["findings"] if f["id"] == doc["next"]), None)
        if doc["nothing_left"] or top is None or top["id"] not in fix_for or fix_for[top["id"]] in fixes:
            print(f"advisor: {'+'.join(fixes) or 'untuned'} -> stop: {doc['conclusion']}" + (f" (also: {', '.join(doc['also'])})" if doc["also"] else ""), flush=True)
            return out
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
    failures: list[str] = []
    for i, (fixes, finding) in enumerate(steps):
        if finding is None:
            print(f"| 0 | (untuned) | | {medians[0] * 1e3:.0f} | | | |")
            continue
        gain = finding.get("expected_gain") or {}
        predicted = gain.get("factor")
        measured = medians[i - 1] / medians[i]
        ratio = f"{predicted / measured:.2f}" if predicted else "n/a"
        print(f"| {i} | {finding['id']} | `--fix {','.join(fixes)}` | {medians[i] * 1e3:.0f} | {_x(predicted)} {gain.get('kind', '')} | {_x(measured)} | {ratio} |")
        if measured * SLOWER_TOLERANCE < 1:
            failures.append(f"{finding['id']}: proposed for step time, the step got {1 / measured:.2f}x slower")
        if predicted and not (1 / WITHIN <= predicted / measured <= WITHIN):
            failures.append(f"{finding['id']}: predicted {predicted:.2f}x, measured {measured:.2f}x: not within {WITHIN:g}x")
    print(f"\nfirst -> last: {medians[0] / medians[-1]:.2f}x faster per step ({medians[0] * 1e3:.0f} -> {medians[-1] * 1e3:.0f} ms)")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
