"""A metric over a series of runs (nightly CI), and the change points in it.

Input: runs index rows (`tpu_perf.analyzers.index_row.load_index`). One point per order key (a
commit, a date): the median of the runs that share it, with their spread. Runs whose fingerprints
differ (chip, count, framework versions, flags, workload, script) are separate series: a jax
upgrade is not a regression of the step.

Change points: `ruptures` (PELT, least-squares cost from running sums, on the series divided by
its median) proposes where the level moves, with a penalty scaled by the series' own noise
(estimated from neighbouring differences, so a step does not inflate it). Each proposal is then
tested the E-Divisive way: a permutation test (`scipy.stats.permutation_test`, fixed seed) of the
best split's statistic within the window between its neighbouring change points, the search
repeated on every permutation, so the p-value accounts for having looked at every position.
Proposals over ALPHA are dropped (the least significant first, the others tested again) until
every one left is significant.

Each series states its noise (the points' spread around their segments' means, relative to the
median) and the smallest step the detector finds 80 % of the time at that noise and length
(`DETECTABLE_STEP`, measured by bench/history_power.py), so "no change point" is never read as
"flat" when the series could not have shown one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

METRICS: dict[str, tuple[str, str]] = {
    "step_time": ("step_s", "seconds"),
    "all_in": ("all_in_s", "seconds"),
    "cpu_step_time": ("cpu_step_s", "seconds"),
    "mfu": ("mfu", "fraction"),
    "tokens_per_s": ("tokens_per_s", "per_second"),
    "peak_memory": ("peak_memory_bytes", "bytes"),
    "ttft_p99": ("ttft_p99_s", "seconds"),
    "tpot_p50": ("tpot_p50_s", "seconds"),
    "generated_tokens_per_s": ("generated_tokens_per_s", "per_second"),
    "mbu": ("mbu", "fraction"),
}
"""`--metric` name -> (index column, unit)."""

SEED = 20261202
"""Fixed: the same series gives the same p-values, so CI output does not flicker."""
ALPHA = 0.01
"""A proposed change point is kept when its permutation p-value is at most this."""
PENALTY = 3.0
"""PELT's penalty per change point, in units of the series' noise variance times log(n)."""
PERMUTATIONS = 999
MIN_POINTS = 6
"""A series shorter than this is shown without change points (too short to tell)."""
DETECTABLE_STEP: dict[int, float] = {10: 3.97, 12: 3.18, 15: 2.72, 20: 2.33, 30: 2.07, 50: 1.84, 100: 1.66, 200: 1.63}
"""Series length -> the step in its middle that `detect` finds (within one point) 80 % of the time,
in units of the noise (bench/history_power.py: 100 draws a level, Gaussian noise). Under 10 points
no split can reach p <= ALPHA in the permutation test (8 points split 4|4: p >= 2 * 4! 4! / 8! = 0.029)."""


@dataclass(frozen=True, kw_only=True)
class Point:
    key: str
    """The order key: the tag's value (`--order-by tag:commit`) or the start time (ISO, UTC)."""
    runs: tuple[str, ...]
    value: float
    """Median of the runs' values."""
    low: float
    high: float
    n: int
    started_at: float | None


@dataclass(frozen=True, kw_only=True)
class ChangePoint:
    at: str
    """The order key of the first point after the change."""
    previous: str
    """The order key of the last point before it: the change happened in (previous, at]."""
    run: str
    """The first run of the point `at`."""
    index: int
    before: float
    after: float
    """Medians of the segments on each side (up to the neighbouring change points)."""
    change: float
    """after / before - 1."""
    p_value: float


@dataclass(frozen=True, kw_only=True)
class Series:
    fingerprint_key: str
    fingerprint: Mapping[str, Any]
    differs: tuple[str, ...]
    """Fingerprint fields that differ from the first series (empty for the first)."""
    points: tuple[Point, ...]
    change_points: tuple[ChangePoint, ...]
    note: str | None = None
    noise: float | None = None
    """The points' run-to-run spread, as a fraction of the series' median (within the segments
    between change points); None under 3 points."""
    detectable: float | None = None
    """The smallest step (a fraction) in the middle of this series that the detector finds 80 % of
    the time at its noise (`detectable_step`); None when no step can be found at this length."""


@dataclass(frozen=True, kw_only=True)
class History:
    metric: str
    column: str
    unit: str
    order_by: str
    series: tuple[Series, ...]
    excluded: tuple[Mapping[str, str], ...] = ()
    """Runs left out, each with why (not completed, damaged, no value, no order tag)."""
    notes: tuple[str, ...] = ()
    detector: Mapping[str, Any] = field(default_factory=dict)

    @property
    def change_points(self) -> list[tuple[int, ChangePoint]]:
        return [(i, cp) for i, s in enumerate(self.series) for cp in s.change_points]


