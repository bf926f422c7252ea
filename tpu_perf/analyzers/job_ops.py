"""A job's ops across its hosts: each host's top ops, each op's spread over hosts, and the op that
makes a straggler slow.

Every process reduced its own trace window to an `ops` table in its shard; these views are one
query over those files (store/shards.py): op time summed per host and op name (a host's devices
and programs together), then compared across hosts. An op a host never ran has no time there, not
zero: its spread is over the hosts that ran it (`hosts` says how many).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from tpu_perf.store import Run
from tpu_perf.store.shards import SHARD, shard_dataset, shard_index

HOST_TOP_OPS = 5
"""Ops per host in `hosts[*].top_ops`: the issue's "five ops with the most time on that host"."""
SPREAD_OPS = 20
"""Ops in `ops_spread`: those with the most time summed over hosts (the report's TOP_OPS)."""
OP_EXPLAINS_SHARE = 0.5
"""An op explains a straggler when its extra time per traced step on the straggler (against the
other hosts' median) is at least this share of the straggler's extra time per step: most of what
the others wait for is then that op, not host work between the ops."""

_COLUMNS = pa.schema([("name", pa.string()), ("total_time_s", pa.float64()), ("occurrences", pa.float64())])


@dataclass(frozen=True, kw_only=True)
class HostOp:
    """One op on one host: its time over the host's trace window, all its devices together."""

    name: str
    total_time_s: float
    occurrences: int
    share: float | None
    """Of the host's op time in the window; None when that is 0."""


@dataclass(frozen=True, kw_only=True)
class OpSpread:
    """One op's time over the trace window across the hosts that ran it."""

    op: str
    hosts: int
    min_s: float
    median_s: float
    max_s: float
    slowest_host: int | str
    """The process index of the host with the most time in it (its shard name when unknown)."""


@dataclass(frozen=True, kw_only=True)
class StragglerOp:
    """The op that makes a straggler slow, per traced step: its time on the straggler and the
    other hosts' median of theirs."""

    op: str
    value_s: float
    others_median_s: float
    extra_s: float


def op_time_by_host(run: Run) -> pd.DataFrame:
    """One row per host and op name: `host` (process index, else shard name), `total_time_s`,
    `occurrences`; empty for a single process's run or a job whose shards hold no ops table."""
    dataset = shard_dataset(run, "ops", _COLUMNS)
    if dataset is None:
        return pd.DataFrame(columns=["host", "name", "total_time_s", "occurrences"])
    table = dataset.to_table(columns=[SHARD, "name", "total_time_s", "occurrences"], use_threads=False)
    grouped = table.group_by([SHARD, "name"], use_threads=False).aggregate([("total_time_s", "sum"), ("occurrences", "sum")])
    frame = grouped.to_pandas().rename(columns={"total_time_s_sum": "total_time_s", "occurrences_sum": "occurrences"})
    index = shard_index(run)
    frame["host"] = [index.get(s) if index.get(s) is not None else s for s in frame[SHARD]]
    return frame[["host", "name", "total_time_s", "occurrences"]].sort_values(["host", "total_time_s", "name"], ascending=[True, False, True], key=_host_key, ignore_index=True)


def _host_key(column: pd.Series) -> pd.Series:
    """Hosts sort by process index, shards without one after them; other columns as they are."""
    if column.name != "host":
        return column
    return column.map(lambda h: (0, h, "") if isinstance(h, (int, np.integer)) else (1, 0, str(h)))


def host_top_ops(by_host: pd.DataFrame, host: int | str, n: int = HOST_TOP_OPS) -> tuple[HostOp, ...]:
    """The `n` ops with the most time on `host` (rows of `op_time_by_host`)."""
    rows = by_host[by_host["host"] == host]
    if rows.empty:  # no trace window on that host (recorded with --no-trace, or it ended before)
        return ()
    total = float(rows["total_time_s"].sum())
    top = rows.nlargest(n, "total_time_s")
    return tuple(HostOp(name=str(r.name), total_time_s=float(r.total_time_s), occurrences=int(r.occurrences), share=float(r.total_time_s) / total if total > 0 else None) for r in top.itertuples())


def op_spread(by_host: pd.DataFrame, n: int = SPREAD_OPS) -> tuple[OpSpread, ...]:
    """Per op (the `n` with the most time over all hosts): min, median and max over the hosts that
    ran it, and the host with the most."""
    if by_host.empty:
        return ()
    ops = by_host.groupby("name", sort=False)["total_time_s"]
    top = ops.sum().nlargest(n).index
    rows = by_host[by_host["name"].isin(top)]
    slowest = rows.loc[rows.groupby("name", sort=False)["total_time_s"].idxmax(), ["name", "host"]].set_index("name")["host"]
    stats = rows.groupby("name", sort=False)["total_time_s"].agg(["count", "min", "median", "max"])
    return tuple(OpSpread(op=str(name), hosts=int(stats.at[name, "count"]), min_s=float(stats.at[name, "min"]), median_s=float(stats.at[name, "median"]), max_s=float(stats.at[name, "max"]), slowest_host=_plain(slowest[name])) for name in top)


def _plain(host: object) -> int | str:
    return int(host) if isinstance(host, (int, np.integer)) else str(host)


def straggler_op(by_host: pd.DataFrame, host: int | str, traced_steps: dict[int | str, int], extra_s: float) -> StragglerOp | None:
    """The op whose extra time per traced step on `host` (against the other hosts' median) is the
    largest, when it is at least OP_EXPLAINS_SHARE of the straggler's `extra_s` per step; None
    when no op is (the straggler's extra time is host work between ops) or steps are unknown."""
    if by_host.empty or not traced_steps.get(host):
        return None
    per_step = by_host[by_host["host"].map(lambda h: bool(traced_steps.get(h)))].copy()
    per_step["per_step_s"] = per_step["total_time_s"] / per_step["host"].map(traced_steps).astype(float)
    table = per_step.pivot_table(index="name", columns="host", values="per_step_s", aggfunc="sum")
    if host not in table.columns or len(table.columns) < 2:
        return None
    mine = table[host]
    others = table.drop(columns=[host]).median(axis=1, skipna=True)
    excess = (mine - others).dropna()
    if excess.empty:
        return None
    name = excess.idxmax()
    if excess[name] < OP_EXPLAINS_SHARE * extra_s:
        return None
    return StragglerOp(op=str(name), value_s=float(mine[name]), others_median_s=float(others[name]), extra_s=float(excess[name]))
