"""The Streamlit dashboard: runs side by side. Start it with `tpu-perf dashboard [STORE]`.

`app.py` is the Streamlit entry script; `screens/` holds one module per page (each with `render()`);
`figures.py` builds Plotly figures (no Streamlit); `data.py` loads runs and report documents through
`tpu_perf.load_run` / `list_runs` and the analyzers, cached on the run's id and modification stamp.
"""
