"""How often does `tpu-perf check` cry wolf, and how often does it catch a real slowdown?

Simulates runs whose step time has a known run-to-run noise (log-normal, sigma = the noise) and a
known slowdown, and judges every draw with `check_metric`, the very function `tpu-perf check` calls.
Beside it, on the same draws, the gate most CI benchmark jobs use: one run against one run with a
fixed 3 % threshold. Target at 2 % noise, 5 runs a side: false REGRESSION <= 1 %, detection of a
6 % slowdown >= 95 %. Last, the case a noisy CI machine makes: 3 runs a side at 9 % noise, a
candidate twice as slow (REGRESSION however high the CV: its interval lies wholly beyond the
margin) and an unchanged one (never called a regression or an improvement). Then a shared CI
machine: 5 pairs recorded back to back, each pair sharing a machine factor uniform within +-30 %
(per-side CV ~17 %) times 2 % noise of each run's own, judged unpaired (`check_metric`) and paired
(`paired.paired_check`, what `check --pair-by tag:pair` calls): unchanged and 10 % slower.

    python bench/gate_noise.py [--draws 20000] [--runs 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from tpu_perf.analyzers.paired import paired_check
from tpu_perf.analyzers.regression import METRIC_BY_NAME, CheckOptions, Verdict, check_metric

NOISES = (0.01, 0.02, 0.04)
SLOWDOWN = 1.06
ONE_VS_ONE_THRESHOLD = 0.03


def verdict_rates(base: np.ndarray, cand: np.ndarray, options: CheckOptions) -> dict[Verdict, float]:
    """Share of draws (rows) that get each verdict from `check_metric` on step time."""
    metric = METRIC_BY_NAME["step_time"]
    counts: dict[Verdict, int] = dict.fromkeys(Verdict, 0)
    for b, c in zip(base, cand, strict=True):
        counts[check_metric(metric, b.tolist(), c.tolist(), options).verdict] += 1
    return {v: n / len(base) for v, n in counts.items()}


def paired_rates(base: np.ndarray, cand: np.ndarray, options: CheckOptions) -> dict[Verdict, float]:
    """Share of draws that get each verdict from `paired_check` (column i of each side: pair i)."""
    metric = replace(METRIC_BY_NAME["step_time"], value=lambda v: v)
    counts: dict[Verdict, int] = dict.fromkeys(Verdict, 0)
    for b, c in zip(base, cand, strict=True):
        counts[paired_check(metric, list(zip(b.tolist(), c.tolist(), strict=True)), options).verdict] += 1
    return {v: n / len(base) for v, n in counts.items()}


def shared_machine(rng: np.random.Generator, draws: int, pairs: int, options: CheckOptions) -> None:
    """Each pair shares a machine factor within +-30 %; each run adds 2 % of its own."""
    factor = rng.uniform(0.7, 1.3, size=(draws, pairs))
    base = factor * np.exp(rng.normal(0.0, 0.02, size=(draws, pairs)))
    same = factor * np.exp(rng.normal(0.0, 0.02, size=(draws, pairs)))
    slow = 1.10 * factor * np.exp(rng.normal(0.0, 0.02, size=(draws, pairs)))
    side_cv = float(np.mean(np.std(base, axis=1, ddof=1) / np.mean(base, axis=1)))
    print(f"shared machine, {pairs} pairs, factor within +-30 % (mean per-side CV {side_cv:.1%}) x 2 % own noise, {draws} draws:")
    for name, rates in (("unpaired", verdict_rates), ("paired", paired_rates)):
        null, alt = rates(base, same, options), rates(base, slow, options)
        print(f"  {name:>8}: unchanged -> PASS {null[Verdict.PASS]:.1%}, false REGRESSION {null[Verdict.REGRESSION]:.2%}, BAD_DATA {null[Verdict.BAD_DATA]:.1%}; "
              f"10 % slower -> REGRESSION {alt[Verdict.REGRESSION]:.1%}, BAD_DATA {alt[Verdict.BAD_DATA]:.1%}")


def one_vs_one(base: np.ndarray, cand: np.ndarray) -> float:
    """Share of draws where the first candidate run is > 3 % slower than the first baseline run."""
    return float(np.mean(cand[:, 0] / base[:, 0] > 1 + ONE_VS_ONE_THRESHOLD))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5, help="runs per side")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    options = CheckOptions()
    rng = np.random.default_rng(args.seed)
    print(f"{args.runs} runs a side, {args.draws} draws per cell, margin {options.margin:.0%}, alpha {options.alpha}, max CV {options.max_cv:.0%}")
    print(f"{'noise':>5} | {'check: no change':^37} | {'check: 6 % slower':^26} | {'1 v 1 at 3 %':^20}")
    print(f"{'':>5} | {'false REGR':>10} {'PASS':>7} {'INCONCL':>8} {'BAD':>7} | {'REGR':>7} {'INCONCL':>8} {'PASS':>7} | {'false':>8} {'detect':>8}")
    started = time.perf_counter()
    for noise in NOISES:
        base = np.exp(rng.normal(0.0, noise, size=(args.draws, args.runs)))
        same = np.exp(rng.normal(0.0, noise, size=(args.draws, args.runs)))
        slow = SLOWDOWN * np.exp(rng.normal(0.0, noise, size=(args.draws, args.runs)))
        null, alt = verdict_rates(base, same, options), verdict_rates(base, slow, options)
        print(
            f"{noise:>5.0%} | {null[Verdict.REGRESSION]:>10.2%} {null[Verdict.PASS]:>7.1%} {null[Verdict.INCONCLUSIVE]:>8.1%} {null[Verdict.BAD_DATA]:>7.1%} | "
            f"{alt[Verdict.REGRESSION]:>7.1%} {alt[Verdict.INCONCLUSIVE]:>8.1%} {alt[Verdict.PASS]:>7.1%} | "
            f"{one_vs_one(base, same):>8.1%} {one_vs_one(base, slow):>8.1%}"
        )
    base, same = (np.exp(rng.normal(0.0, 0.09, size=(args.draws, 3))) for _ in range(2))
    slow = 2.0 * np.exp(rng.normal(0.0, 0.09, size=(args.draws, 3)))
    null, alt = verdict_rates(base, same, options), verdict_rates(base, slow, options)
    print(f"3 runs a side, 9 % noise: 2x slower -> REGRESSION {alt[Verdict.REGRESSION]:.2%} (BAD_DATA {alt[Verdict.BAD_DATA]:.2%}); "
          f"unchanged -> REGRESSION {null[Verdict.REGRESSION]:.2%}, IMPROVEMENT {null[Verdict.IMPROVEMENT]:.2%}, BAD_DATA {null[Verdict.BAD_DATA]:.1%}")
    shared_machine(rng, args.draws, args.runs, options)
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
