"""`tpu-perf doctor`: one line per check (verdict, what was found, the fix); exit 0 when none fails."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from tpu_perf.store import layout

STYLE = {"ok": "green", "fail": "bold red", "skip": "dim"}


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)


def doctor_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    store: Annotated[str, typer.Option("--store", envvar=layout.STORE_ENV, help="Run store to check for writing.")] = layout.DEFAULT_STORE,
    tpu_metrics_addr: Annotated[str | None, typer.Option(envvar="TPU_PERF_TPU_METRICS_ADDR", help="HOST:PORT of libtpu's metric service; given, it must answer.", show_default=False)] = None,
    site: Annotated[list[str], typer.Option("--site", help="A folder of packages that goes before the environment's (as on PYTHONPATH); repeatable.")] = [],  # noqa: B006
    no_probe: Annotated[bool, typer.Option("--no-probe", help="Do not start jax in a child process (skips the profiler and chip checks).")] = False,
) -> None:
    """Check this environment: Python and package versions, the jax/jaxlib/libtpu and torch/torch-tpu
    pairs, the profiler, the chip, libtpu's metric service, the store and XProf. Exit 1 if any fails."""
    from tpu_perf import jsonio
    from tpu_perf.commands.options import parse_addr
    from tpu_perf.doctor import DoctorOptions, diagnose

    result = diagnose(DoctorOptions(site=tuple(site), store=store, tpu_metrics_addr=parse_addr(tpu_metrics_addr), probe=not no_probe))
    if as_json:
        sys.stdout.write(jsonio.dumps({"ok": result.ok, "checks": list(result.checks)}) + "\n")
    else:
        console = Console(soft_wrap=True)
        for c in result.checks:
            line = Text.assemble((f"{c.verdict.upper():<5}", STYLE[c.verdict]), f" {c.name}: {c.detail}")
            if c.fix:
                line.append(f"; fix: {c.fix}", style="yellow")
            console.print(line, highlight=False)
    raise typer.Exit(0 if result.ok else 1)
