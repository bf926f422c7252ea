"""`tpu-perf check --pair-by tag:pair` on real recordings of a compute-bound JAX step, with a busy
process beside them: how often an unchanged PR ends PASS or UNCHANGED, how often it is a false
REGRESSION, how often a 10 % slower step is caught, and the smallest change the pairs could detect.

    PYTHONPATH=$PWD .venv/bin/python bench/gate_noise_recorded.py [--pairs 10] [--draw 5] [--busy 1]
        [--store DIR]   # reuse the recordings of an earlier call
        [--max-cv 0.05] # check's --max-cv

Records PAIRS back-to-back triples of tests/scripts/gate_step.py (10 chained 256x256 matmuls a step,
100 steps; order alternating): the baseline, an unchanged candidate (the same program from another
folder) and a slower one (11 matmuls: about +10 % of the step's work; its HLO differs, so timing
must decide), while BUSY processes spin on the CPU. Then every way of choosing DRAW of the PAIRS
pairs (up to 2000) is judged by `check_sets` with pairing, the code behind `tpu-perf check`:
rates over those draws, and the median `detectable_change` of the unchanged draws' step time check.
The draws share recordings, so the rates are those of this machine on this afternoon, not a
population's; more pairs make them firmer.

Beside wall time (`check` as it is), the same draws judged with `--timing cpu`: the process's CPU
time per step the recorder keeps in each step's `cpu_s` (every thread, XLA:CPU's workers too), the
check's own timing metric on a CPU runner. And, for comparison, two clocks the script measured
itself at each step (`gate_step.py --clocks`): the process's CPU time and the main thread's, each
replacing the step time of the same runs (median over the steps after the first 5), judged by the
same paired check with the deterministic tier beside it. Hardware instruction counts are not among
them where `perf_event_open` finds no PMU (ENOENT on a VM).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tpu_perf.analyzers.regression import CheckOptions, Verdict, check_sets
from tpu_perf.analyzers.run_values import run_values
from tpu_perf.commands.selectors import select

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "gate_step.py"


def spin(stop: multiprocessing.synchronize.Event) -> None:
    """A busy neighbour: pure Python arithmetic until told to stop."""
    x = 0
    while not stop.is_set():
        for i in range(100_000):
            x = (x + i * i) % 1_000_003


CANDIDATES = ("wall", "recorded cpu_s (--timing cpu)", "process_cpu_s", "main_thread_cpu_s")
"""The step time as the recorder measures it (wall), its CPU time per step (`check --timing cpu`),
and the script's own clocks (`--clocks`)."""


def record(store: Path, side: str, pair: int, work: int, folder: Path) -> None:
    clocks = store.parent / "clocks" / f"{side}-{pair}.jsonl"
    clocks.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "tpu_perf", "record", "--store", str(store), "--tag", f"side={side}", "--tag", f"pair={pair}",
            "--no-trace", "-q", str(folder / "gate_step.py"), "--work", str(work), "--width", "256", "--steps", "100", "--clocks", str(clocks)]
    subprocess.run(args, check=True, capture_output=True, cwd=folder)


def record_all(store: Path, pairs: int, busy: int) -> float:
    """The triples, with BUSY spinning processes beside them; the seconds it took."""
    folders = {}
    tmp = Path(tempfile.mkdtemp(prefix="gate-noise-"))
    for side in ("base", "same", "slow"):  # each side from its own folder, as two clones would be
        folders[side] = tmp / side
        folders[side].mkdir()
        shutil.copy(SCRIPT, folders[side] / "gate_step.py")
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(busy)]
    for p in spinners:
        p.start()
    t0 = time.perf_counter()
    try:
        for i in range(pairs):
            order = ("base", "same", "slow") if i % 2 == 0 else ("slow", "same", "base")
            for side in order:
                record(store, side, i, 11 if side == "slow" else 10, folders[side])
    finally:
        stop.set()
        for p in spinners:
            p.join()
    return time.perf_counter() - t0


def clock_step_s(store: Path, side: str, pair: str, name: str) -> float | None:
    """The median of one run's per-step `name` clock over the steps after the first 5."""
    path = store.parent / "clocks" / f"{side}-{pair}.jsonl"
    if not path.exists():
        return None
    values = [json.loads(line)[name] for line in path.read_text().splitlines()][5:]
    return statistics.median(values) if values else None