def _order_value(row: Mapping[str, Any], order_by: str) -> str | None:
    if order_by == "started":
        started = row.get("started_at")
        if started is None:
            return None
        import datetime as dt

        return dt.datetime.fromtimestamp(float(started), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    key = order_by.partition(":")[2]
    value = (row.get("tags") or {}).get(key)
    return None if value in (None, "") else str(value)


def _points(rows: Sequence[Mapping[str, Any]], column: str, order_by: str) -> list[Point]:
    """One point per order key, ordered by the key's number when every key is one, else by the
    first start time of its runs (commits are recorded in the order they land)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(_order_value(row, order_by)), []).append(row)
    points = []
    for key, members in groups.items():
        values = np.array([float(r[column]) for r in members])
        starts = [r.get("started_at") for r in members if r.get("started_at") is not None]
        members = sorted(members, key=lambda r: (r.get("started_at") or 0, r["id"]))
        points.append(Point(key=key, runs=tuple(r["id"] for r in members), value=float(np.median(values)), low=float(values.min()), high=float(values.max()), n=len(values), started_at=min(starts) if starts else None))
    numeric = all(is_number(p.key) for p in points)
    points.sort(key=lambda p: (float(p.key), p.key) if numeric else (p.started_at or 0, p.key))
    return points


def is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _split_statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Best two-segment split's between-segment sum of squares, k(n-k)/n * (mean1 - mean2)^2."""
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    n = x.shape[-1]
    k = np.arange(1, n)
    left = np.cumsum(x, axis=-1)[..., :-1]
    total = left[..., -1:] + x[..., -1:]
    diff = left / k - (total - left) / (n - k)
    return np.max(k * (n - k) / n * diff**2, axis=-1)


def _p_value(window: np.ndarray) -> float:
    from scipy.stats import permutation_test

    if window.size < 4 or np.ptp(window) == 0:
        return 1.0
    result = permutation_test((window,), _split_statistic, permutation_type="pairings", n_resamples=PERMUTATIONS, vectorized=True, alternative="greater", rng=np.random.default_rng(SEED))
    return float(result.pvalue)


def noise_sigma(x: np.ndarray, bounds: Sequence[int] = ()) -> float:
    """Run-to-run noise: the pooled spread within the segments between `bounds` (change points),
    or, before any are known, from neighbouring differences (a step moves one difference only)."""
    if bounds:
        edges = [0, *bounds, x.size]
        residuals = np.concatenate([x[a:b] - x[a:b].mean() for a, b in zip(edges, edges[1:], strict=False) if b > a])
        dof = x.size - len(edges) + 1
        sigma = math.sqrt(float(np.sum(residuals**2)) / dof) if dof > 0 else 0.0
    else:
        diffs = np.diff(x)
        sigma = float(np.median(np.abs(diffs - np.median(diffs)))) / 0.6745 / math.sqrt(2)
    return sigma if sigma > 0 else float(np.std(x)) or 1e-12


@functools.cache
def _sums_cost() -> Any:
    """ruptures' least-squares cost ("l2": a segment's sum of squared deviations from its mean),
    from running sums: O(1) a segment instead of a `var` over it. PELT asks for the cost of O(n^2)
    segments; ruptures' own CostL2 makes that 90 % of the detection time of a 200-night series."""
    from ruptures.base import BaseCost
    from ruptures.exceptions import NotEnoughPoints

    class CostL2Sums(BaseCost):  # type: ignore[misc]
        model = "l2-sums"  # its own name: ruptures' cost_factory("l2") still finds CostL2
        min_size = 1

        def fit(self, signal: np.ndarray) -> CostL2Sums:
            self.signal = np.asarray(signal, dtype=float).reshape(-1, 1)  # Pelt reads its length
            x = self.signal[:, 0] - self.signal.mean()  # centred: small sums, no cancellation
            self.sums = np.concatenate(([0.0], np.cumsum(x)))
            self.squares = np.concatenate(([0.0], np.cumsum(x * x)))
            return self

        def error(self, start: int, end: int) -> float:
            if end - start < self.min_size:
                raise NotEnoughPoints
            total = self.sums[end] - self.sums[start]
            return max(float(self.squares[end] - self.squares[start] - total * total / (end - start)), 0.0)

    return CostL2Sums


def detect(values: Sequence[float]) -> list[tuple[int, float]]:
    """(index of the first point after each change, p-value), for a series of positive values."""
    import ruptures

    x = np.asarray(values, dtype=float)
    n = x.size
    if n < MIN_POINTS or not np.all(np.isfinite(x)):
        return []
    x = x / float(np.median(x)) if np.median(x) else x
    algo = ruptures.Pelt(custom_cost=_sums_cost()(), min_size=2, jump=1).fit(x.reshape(-1, 1))
    proposed: list[int] = []
    for _pass in range(2):  # the noise from differences, then from within the segments found
        sigma = noise_sigma(x, proposed)
        proposed = [int(b) for b in algo.predict(pen=PENALTY * sigma**2 * math.log(n)) if b < n]
    while proposed:
        bounds = [0, *proposed, n]
        tested = [(b, _p_value(x[bounds[i] : bounds[i + 2]])) for i, b in enumerate(proposed)]
        worst = max(tested, key=lambda t: t[1])
        if worst[1] <= ALPHA:
            return tested
        proposed.remove(worst[0])
    return []


def detectable_step(length: int, noise: float) -> float | None:
    """`DETECTABLE_STEP` at `length` points (interpolated on log length; past the table, its last
    entry, an upper bound) times the noise; None under the table's first length."""
    lengths = sorted(DETECTABLE_STEP)
    if length < lengths[0]:
        return None
    multiple = float(np.interp(math.log(min(length, lengths[-1])), [math.log(n) for n in lengths], [DETECTABLE_STEP[n] for n in lengths]))
    return multiple * noise


def series_noise(values: Sequence[float], found: Sequence[tuple[int, float]]) -> float | None:
    """The run-to-run spread of a series relative to its median (`noise_sigma`: within the segments
    between the change points found, or from neighbouring differences when there are none)."""
    x = np.asarray(values, dtype=float)
    if x.size < 3 or not np.all(np.isfinite(x)) or not np.median(x):
        return None
    return noise_sigma(x / float(np.median(x)), [i for i, _ in found])


def _change_points(points: Sequence[Point]) -> tuple[tuple[ChangePoint, ...], float | None]:
    """The series' change points, and its noise (`series_noise`)."""
    values = [p.value for p in points]
    found = detect(values)
    bounds = [0, *(i for i, _ in found), len(points)]
    out = []
    for j, (i, p_value) in enumerate(found):
        before = float(np.median(values[bounds[j] : i]))
        after = float(np.median(values[i : bounds[j + 2]]))
        out.append(ChangePoint(at=points[i].key, previous=points[i - 1].key, run=points[i].runs[0], index=i, before=before, after=after, change=after / before - 1 if before else float("nan"), p_value=p_value))
    return tuple(out), series_noise(values, found)


def _excluded(row: Mapping[str, Any], column: str, order_by: str) -> str | None:
    if row.get("status") != "completed":
        return f"status {row.get('status')}" + (f": {row['error']}" if row.get("error") else "")
    value = row.get(column)
    if value is None or not math.isfinite(float(value)):
        return f"no {column}"
    if _order_value(row, order_by) is None:
        return f"no tag {order_by.partition(':')[2]}" if order_by != "started" else "no start time"
    return None


def build_history(rows: Sequence[Mapping[str, Any]], *, metric: str = "step_time", order_by: str = "started") -> History:
    """The history of `metric` over `rows` (index rows), split by fingerprint, with change points."""
    if metric not in METRICS:
        raise ValueError(f"--metric {metric}: choose one of {', '.join(METRICS)}")
    if order_by != "started" and not (order_by.startswith("tag:") and len(order_by) > 4):
        raise ValueError(f"--order-by {order_by}: use started or tag:KEY (e.g. tag:commit)")
    column, unit = METRICS[metric]
    excluded, kept = [], []
    for row in rows:
        why = _excluded(row, column, order_by)
        if why:
            excluded.append({"run": str(row["id"]), "name": str(row.get("name")), "reason": why})
        else:
            kept.append(row)
    by_print: dict[str, list[Mapping[str, Any]]] = {}
    for row in kept:
        by_print.setdefault(str(row.get("fingerprint_key")), []).append(row)
    groups = sorted(by_print.values(), key=lambda g: -len(g))  # the longest series first
    series, notes = [], []
    first = dict(groups[0][0].get("fingerprint") or {}) if groups else {}
    for group in groups:
        fingerprint = dict(group[0].get("fingerprint") or {})
        differs = tuple(k for k in sorted(set(first) | set(fingerprint)) if first.get(k) != fingerprint.get(k))
        points = _points(group, column, order_by)
        note = f"{len(points)} points: fewer than {MIN_POINTS}, no change point is looked for" if len(points) < MIN_POINTS else None
        changes, noise = ((), series_noise([p.value for p in points], ())) if note else _change_points(points)
        detectable = detectable_step(len(points), noise) if noise is not None else None
        series.append(Series(fingerprint_key=str(group[0].get("fingerprint_key")), fingerprint=fingerprint, differs=differs, points=tuple(points), change_points=changes, note=note, noise=noise, detectable=detectable))
    if len(series) > 1:
        notes.append(f"the runs make {len(series)} separate series: their fingerprints differ ({'; '.join(', '.join(s.differs) for s in series[1:])}); runs on different setups are not compared")
    detector = {"proposals": "ruptures.Pelt(min_size=2), least-squares (l2) cost", "penalty": f"{PENALTY} * sigma^2 * log(n)", "significance": "scipy.stats.permutation_test of the best split", "alpha": ALPHA, "permutations": PERMUTATIONS, "seed": SEED}
    return History(metric=metric, column=column, unit=unit, order_by=order_by, series=tuple(series), excluded=tuple(excluded), notes=tuple(notes), detector=detector)


def since_last_change(history: History) -> list[str]:
    """Run ids of the newest run's series from its last change point on (all of the series when
    it has none): the runs a baseline should be, once the changes before were accepted."""
    if not history.series:
        return []
    series = max(history.series, key=lambda s: max((p.started_at or 0) for p in s.points))
    start = series.change_points[-1].index if series.change_points else 0
    return [run for point in series.points[start:] for run in point.runs]
