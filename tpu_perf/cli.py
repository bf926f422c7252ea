"""The `tpu-perf` command. Thin: parse options into dataclasses, call, render.

Exit codes: 0 success (for `record`: the script's own exit code), 2 usage error, 3 data error.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from tpu_perf.collectors.sampler import DEFAULT_SAMPLE_INTERVAL_S
from tpu_perf.commands.console import click_exceptions, err, out
from tpu_perf.commands.options import StoreOption, convention_name, parse_tags, record_options
from tpu_perf.errors import TpuPerfError
from tpu_perf.jsonio import dumps
from tpu_perf.store import layout
from tpu_perf.text import printable
from tpu_perf.version import __version__

app = typer.Typer(
    name="tpu-perf",
    help="Record, analyse and guard the performance of JAX and PyTorch training on TPUs (and GPUs).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)
def _version(value: bool) -> None:
    if value:
        out.print(f"tpu-perf {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False) -> None:
    """tpu-perf: record a training script, then report, compare and check its performance."""


class _RecordCommand(TyperCommand):
    """`record`: its own options end at SCRIPT or after `-m MODULE`; the rest is the script's."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from tpu_perf.commands.script_args import split_at_script

        return super().parse_args(ctx, split_at_script(args, self.params))


@app.command(cls=_RecordCommand, context_settings={"allow_extra_args": True, "allow_interspersed_args": False})
def record(
    ctx: typer.Context,
    script: Annotated[str | None, typer.Argument(help="Training script to run as `python SCRIPT ARGS...` would.", show_default=False)] = None,
    module: Annotated[str | None, typer.Option("-m", "--module", help="Run a module as `python -m MODULE ARGS...` would.")] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: the script's name).")] = None,
    tag: Annotated[list[str], typer.Option("--tag", help="KEY=VALUE label; repeatable.")] = [],  # noqa: B006
    store: StoreOption = layout.DEFAULT_STORE,
    trace_steps: Annotated[str, typer.Option(help="Steps START:STOP to capture in an XLA/profiler trace window.")] = "3:6",
    no_trace: Annotated[bool, typer.Option("--no-trace", help="Capture no trace window.")] = False,
    tokens_per_step: Annotated[int | None, typer.Option(help="Tokens per step (global batch x sequence) for tokens/s.", min=1)] = None,
    flops_per_step: Annotated[float | None, typer.Option(help="FLOPs per step; overrides the measured count.", min=1)] = None,
    chip: Annotated[str | None, typer.Option(help="Chip name (v6e, h100, ...) when detection is wrong or impossible.")] = None,
    model: Annotated[str | None, typer.Option(help="Model preset (llama3-8b, ...) for model-FLOPs MFU; see `tpu-perf mfu --help`.")] = None,
    hf_config: Annotated[str | None, typer.Option(help="Hugging Face config.json of the model, for model-FLOPs MFU.")] = None,
    convention: Annotated[str | None, typer.Option(help="Model-FLOPs convention for MFU (maxtext, palm, torchtitan, ...; default maxtext).")] = None,
    warmup_steps: Annotated[int | None, typer.Option(help="Steps to treat as warm-up (default: leading steps that compiled, at least 1).", min=0)] = None,
    sample_interval: Annotated[float, typer.Option(help="Seconds between runtime samples (HBM, duty cycle, host); see docs/runtime.md.", min=0.01)] = DEFAULT_SAMPLE_INTERVAL_S,
    tpu_metrics_addr: Annotated[str | None, typer.Option(envvar="TPU_PERF_TPU_METRICS_ADDR", help="HOST:PORT of libtpu's runtime metric service (default: libtpu's TPU_RUNTIME_METRICS_PORTS, else localhost:8431).", show_default=False)] = None,
    batch_size: Annotated[int | None, typer.Option(help="Global batch size per step, for the largest-batch estimate.", min=1)] = None,
    topology: Annotated[list[str], typer.Option("--topology", help="TPU slice (v6e:2x2, v5p:2x2x1, ...) to compile the JAX step for after the run, without a TPU; repeatable (docs/aot.md).")] = [],  # noqa: B006
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines while recording.")] = False,
    repeat: Annotated[int, typer.Option(help="Record N runs, each in a fresh process, tagged repeat=<group> (for `tpu-perf check`).", min=1)] = 1,
) -> None:
    """Run a training script unchanged and record its steps, compiles, FLOPs, memory, HLO and a trace.

    Everything after SCRIPT (or -m MODULE) goes to the script: `tpu-perf record train.py --lr 3e-4`.
    The exit code is the script's.
    """
    from tpu_perf.collectors.record import record as do_record
    from tpu_perf.collectors.runner import resolve_target
    from tpu_perf.store.writable import check_writable_store

    args = list(ctx.args)
    if module and script:
        args = [script, *args]
        script = None
    options = record_options(
        store,
        trace_steps=None if no_trace else trace_steps,
        tokens_per_step=tokens_per_step,
        flops_per_step=flops_per_step,
        chip=chip,
        warmup_steps=warmup_steps,
        model=model,
        hf_config=hf_config,
        convention=convention,
        sample_interval=sample_interval,
        tpu_metrics_addr=tpu_metrics_addr,
        batch_size=batch_size,
        topology=topology,
        quiet=quiet,
    )
    target = resolve_target(script, module, args)
    check_writable_store(store)
    if repeat > 1:
        from tpu_perf.commands.repeat import record_repeated

        raise typer.Exit(record_repeated(repeat, sys.argv[1:], args if module else ctx.args, log=lambda line: err.print(line, highlight=False, markup=False)))
    result = do_record(
        target,
        store=store,
        name=name,
        tags=parse_tags(tag),
        options=options,
        log=lambda line: err.print(line, highlight=False, markup=False, soft_wrap=True),
        on_created=lambda w: err.print(f"tpu-perf: recording run {w.run_id} into {w.url}", highlight=False, markup=False),
    )
    _print_summary(result.url, store, result.warnings)
    code = result.outcome.exit_code
    if code == 0 and result.topologies_failed:
        code = 3  # asked for TPU compile numbers and got none: a CI gate must not pass silently
    raise typer.Exit(code)


