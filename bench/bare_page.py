"""A bare Streamlit page of a given size, the baseline `bench/dashboard_scale.py` divides by.

    streamlit run bench/bare_page.py   (then ?tables=T&rows=R&charts=C&traces=N&points=P&html=H&seed=S)

Streamlit and Plotly's own cost of a page like a dashboard page, with no tpu-perf work: a run
picker (a multiselect, as the compare page's), H HTML tables, T grids of R rows, and tabs (rerun on
change, only the open one built, as `widgets.lazy_tabs`) whose open tab holds C Plotly line charts of
N traces x P points. Random numbers, made anew each run (no cache). A caption `bare done: K runs,
tab X` tells the benchmark which run has finished.
"""

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

query = st.query_params
size = {key: int(query.get(key, default)) for key, default in (("tables", 1), ("rows", 20), ("charts", 2), ("traces", 2), ("points", 1000), ("html", 1), ("seed", 0))}
st.set_page_config(layout="wide")
st.title("Bare page")
names = [f"run-{i:03d}" for i in range(100)]
chosen = st.multiselect("Runs", names, default=names[: size["traces"]], key="bare_runs")
rng = np.random.default_rng(size["seed"] + len(chosen))
for _ in range(size["html"]):
    cells = "".join(f"<tr><th>kpi {r}</th>" + "".join(f"<td>{v:.3f} ms</td>" for v in rng.normal(10, 1, len(chosen))) + "</tr>" for r in range(12))
    st.html(f"<table><thead><tr><th></th>{''.join(f'<th>{c}</th>' for c in chosen)}</tr></thead><tbody>{cells}</tbody></table>")
for i in range(size["tables"]):
    st.dataframe(pd.DataFrame(rng.normal(size=(size["rows"], 12)), columns=[f"c{j}" for j in range(12)]).round(3).astype(str), key=f"bare_table_{i}")
opened = "A"
for name, tab in zip(("A", "B"), st.tabs(["A", "B"], key="bare_tab", on_change="rerun"), strict=True):
    if tab.open is not False:
        opened = name
        with tab:
            columns = st.columns(2)
            for j in range(size["charts"]):
                fig = go.Figure([go.Scatter(y=rng.normal(size=size["points"]), mode="lines", name=c) for c in chosen])
                columns[j % 2].plotly_chart(fig.update_layout(title=f"chart {j} {name}", height=400), key=f"bare_chart_{name}_{j}")
st.caption(f"bare done: {len(chosen)} runs, tab {opened}")
