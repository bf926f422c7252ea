"""`tpu-perf dashboard [STORE]`: the Streamlit dashboard over a run store."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from tpu_perf.errors import UsageError
from tpu_perf.store import layout
from tpu_perf.store.fs import filesystem, is_local

LOOPBACK = "127.0.0.1"


def streamlit_argv(host: str, port: int) -> list[str]:
    """The `streamlit run` command line for the app, headless, bound to `host:port`."""
    app = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        f"--server.address={host}", f"--server.port={port}", "--server.headless=true",
        "--server.fileWatcherType=none", "--server.runOnSave=false",
        "--browser.gatherUsageStats=false", f"--browser.serverAddress={host}", f"--browser.serverPort={port}",
        "--client.toolbarMode=viewer", "--theme.base=light",
    ]  # fmt: skip


def _check_store(store: str) -> str:
    if is_local(store):
        path = Path(store).expanduser()
        if not path.is_dir():
            raise UsageError(f"STORE {store!r}: no such folder; record a run first with `tpu-perf record --store {store} train.py`")
        return str(path.resolve())
    fs, base = filesystem(store)
    if not fs.exists(base):
        raise UsageError(f"STORE {store!r}: not found; give a store that holds runs")
    return store


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def register(app: typer.Typer) -> None:
    @app.command()
    def dashboard(
        store: Annotated[str | None, typer.Argument(help="Run store: a folder or fsspec URL (default: $TPU_PERF_STORE, else ./tpu-perf-runs).", show_default=False)] = None,
        port: Annotated[int, typer.Option(help="Port to serve on.", min=1, max=65535)] = 8501,
        host: Annotated[str, typer.Option(help="Address to bind. The default serves this machine only; 0.0.0.0 shows your runs to the network.")] = LOOPBACK,
    ) -> None:
        """Open the Streamlit dashboard: runs table, runs side by side, one run in full."""
        try:
            import plotly  # noqa: F401
            import streamlit  # noqa: F401
        except ImportError:
            raise UsageError("the dashboard needs streamlit and plotly: pip install 'tpu-perf[dashboard]'") from None
        resolved = _check_store(store or layout.default_store())
        if not _is_loopback(host):
            typer.echo(f"tpu-perf: warning: serving on {host}: anyone who can reach this machine can read the runs in {resolved}", err=True)
        typer.echo(f"tpu-perf: dashboard for {resolved} at http://{host}:{port} (Ctrl-C stops it)", err=True)
        env = {**os.environ, layout.STORE_ENV: resolved}
        argv = streamlit_argv(host, port)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, env)  # the server replaces this process: signals reach it directly