def _print_summary(url: str, store: str, warnings: list[str] | None = None) -> None:
    from tpu_perf.analyzers.index_row import write_index_row
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.commands import saved_report
    from tpu_perf.store import load_run

    try:
        run = load_run(url)
        report = build_report(run, summary=True)
    except TpuPerfError as exc:
        err.print(f"tpu-perf: run saved at {url}, but it cannot be summarised: {printable(str(exc))}", highlight=False, markup=False)
        for warning in warnings or ():
            err.print(f"tpu-perf: warning: {printable(warning)}", style="yellow", highlight=False, markup=False)
        return
    write_index_row(run, store)  # the run's row in the store's index (`ls`, `history`, selectors)
    from tpu_perf.views.report import one_line

    r = report.run
    err.print(
        f"tpu-perf: {one_line(report)}; folder {url}\n"
        f"tpu-perf: see it with `tpu-perf report {r.id}" + (f" --store {store}" if store != layout.DEFAULT_STORE else "") + "`",
        highlight=False,
        markup=False,
    )
    for warning in r.warnings:
        err.print(f"tpu-perf: warning: {warning}", style="yellow", highlight=False, markup=False)
    saved_report.save(run, store)  # its whole report, for the dashboard to open it without analysing it again (after the summary: the user has the answer first)


