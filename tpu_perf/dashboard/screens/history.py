"""History page: a metric over a series of runs with its change points (`tpu-perf history`).

The URL holds the view (`?sel=tag:branch=main&order_by=tag:commit&metric=step_time`), so a link
in a CI alert opens the same chart.
"""

from __future__ import annotations

import streamlit as st

from tpu_perf.analyzers.history import METRICS, build_history
from tpu_perf.dashboard import data, widgets
from tpu_perf.dashboard.history_figure import history_figure, series_label

PARAMS = ("sel", "order_by", "metric")


def _controls() -> tuple[list[str], str, str]:
    query = st.query_params
    cols = st.columns([4, 2, 2])
    sel = cols[0].text_input("Runs", value=query.get("sel", "all"), help="Selectors, space-separated: tag:KEY=VALUE, tag:KEY, name:NAME, run id, or all.", key="history_sel")
    order_by = cols[1].text_input("Order by", value=query.get("order_by", "started"), help="started, or tag:KEY (one point per value, e.g. tag:commit).", key="history_order")
    metrics = list(METRICS)
    wanted = query.get("metric", "step_time")
    metric = cols[2].selectbox("Metric", metrics, index=metrics.index(wanted) if wanted in metrics else 0, key="history_metric")
    st.query_params.update({"sel": sel, "order_by": order_by, "metric": metric})
    return sel.split(), order_by.strip() or "started", metric


def render() -> None:
    from tpu_perf.analyzers.index_row import load_index
    from tpu_perf.commands.history import select_rows
    from tpu_perf.views.history import value_text

    st.title("History")
    selectors, order_by, metric = _controls()
    store = data.store_location()
    try:
        with st.spinner("Reading the runs index"):
            rows = select_rows(load_index(store), selectors or ["all"])
        history = build_history(rows, metric=metric, order_by=order_by)
    except Exception as exc:  # a bad selector or order key is said on the page
        widgets.error_card("Cannot build the history", str(exc))
        return
    if not history.series:
        st.info(f"No completed run of the selection has {metric}; {len(history.excluded)} run(s) left out: " + "; ".join(f"{e['name']}: {e['reason']}" for e in history.excluded[:10]))
        return
    st.plotly_chart(history_figure(history), width="stretch", key="history_chart")
    changes = history.change_points
    if changes:
        st.dataframe(
            [{"series": series_label(history.series[i], history), "commit range": f"{cp.previous} → {cp.at}", "before": value_text(cp.before, history.unit), "after": value_text(cp.after, history.unit), "change": f"{cp.change:+.1%}", "p-value": round(cp.p_value, 4), "first run": cp.run} for i, cp in changes],
            hide_index=True, width="stretch", key="history_changes",
        )
    else:
        st.caption("No change point in the selection.")
    for note in history.notes:
        st.info(note)
    if history.excluded:
        st.caption(f"{len(history.excluded)} run(s) left out: " + "; ".join(f"{e['name']} ({e['run']}): {e['reason']}" for e in history.excluded))
