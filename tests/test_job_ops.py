"""The op that explains a straggler, on its threshold (job_ops.OP_EXPLAINS_SHARE): just above, just
below, and with the traced steps unknown. Rows are what `op_time_by_host` returns for a job."""

from __future__ import annotations

import pandas as pd
import pytest

from tpu_perf.analyzers.job_ops import OP_EXPLAINS_SHARE, op_spread, straggler_op

STEPS = {0: 4, 1: 4, 2: 4}
EXTRA_S = 0.040
"""The straggler's extra time per step (hosts.find_stragglers)."""


def _by_host(slow_op_s: float) -> pd.DataFrame:
    """Three hosts, 4 traced steps each: `fusion.1` takes 10 ms per step on hosts 0 and 1 and
    `slow_op_s` per step on host 2; `dot.3` is even."""
    rows = [(h, "dot.3", 4 * 0.020, 4) for h in (0, 1, 2)]
    rows += [(0, "fusion.1", 4 * 0.010, 4), (1, "fusion.1", 4 * 0.011, 4), (2, "fusion.1", 4 * slow_op_s, 4)]
    return pd.DataFrame(rows, columns=["host", "name", "total_time_s", "occurrences"])


def test_an_op_with_most_of_the_extra_time_explains_the_straggler() -> None:
    others = 0.0105  # median of 10 and 11 ms
    above = straggler_op(_by_host(others + OP_EXPLAINS_SHARE * EXTRA_S + 1e-4), 2, STEPS, EXTRA_S)
    assert above is not None and above.op == "fusion.1"
    assert above.others_median_s == pytest.approx(others) and above.extra_s == pytest.approx(OP_EXPLAINS_SHARE * EXTRA_S + 1e-4)
    assert straggler_op(_by_host(others + OP_EXPLAINS_SHARE * EXTRA_S - 1e-4), 2, STEPS, EXTRA_S) is None  # most of it is between ops


def test_no_op_is_named_without_the_straggler_s_traced_steps() -> None:
    slow = _by_host(0.1)
    assert straggler_op(slow, 2, {**STEPS, 2: 0}, EXTRA_S) is None
    assert straggler_op(slow, 2, {}, EXTRA_S) is None
    assert straggler_op(slow[slow["host"] == 2], 2, STEPS, EXTRA_S) is None  # no other host to compare with


def test_the_spread_counts_only_the_hosts_that_ran_an_op() -> None:
    rows = _by_host(0.012)
    rows = pd.concat([rows, pd.DataFrame([(1, "all-gather.2", 0.5, 1)], columns=rows.columns)], ignore_index=True)
    spread = {s.op: s for s in op_spread(rows)}
    assert list(spread) == ["all-gather.2", "dot.3", "fusion.1"]
    gather, fusion = spread["all-gather.2"], spread["fusion.1"]
    assert (gather.hosts, gather.min_s, gather.max_s, gather.slowest_host) == (1, 0.5, 0.5, 1)  # absent elsewhere, not 0 s
    assert (fusion.hosts, fusion.min_s, fusion.median_s, fusion.max_s, fusion.slowest_host) == (3, pytest.approx(0.040), pytest.approx(0.044), pytest.approx(0.048), 2)


def test_a_host_without_ops_has_no_top_ops_and_the_job_no_spread() -> None:
    from tpu_perf.analyzers.job_ops import host_top_ops

    none = pd.DataFrame(columns=["host", "name", "total_time_s", "occurrences"])  # what a --no-trace job's query gives
    assert host_top_ops(none, 0) == () and op_spread(none) == () and straggler_op(none, 0, STEPS, EXTRA_S) is None
    rows = _by_host(0.012)
    assert host_top_ops(rows, 7) == ()  # a host that traced nothing, beside hosts that did