def rates(store: Path, draw: int, seed: int, max_cv: float) -> None:
    runs = {side: {r.tags["pair"]: r for r in map(run_values, select([f"tag:side={side}"], str(store), flag="--store").runs)} for side in ("base", "same", "slow")}
    pairs = sorted(set.intersection(*(set(v) for v in runs.values())), key=int)
    combos = list(itertools.combinations(pairs, draw))
    random.Random(seed).shuffle(combos)
    combos = combos[:2000]
    for candidate in CANDIDATES:
        if candidate == "wall":
            timed, options = runs, CheckOptions(pair_by="pair", max_cv=max_cv)
        elif candidate.startswith("recorded"):
            if any(r.cpu_step_s is None for by in runs.values() for r in by.values()):
                print(f"{candidate}: a run has no CPU time per step (recorded before the recorder kept it)")
                continue
            timed, options = runs, CheckOptions(pair_by="pair", timing="cpu", max_cv=max_cv)
        else:  # the same runs, their step time read from the script's clock; the deterministic tier beside it
            timed = {side: {p: replace(r, step_s=clock_step_s(store, side, p, candidate)) for p, r in by.items()} for side, by in runs.items()}
            if any(r.step_s is None for by in timed.values() for r in by.values()):
                print(f"{candidate}: no clocks beside the recordings (recorded before --clocks)")
                continue
            options = CheckOptions(pair_by="pair", max_cv=max_cv, metrics=("step_time", "peak_memory", "compiles", "flops_per_step", "bytes_accessed", "hlo"))
        print(f"-- step time from {candidate}")
        judge(timed, pairs, combos, options)


def judge(runs: dict, pairs: list[str], combos: list[tuple[str, ...]], options: CheckOptions) -> None:
    """The verdicts' rates over the draws, the median smallest detectable slowdown, the pairs' CV."""
    basis = "cpu_step_time" if options.timing == "cpu" else "step_time"
    value = (lambda r: r.cpu_step_s) if options.timing == "cpu" else (lambda r: r.step_s)
    for cand in ("same", "slow"):
        counts: dict[str, int] = {}
        detectable = []
        for combo in combos:
            result = check_sets([runs["base"][p] for p in combo], [runs[cand][p] for p in combo], options)
            counts[result.verdict.value] = counts.get(result.verdict.value, 0) + 1
            step = next((c for c in result.checks if c.name == basis), None)
            if step is not None and step.detectable is not None:
                detectable.append(step.detectable)
        share = {k: v / len(combos) for k, v in sorted(counts.items())}
        label = "unchanged" if cand == "same" else "10 % slower"
        ok = share.get(Verdict.PASS, 0) + share.get(Verdict.UNCHANGED, 0)
        headline = f"PASS or UNCHANGED {ok:.1%}, false REGRESSION {share.get(Verdict.REGRESSION, 0):.1%}" if cand == "same" else f"REGRESSION {share.get(Verdict.REGRESSION, 0):.1%}"
        print(f"{label}: {headline}; all verdicts {', '.join(f'{k} {v:.1%}' for k, v in share.items())}; median smallest detectable slowdown {statistics.median(detectable) * 100:+.1f} %")
    base = [value(runs["base"][p]) for p in pairs]
    for cand in ("same", "slow"):
        ratios = [value(runs[cand][p]) / b for p, b in zip(pairs, base, strict=True)]
        print(f"{cand}/baseline step ratio: median {statistics.median(ratios):.3f}, CV {statistics.stdev(ratios) / statistics.mean(ratios):.1%}")
    print(f"{len(pairs)} pairs: baseline step {statistics.median(base) * 1e3:.2f} ms (CV {statistics.stdev(base) / statistics.mean(base):.1%}); {len(combos)} draws of {len(combos[0])} pairs")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--draw", type=int, default=5)
    parser.add_argument("--busy", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--max-cv", type=float, default=CheckOptions().max_cv, help="check's --max-cv (the pair ratios' CV above which a verdict needs its 99 %% bound)")
    args = parser.parse_args()
    store = args.store or Path(tempfile.mkdtemp(prefix="gate-noise-runs-")) / "runs"
    if not store.exists() or not any(store.iterdir()):
        took = record_all(store, args.pairs, args.busy)
        print(f"recorded {args.pairs} triples beside {args.busy} busy process(es) in {took:.0f} s; store {store}")
    rates(store, args.draw, args.seed, args.max_cv)


if __name__ == "__main__":
    main()
