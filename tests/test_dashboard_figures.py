"""Dashboard figures on plain values: readable log ticks, the breakdown legend in the bars' order."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tpu_perf.dashboard import figures  # noqa: E402


def test_step_time_axis_has_1_2_5_ticks_with_units() -> None:
    steps = pd.DataFrame({"step": range(4), "duration_s": [0.9e-3, 3e-3, 12e-3, 4e-3], "phase": ["warm-up", "steady", "steady", "steady"]})
    axis = figures.step_times([("a", steps)]).layout.yaxis
    assert axis.type == "log"
    assert list(axis.tickvals) == [1.0, 2.0, 5.0, 10.0]  # 0.9 to 12 ms: no tick far outside the data
    assert list(axis.ticktext) == ["1 ms", "2 ms", "5 ms", "10 ms"]
    wide = figures.log_ticks(0.5, 40_000)  # past 3 decades: powers of ten only
    assert wide == [1.0, 10.0, 100.0, 1000.0, 10000.0] and [figures._ms(t) for t in (0.5, 250.0, 2000.0)] == ["500 µs", "250 ms", "2 s"]


def test_breakdown_bars_read_in_order_with_words_and_shares() -> None:
    """The breakdown's HTML bars: the legend in the bars' order, in words, each part in its fixed
    colour, the share said inside a wide segment and on hover, what the shares are of on the axis."""
    from tpu_perf.dashboard import bars, palette

    drawn = bars.breakdown_bars({"a": {"compute": 0.6, "host_gap": 0.3, "collective_wait": 0.1, "compile": 0.0}, "b": {"compute": 0.5}}, whole_trace=["b"])
    assert "compile" not in drawn  # no time in it: not in the legend either
    legend = drawn[drawn.index('class="tp-bars-legend"') :]
    assert [legend.index(w) for w in ("compute", "host gap", "collective wait")] == sorted(legend.index(w) for w in ("compute", "host gap", "collective wait"))
    assert f"background:{palette.part_colour('compute')}" in drawn and 'title="a: host gap 30.0 % of the step">30 %</span>' in drawn
    assert 'title="b: compute 50.0 % of the whole trace"' in drawn and "width:50.000%" in drawn  # b's bar: half of the trace
    assert "% of step time (of the whole trace for b)" in drawn


def test_linear_axis_has_round_1_2_5_steps_from_zero() -> None:
    steps = pd.DataFrame({"step": range(4), "duration_s": [0.9e-3, 3e-3, 12e-3, 4e-3], "phase": ["warm-up", "steady", "steady", "steady"]})
    axis = figures.step_times([("a", steps)], log=False).layout.yaxis
    assert axis.type == "linear"
    assert list(axis.tickvals) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    assert list(axis.ticktext) == ["0", "2 ms", "4 ms", "6 ms", "8 ms", "10 ms", "12 ms"]
    assert figures.linear_ticks(0.0, 20_000.0) == [0.0, 5000.0, 10000.0, 15000.0, 20000.0]  # a 20 s compile: 5 s apart
    assert figures.linear_ticks(0.0, 0.42) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])  # never past 8 ticks
    with pytest.raises(ValueError, match="one of step, wall"):
        figures.step_times([("a", steps)], x="clock")


def test_config_values_show_their_differing_part() -> None:
    """The issue's cut command ("--fix shapes,jit,sy"): the flag and its differing value stay, the
    words equal in the most alike other value fold into "…"; a path keeps what differs; values
    with nothing in common, or short, stay whole."""
    from tpu_perf.dashboard import differing

    base, fixed = "/home/u/lm.py --fix shapes,jit --steps 20 --batch 32 --seq 512", "/home/u/lm.py --fix shapes,jit,sync --steps 20 --batch 32 --seq 512"
    other = "/home/u/bench/torch_lm.py --fix shapes,jit --steps 20 --batch 32 --seq 512"
    table = pd.DataFrame({"base": [base, "8"], "fixed": [fixed, "8"], "torch": [other, "—"], "import": ["tpu-perf import /data/capture.xplane.pb here", "—"]}, index=["command", "batch"])
    shown = differing.differing_parts(table, "base")
    assert list(shown.loc["command"]) == ["… --fix shapes,jit …", "… --fix shapes,jit,sync …", "…/bench/torch_lm.py …", "tpu-perf import /data/capture.xplane.pb here"]
    assert list(shown.loc["batch"]) == ["8", "8", "—", "—"]
    unlike = pd.DataFrame({"jax": ["/work/repo/tests/scripts/split_loop.py truth.json --host none"], "torch": ["/work/repo/examples/torch_mlp.py --steps 6"]}, index=["command"])
    assert list(differing.differing_parts(unlike, "jax").loc["command"]) == ["…/tests/scripts/split_loop.py truth.json --host none", "…/examples/torch_mlp.py --steps 6"]  # nothing alike: the shared folders only
    assert differing.against("--xla_a=true --xla_dump_to=/tmp/some/folder --xla_b=1", "--xla_a=true --xla_dump_to=/tmp/some/folder") == "… --xla_b=1"


def test_box_plots_state_their_steps_and_too_few_are_points() -> None:
    """A box of quartiles from 3 steps would be made up: under 5 steady steps (the count under which
    the headline leaves the steady median too) the steps are points, named so; every box says its count."""
    import numpy as np

    fig = figures.step_distribution([("few", np.array([0.010, 0.012, 0.011])), ("many", np.linspace(0.01, 0.02, 12))])
    few, many = fig.data
    assert few.type == "scatter" and few.name == "few: 3 steady steps, too few for a box" and list(few.x) == ["few<br>3 steps"] * 3
    assert many.type == "box" and many.name == "many (12 steady steps)" and list(many.x) == ["many<br>12 steps"]


def test_a_long_legend_grows_the_chart_instead_of_squashing_it() -> None:
    """12 entries at half a 1280 px page take several rows: the bottom margin and the height grow
    by them, the plot keeps its height (310 px)."""
    frames = [(f"run-with-a-long-name-{i}", pd.DataFrame({"step": range(3), "duration_s": [0.02, 0.01, 0.01], "phase": ["warm-up", "steady", "steady"]})) for i in range(6)]
    short = figures.step_times(frames[:1])
    long = figures.step_times(frames)
    rows = figures.legend_rows(long)
    assert rows >= 4  # 12 entries (a line and a warm-up mark per run)
    assert long.layout.margin.b == 50 + figures.LEGEND_ROW_PX * rows and long.layout.height - long.layout.margin.b == short.layout.height - short.layout.margin.b == 310


def test_every_figure_is_what_plotlys_checks_make_of_it() -> None:
    """The builders write Plotly's JSON themselves and skip its per-property checks (`figures.plain_figure`,
    most of a chart's build time): passed through those checks (`go.Figure(fig.to_dict())`, which
    validates and coerces every property), each figure comes out unchanged: no invalid property, no
    shorthand Plotly would have spelt otherwise (`title="x"` for `{"text": "x"}`, a named colour scale)."""
    import json

    import numpy as np
    import plotly.graph_objects as go
    import plotly.io

    steps = pd.DataFrame({"step": range(6), "t_s": [0.0, 1.0, 1.1, 1.2, 1.3, 1.4], "duration_s": [0.9, 3e-3, 12e-3, 4e-3, 5e-3, 4e-3], "phase": ["warm-up"] + ["steady"] * 5})
    paced = steps.assign(pace_s=[np.nan, 6e-3, 6e-3, 7e-3, 6e-3, 6e-3])
    memory = pd.DataFrame({"t_s": [0.0, 1.0, 2.0] * 2, "device": ["tpu:0"] * 3 + ["tpu:1"] * 3, "bytes_in_use": [1e6, 2e6, 3e6, 1e6, 4e6, 2e6]})
    hosts = pd.DataFrame({"process_index": [0, 0, 1, 1], "index": [0, 1, 0, 1], "duration_s": [0.1, 0.2, 0.1, 0.3], "own_s": [0.1, 0.1, 0.1, 0.2], "hostname": ["h0", "h0", None, None]})
    ops = pd.DataFrame({"a": [2e-3, 1e-3], "a % of step": [0.5, np.nan], "b": [1e-3, np.nan], "ops": ["fusion.1", "dot.2"]}, index=["fusion.1", "dot.2"])
    built = [
        figures.step_times([("a", steps), ("b", paced)]), figures.step_times([("a", steps)], log=False, x="wall"),
        figures.step_distribution([("a", figures.steady_step_times(steps)), ("b", np.array([0.01, 0.02]))]),
        figures.memory_timeline([("a", memory)]), figures.memory_band([("a", memory), ("b", memory[memory["device"] == "tpu:0"])]),
        figures.hosts_heatmap(hosts, "own_s"), figures.top_ops(ops, ["a", "b"]), figures.fusion_bars({"a": {"kLoop": 2}, "b": {"kInput": 1}}, ["a", "b"]),
    ]  # fmt: skip
    for fig in built:
        mine = json.loads(plotly.io.to_json(fig.to_dict(), validate=False))
        checked = json.loads(plotly.io.to_json(go.Figure(fig.to_dict()).to_dict(), validate=False))
        assert mine == checked, mine["layout"].get("title")
    assert built[0].layout.shapes[0].fillcolor == "grey" and built[0].layout.annotations[0].text == "warm-up"  # the warm-up shaded and named
    assert [t.type for t in built[6].data] == ["bar", "bar"] and built[5].data[0].colorscale[0] == (0.0, "#440154")


def test_history_figure_is_what_plotlys_checks_make_of_it(tmp_path: Path) -> None:
    """The History chart (a change point's dashed line and label, on a time axis and on a tag's
    category axis) written as Plotly's JSON comes out of Plotly's checks unchanged."""
    import json

    import plotly.graph_objects as go
    import plotly.io

    from tests.history_runs import write_series
    from tpu_perf.analyzers.history import build_history
    from tpu_perf.analyzers.index_row import load_index
    from tpu_perf.dashboard.history_figure import history_figure

    store = tmp_path / "runs"
    write_series(store, [0.020] * 6 + [0.026] * 6, noise=0.01, seed=1, steps=8)
    for order_by in ("started", "tag:commit"):
        history = build_history(load_index(str(store)), order_by=order_by)
        fig = history_figure(history)
        assert len(fig.layout.shapes) == len(fig.layout.annotations) == 1, order_by  # the one change point drawn
        mine = json.loads(plotly.io.to_json(fig.to_dict(), validate=False))
        assert mine == json.loads(plotly.io.to_json(go.Figure(fig.to_dict()).to_dict(), validate=False)), order_by
