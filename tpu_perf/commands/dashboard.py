"""`tpu-perf dashboard [STORE]`: the Streamlit dashboard over a run store."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from tpu_perf.errors import UsageError
from tpu_perf.store import layout
from tpu_perf.store.fs import filesystem, is_local

LOOPBACK = "127.0.0.1"


WILDCARDS = ("0.0.0.0", "::", "")
"""Addresses that mean "every interface": no one can open them in a browser."""


def public_name(host: str) -> str:
    """The name to open `host` by: this machine's name for a wildcard bind, else `host` itself."""
    return socket.gethostname() if host in WILDCARDS else host


def authority(name: str, port: int) -> str:
    """`name:port`, with an IPv6 address in brackets as URLs need."""
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


def open_url(host: str, port: int) -> str:
    """A URL a person can open, for a server bound to `host:port`."""
    return f"http://{authority(public_name(host), port)}"


def check_port_free(host: str, port: int) -> None:
    """Bind `host:port` once as the server will (SO_REUSEADDR, as Tornado does), so a busy port or
    an address not on this machine is one clear line before anything is announced."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: cannot be resolved ({exc.strerror}); give an IP address or a host name of this machine") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(f"--port {port}: {authority(host, port)} is already in use (another dashboard?); pick a free one with --port N") from None
            raise UsageError(f"--host {host}: cannot serve on {authority(host, port)} ({exc.strerror}); give an address of this machine") from None
    target = ("::1" if family == socket.AF_INET6 else LOOPBACK) if host in WILDCARDS else address[0]
    try:  # a server that answers there (one bound with SO_REUSEPORT lets the bind above pass)
        socket.create_connection((target, port), timeout=0.5).close()
    except OSError:
        return
    raise UsageError(f"--port {port}: {authority(host, port)} is already in use (a server answers there); pick a free one with --port N")


def streamlit_argv(host: str, port: int) -> list[str]:
    """The `streamlit run` command line for the app, headless, bound to `host:port`, in a process
    that imports the pages' modules first (`tpu_perf.dashboard.serve`: no import in the first page)."""
    app = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    return [
        sys.executable, "-m", "tpu_perf.dashboard.serve", "run", str(app),
        f"--server.address={host}", f"--server.port={port}", "--server.headless=true",
        "--server.fileWatcherType=none", "--server.runOnSave=false", "--runner.postScriptGC=false",
        "--browser.gatherUsageStats=false", f"--browser.serverAddress={public_name(host)}", f"--browser.serverPort={port}",
        "--client.toolbarMode=viewer", "--theme.base=light", "--server.enableStaticServing=false",
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
        store_option: Annotated[str | None, typer.Option("--store", help="The run store, as every other command takes it (same as STORE).", show_default=False)] = None,
        port: Annotated[int, typer.Option(help="Port to serve on.", min=1, max=65535)] = 8501,
        host: Annotated[str, typer.Option(help="Address to bind. The default serves this machine only; 0.0.0.0 shows your runs to the network.")] = LOOPBACK,
    ) -> None:
        """Open the Streamlit dashboard: runs table, runs side by side, one run in full."""
        try:
            import plotly  # noqa: F401
            import streamlit  # noqa: F401
        except ImportError:
            raise UsageError("the dashboard needs streamlit and plotly: pip install 'tpu-perf[dashboard]'") from None
        if store and store_option and store != store_option:
            raise UsageError(f"STORE {store!r} and --store {store_option!r} differ; give one")
        resolved = _check_store(store or store_option or layout.default_store())
        check_port_free(host, port)
        if not _is_loopback(host):
            typer.echo(f"tpu-perf: warning: serving on {host}: anyone who can reach this machine can read the runs in {resolved}", err=True)
        typer.echo(f"tpu-perf: dashboard for {resolved} at {open_url(host, port)} (Ctrl-C stops it)", err=True)
        env = {**os.environ, layout.STORE_ENV: resolved}
        argv = streamlit_argv(host, port)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, env)  # the server replaces this process: signals reach it directly
