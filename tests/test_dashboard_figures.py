"""Dashboard figures on plain values: readable log ticks, the breakdown legend in the bars' order."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("plotly")

from tpu_perf.dashboard import figures  # noqa: E402


def test_step_time_axis_has_1_2_5_ticks_with_units() -> None:
    steps = pd.DataFrame({"step": range(4), "duration_s": [0.9e-3, 3e-3, 12e-3, 4e-3], "phase": ["warm-up", "steady", "steady", "steady"]})
    axis = figures.step_times([("a", steps)]).layout.yaxis
    assert axis.type == "log"
    assert list(axis.tickvals) == [1.0, 2.0, 5.0, 10.0]  # 0.9 to 12 ms: no tick far outside the data
    assert list(axis.ticktext) == ["1 ms", "2 ms", "5 ms", "10 ms"]
    wide = figures.log_ticks(0.5, 40_000)  # past 3 decades: powers of ten only
    assert wide == [1.0, 10.0, 100.0, 1000.0, 10000.0] and [figures._ms(t) for t in (0.5, 250.0, 2000.0)] == ["500 µs", "250 ms", "2 s"]


def test_breakdown_legend_reads_in_the_bars_order_with_words() -> None:
    fig = figures.breakdown_bars({"a": {"compute": 0.6, "host_gap": 0.3, "collective_wait": 0.1}})
    assert [t.name for t in fig.data] == ["compute", "host gap", "collective wait"]
    assert fig.layout.legend.traceorder == "normal"
