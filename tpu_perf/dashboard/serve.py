"""`python -m tpu_perf.dashboard.serve ARGS...`: `streamlit ARGS...` in a process that has already
imported what every page needs (pandas, pyarrow, plotly, the analyzers, the advisor, the screens).

Why: Streamlit runs the app's script only when a browser connects, so a fresh server paid these
imports (about 1.5 s on a busy 2-core machine) inside the first page a person opened. Done here,
before the server listens, the first page costs what any later one does.

The server runs with Streamlit's `runner.postScriptGC` off (`commands/dashboard.streamlit_argv`):
a full collection after every script run walked every object the process holds (the imports, the
reports and summaries kept for later pages), 0.15 s of server CPU after each change of comparison
in a store of 100 runs, holding the GIL while the page waited for the run's last message. Python's
own collections still run; the imports are frozen out of them (`gc.freeze`).
"""

from __future__ import annotations

import gc
import sys


def preload() -> None:
    """Import the modules the pages use (kept in `sys.modules` for every session)."""
    import plotly.graph_objects  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import tpu_perf.advise  # noqa: F401
    import tpu_perf.analyzers.report  # noqa: F401
    from tpu_perf.dashboard.screens import compare, run, runs  # noqa: F401


def warm() -> None:
    """Draw each kind of chart once on a few made-up points, serialised as `st.plotly_chart` does:
    Plotly loads its figure classes and JSON encoder lazily, which the first page with charts paid
    (the run page's Overview: its two charts 16.5 ms of CPU in a fresh process against 3.9 ms warmed;
    43 ms when the charts still went through Plotly's property checks)."""
    import numpy as np
    import pandas as pd
    import plotly.io

    from tpu_perf.dashboard import figures

    steps = pd.DataFrame({"step": [0, 1, 2], "t_s": [0.0, 1.0, 1.1], "duration_s": [1.0, 0.1, 0.1], "phase": ["warm-up", "steady", "steady"]})
    memory = pd.DataFrame({"t_s": [0.0, 1.0], "time_s": [0.0, 1.0], "device": ["tpu:0", "tpu:0"], "bytes_in_use": [1.0, 2.0], "source": ["libtpu", "libtpu"]})
    charts = [
        lambda: figures.step_times([("a", steps)]), lambda: figures.step_times([("a", steps)], log=False, x="wall"),
        lambda: figures.step_distribution([("a", np.array([0.1, 0.1, 0.2]))]),
        lambda: figures.memory_band([("a", memory)]), lambda: figures.fusion_bars({"a": {"kLoop": 1}}),
    ]  # fmt: skip
    for chart in charts:
        try:
            plotly.io.to_json(chart(), validate=False)
        except Exception:  # noqa: BLE001 - a warm-up only: a chart that needs other data is drawn cold
            continue


def main() -> None:
    preload()
    warm()
    from streamlit.web import cli

    gc.freeze()  # what was imported lives for the process: no collection walks its 165k objects again (55-75 ms each)

    sys.argv = ["streamlit", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
