"""`python -m tpu_perf.dashboard.serve ARGS...`: `streamlit ARGS...` in a process that has already
imported what every page needs (pandas, pyarrow, plotly, the analyzers, the advisor, the screens).

Why: Streamlit runs the app's script only when a browser connects, so a fresh server paid these
imports (about 1.5 s on a busy 2-core machine) inside the first page a person opened. Done here,
before the server listens, the first page costs what any later one does.
"""

from __future__ import annotations

import sys


def preload() -> None:
    """Import the modules the pages use (kept in `sys.modules` for every session)."""
    import plotly.graph_objects  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import tpu_perf.advise  # noqa: F401
    import tpu_perf.analyzers.report  # noqa: F401
    from tpu_perf.dashboard.screens import compare, run, runs  # noqa: F401


def main() -> None:
    preload()
    from streamlit.web import cli

    sys.argv = ["streamlit", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