@app.command()
def report(
    run: Annotated[str, typer.Argument(help="Run id, unique prefix of one, run name, or run folder.")],
    store: StoreOption = layout.DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON (keys documented in the README).")] = False,
    convention: Annotated[str | None, typer.Option(help="Model-FLOPs convention for MFU, instead of the one the run was recorded with.")] = None,
) -> None:
    """Show one run: step time, compiles, FLOPs and utilisation, memory, fusion, trace."""
    from tpu_perf.advise.document import report_advice
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.store import load_run
    from tpu_perf.views.advice import render_advice_section
    from tpu_perf.views.report import render_report

    loaded = load_run(run, store=store)
    report = build_report(loaded, convention=convention_name(convention))
    doc = report.to_dict()
    advice = report_advice(loaded, report)  # advise composes the analyzers; they never import it
    if as_json:
        sys.stdout.write(dumps({**doc, "advice": advice}) + "\n")
    else:
        out.print(render_report(report))
        out.print(render_advice_section(advice))


@app.command("ls")
def ls(store: StoreOption = layout.DEFAULT_STORE, as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False) -> None:
    """List the runs in a store: id, name, status, start, steps, step time (a multi-process
    job is one run; its steps are process 0's). Read from the store's runs index (`.index/`), which
    is rebuilt here for runs that have no row; a damaged run is listed as `damaged`, with why."""
    from tpu_perf.commands.ls import ls_rows, render_ls
    from tpu_perf.store.writable import check_readable_store

    check_readable_store(store)
    rows = ls_rows(store)
    if as_json:
        from tpu_perf.jsonio import dumps_lines

        sys.stdout.write(dumps_lines(rows) + "\n")
        return
    if not rows:
        err.print(f"no runs in {store}; record one with `tpu-perf record train.py`", markup=False, highlight=False)
        return
    out.print(render_ls(rows, store))


COMMAND_MODULES: tuple[str, ...] = ("importer", "mfu", "chips", "dashboard", "check", "doctor", "advise", "history")
"""Modules under tpu_perf/commands/ that add commands: each has `register(app: typer.Typer)`."""


def _register_commands() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"tpu_perf.commands.{name}").register(app)


_register_commands()


def main() -> None:
    """Console entry point: one-line errors, exit codes by kind."""
    for stream in (sys.stdout, sys.stderr):  # a character no encoding can write is shown escaped, never a UnicodeEncodeError
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            with contextlib.suppress(OSError, ValueError):  # a stream that cannot change (a pipe a parent set up): as it is
                reconfigure(errors="backslashreplace")
    try:
        code = app(standalone_mode=False)  # click returns the code of a typer.Exit here
        sys.exit(code if isinstance(code, int) else 0)
    except TpuPerfError as exc:
        _fail(str(exc), exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("tpu-perf: interrupted", highlight=False, markup=False)
        sys.exit(130)
    except Exception as exc:  # click usage errors (typer ships its own copy of click)
        if isinstance(exc, click_exceptions()):
            if _wants_json(sys.argv[1:]):
                _fail(exc.format_message(), exc.exit_code)
            exc.show()
            sys.exit(exc.exit_code)
        if os.environ.get("TPU_PERF_DEBUG"):
            raise
        _fail(f"internal error ({type(exc).__name__}: {exc}); this is a tpu-perf bug: please report it with the command, and TPU_PERF_DEBUG=1 in the environment shows its traceback", 1)


def _wants_json(args: list[str]) -> bool:
    """Whether the command line asks for JSON output (`--json` among tpu-perf's own options; a
    recorded script's arguments are its own)."""
    if not args or args[0] == "record":
        return False
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _fail(message: str, code: int) -> None:
    """Exit with `code` after one line on stderr; under `--json` stdout gets the error as a JSON
    object too (`{"error": ..., "exit_code": ...}`), so a consumer that parses stdout always parses JSON."""
    message = printable(message)
    if _wants_json(sys.argv[1:]):
        sys.stdout.write(dumps({"error": message, "exit_code": code}) + "\n")
    err.print(f"tpu-perf: error: {message}", highlight=False, markup=False)
    sys.exit(code)


if __name__ == "__main__":
    main()
