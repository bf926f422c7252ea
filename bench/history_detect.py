"""Change-point detection rates of `tpu-perf history` on synthetic nightly series.

    PYTHONPATH=$PWD .venv/bin/python bench/history_detect.py [--series 400] [--length 30]

Each series: LENGTH points of a step time of 20 ms with Gaussian run-to-run noise (2 % or 4 %);
"step" series change by +CHANGE at a position drawn uniformly in [5, LENGTH-5). Reports, for the
detector tpu-perf uses (ruptures PELT + permutation test) and, when importable, MongoDB's E-Divisive
(`signal-processing-algorithms`, p=0.01, 999 permutations; it pins numpy<2 so it is not a
dependency: `pip install --no-deps --target DIR signal-processing-algorithms structlog more-itertools`
and put DIR on PYTHONPATH to compare):
- found: share of step series with a change point (the alarm a nightly job raises),
- near: share of step series with one within 2 points of the true change (the commit range),
- false: share of flat series with any change point,
and the time per series.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tpu_perf.analyzers.history import detect


def e_divisive(values: np.ndarray) -> list[tuple[int, float]]:
    from signal_processing_algorithms.energy_statistics import energy_statistics

    np.random.seed(20261202)  # it shuffles with numpy's global generator
    return [(int(i), 0.0) for i in energy_statistics.e_divisive(values, pvalue=0.01, permutations=999)]


def rates(detector, *, series: int, length: int, noise: float, change: float, seed: int) -> tuple[float, float, float, float]:
    rng = np.random.default_rng(seed)
    found = near = false = 0
    start = time.perf_counter()
    for _ in range(series):
        flat = 0.020 * (1 + noise * rng.standard_normal(length))
        false += bool(detector(flat))
        at = int(rng.integers(5, length - 5))
        level = np.where(np.arange(length) >= at, 1 + change, 1.0)
        stepped = 0.020 * level * (1 + noise * rng.standard_normal(length))
        points = detector(stepped)
        found += bool(points)
        near += any(abs(i - at) <= 2 for i, _ in points)
    per = (time.perf_counter() - start) / (2 * series)
    return found / series, near / series, false / series, per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=400)
    parser.add_argument("--length", type=int, default=30)
    parser.add_argument("--only", choices=("tpu-perf", "e-divisive"), default=None, help="Run one detector only.")
    args = parser.parse_args()
    detectors = {} if args.only == "e-divisive" else {"ruptures PELT + permutation (tpu-perf)": detect}
    if args.only != "tpu-perf":
        try:
            import signal_processing_algorithms  # noqa: F401

            detectors["E-Divisive (signal-processing-algorithms)"] = e_divisive
        except ImportError:
            print("(signal-processing-algorithms not importable: E-Divisive not compared)")
    print(f"{args.series} series of {args.length} points per row")
    print(f"{'detector':45} {'noise':>6} {'change':>7} {'found':>7} {'near':>7} {'false':>7} {'ms/series':>10}")
    for name, detector in detectors.items():
        for noise, change in ((0.02, 0.05), (0.02, 0.10), (0.03, 0.15), (0.04, 0.05), (0.04, 0.10)):
            found, near, false, per = rates(detector, series=args.series, length=args.length, noise=noise, change=change, seed=7)
            print(f"{name:45} {noise:6.0%} {change:+7.0%} {found:7.1%} {near:7.1%} {false:7.1%} {per * 1e3:10.1f}")


if __name__ == "__main__":
    main()
