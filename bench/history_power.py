"""The smallest step `tpu-perf history` finds 80 % of the time, in units of the series' noise, per
series length: the table `analyzers.history.DETECTABLE_STEP` is printed by this script.

    PYTHONPATH=$PWD .venv/bin/python bench/history_power.py [--draws 100] [--lengths 6,8,...]

Each draw: LENGTH points of 1 + Gaussian noise (sd 1 %), the second half (from LENGTH // 2) raised
by STEP; found when `detect` reports a change point within one point of the true one. The detector
divides the series by its median and its penalty and permutation test scale with the noise, so the
step found at a given share of draws is a fixed multiple of the noise for each length. Bisection
on that multiple (fixed seed, `--draws` series per level) until the found share brackets 80 %.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tpu_perf.analyzers.history import detect

NOISE = 0.01


def found_share(length: int, multiple: float, draws: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(draws):
        x = 1 + rng.normal(0, NOISE, length)
        x[length // 2:] += multiple * NOISE
        hits += any(abs(i - length // 2) <= 1 for i, _ in detect(list(x)))
    return hits / draws


def smallest_multiple(length: int, draws: int, power: float = 0.8) -> float:
    lo, hi = 0.5, 40.0
    for _ in range(8):
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if found_share(length, mid, draws, seed=length) >= power else (mid, hi)
    return hi


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--lengths", default="6,8,10,12,15,20,30,50,100,200")
    args = parser.parse_args()
    t0 = time.perf_counter()
    table = {n: round(smallest_multiple(n, args.draws), 2) for n in map(int, args.lengths.split(","))}
    print(f"DETECTABLE_STEP = {table}  # {args.draws} draws a level, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
