"""`tpu-perf advise RUN`: what to change next, ranked by the step-time gain to expect."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from tpu_perf.store import layout


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_command)


def advise_command(
    run: Annotated[str, typer.Argument(help="Run id, unique prefix of one, run name, or run folder.")],
    store: Annotated[str, typer.Option("--store", envvar=layout.STORE_ENV, help="Run store: a folder or an fsspec URL.")] = layout.DEFAULT_STORE,
    target: Annotated[str | None, typer.Option("--target", help="Judge hardware rules for this chip (v6e, v5p, ...) instead of the run's own.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print every rule's finding as JSON.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="Also list the rules that passed or could not be evaluated, with why.")] = False,
) -> None:
    """Findings for one run, ranked by expected step-time gain: evidence, the fix for JAX and PyTorch, docs."""
    from tpu_perf.advise import advise
    from tpu_perf.advise.document import advice_document
    from tpu_perf.errors import UsageError
    from tpu_perf.hardware import lookup_chip, unknown_chip_message
    from tpu_perf.jsonio import dumps
    from tpu_perf.store import load_run
    from tpu_perf.views.advice import render_advice

    if target is not None and lookup_chip(target) is None:
        raise UsageError(unknown_chip_message("--target", target))
    loaded = load_run(run, store=store)
    doc = advice_document(loaded, advise(loaded, target=target))
    if as_json:
        sys.stdout.write(dumps(doc) + "\n")
    else:
        Console().print(render_advice(doc, show_all=show_all))
