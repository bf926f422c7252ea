"""The `tpu-perf` command. Thin: parse options into dataclasses, call, render.

Exit codes: 0 success (for `record`: the script's own exit code), 2 usage error, 3 data error.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperCommand

from tpu_perf import __version__
from tpu_perf.collectors.sampler import DEFAULT_SAMPLE_INTERVAL_S
from tpu_perf.errors import TpuPerfError, UsageError
from tpu_perf.jsonio import dumps
from tpu_perf.store import layout
from tpu_perf.text import printable

if TYPE_CHECKING:
    from tpu_perf.collectors.session import RecordOptions

app = typer.Typer(
    name="tpu-perf",
    help="Record, analyse and guard the performance of JAX and PyTorch training on TPUs (and GPUs).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)
out = Console()
err = Console(stderr=True, soft_wrap=True)  # one message, one line: logs and tests grep them

StoreOption = Annotated[str, typer.Option("--store", envvar=layout.STORE_ENV, help="Run store: a folder or an fsspec URL (memory://, gs://...).", show_default=True)]


def _version(value: bool) -> None:
    if value:
        out.print(f"tpu-perf {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False) -> None:
    """tpu-perf: record a training script, then report, compare and check its performance."""


def _parse_tags(tags: list[str]) -> dict[str, str]:
    parsed = {}
    for tag in tags:
        key, sep, value = tag.partition("=")
        if not sep or not key:
            raise UsageError(f"--tag {tag!r}: expected KEY=VALUE")
        parsed[key] = value
    return parsed


def _parse_window(text: str) -> tuple[int, int]:
    start, sep, stop = text.partition(":")
    try:
        window = (int(start), int(stop))
    except ValueError:
        raise UsageError(f"--trace-steps {text!r}: expected START:STOP, e.g. 5:8") from None
    if not sep or window[0] < 0 or window[1] <= window[0]:
        raise UsageError(f"--trace-steps {text!r}: expected START:STOP with 0 <= START < STOP")
    return window


def _parse_addr(text: str | None) -> str | None:
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--tpu-metrics-addr {text!r}: expected HOST:PORT, e.g. localhost:8431")
    return text


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
        tags=_parse_tags(tag),
        options=options,
        log=lambda line: err.print(line, highlight=False, markup=False, soft_wrap=True),
        on_created=lambda w: err.print(f"tpu-perf: recording run {w.run_id} into {w.url}", highlight=False, markup=False),
    )
    _print_summary(result.url, store, result.warnings)
    code = result.outcome.exit_code
    if code == 0 and result.topologies_failed:
        code = 3  # asked for TPU compile numbers and got none: a CI gate must not pass silently
    raise typer.Exit(code)


def record_options(
    store: str,
    *,
    trace_steps: str | tuple[int, int] | None = "3:6",
    tokens_per_step: int | None = None,
    flops_per_step: float | None = None,
    chip: str | None = None,
    warmup_steps: int | None = None,
    model: str | None = None,
    hf_config: str | None = None,
    convention: str | None = None,
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL_S,
    tpu_metrics_addr: str | None = None,
    batch_size: int | None = None,
    topology: str | list[str] | tuple[str, ...] = (),
    quiet: bool = False,
) -> RecordOptions:
    """The `record` command's options, checked before anything runs (a UsageError saying which
    option is wrong otherwise). Shared by `tpu-perf record`, `tpu_perf.record()` and `%%tpu_perf`:
    the keywords are the command's options (`--trace-steps 3:6` is `trace_steps="3:6"` or `(3, 6)`;
    None turns the trace window off, as `--no-trace` does)."""
    from tpu_perf.collectors.session import RecordOptions

    if chip:
        from tpu_perf.hardware import lookup_chip, unknown_chip_message

        if lookup_chip(chip) is None:
            raise UsageError(unknown_chip_message("--chip", chip))
    architecture, calibration = _model_and_calibration(model, hf_config, store)
    window = _parse_window(trace_steps) if isinstance(trace_steps, str) else trace_steps
    try:
        return RecordOptions(
            trace_steps=_parse_window(f"{window[0]}:{window[1]}") if window is not None else None,
            tokens_per_step=tokens_per_step,
            flops_per_step=flops_per_step,
            chip=chip,
            warmup_steps=warmup_steps,
            model=model,
            hf_config=hf_config,
            convention=_convention(convention),
            architecture=architecture,
            calibration=calibration,
            sample_interval_s=sample_interval,
            tpu_metrics_addr=_parse_addr(tpu_metrics_addr),
            batch_size=batch_size,
            topologies=_topologies([topology] if isinstance(topology, str) else list(topology)),
            progress=not quiet,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _topologies(names: list[str]) -> tuple[str, ...]:
    """Validate --topology values before the script runs (the slice itself is built after it)."""
    from tpu_perf.collectors.jax.aot import parse_topology

    return tuple(dict.fromkeys(parse_topology(n) for n in names))


def _convention(name: str | None) -> str | None:
    """Validate --convention before anything runs; returns its canonical name."""
    if name is None:
        return None
    from tpu_perf.modelflops.conventions import get_convention

    return get_convention(name).name


def _model_and_calibration(model: str | None, hf_config: str | None, store: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Validate --model / --hf-config now (not after a long run) and read the store's calibration."""
    from tpu_perf.hardware.calibrate import load_calibrations
    from tpu_perf.modelflops.calculator import resolve_architecture

    arch = resolve_architecture(model=model, hf_config=hf_config) if (model or hf_config) else None
    return (arch.to_dict() if arch else None), (load_calibrations(store) or None)


def _print_summary(url: str, store: str, warnings: list[str] | None = None) -> None:
    from tpu_perf.analyzers.index_row import write_index_row
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.store import load_run
    from tpu_perf.views import format as fmt

    try:
        run = load_run(url)
        report = build_report(run, summary=True)
    except TpuPerfError as exc:
        err.print(f"tpu-perf: run saved at {url}, but it cannot be summarised: {printable(str(exc))}", highlight=False, markup=False)
        for warning in warnings or ():
            err.print(f"tpu-perf: warning: {printable(warning)}", style="yellow", highlight=False, markup=False)
        return
    write_index_row(run, store)  # the run's row in the store's index (`ls`, `history`, selectors)
    s, r = report.steps, report.run
    device = f" ({fmt.seconds(s.device_median_s)} on the device)" if s.device_median_s is not None else ""
    err.print(
        f"tpu-perf: run {r.id} {r.status}: {s.count} steps, {fmt.step_time(s.median_s, s.step_s, s.step_basis)}{device}, "
        f"utilisation {fmt.percent(report.mfu.value)}; folder {url}\n"
        f"tpu-perf: see it with `tpu-perf report {r.id}" + (f" --store {store}" if store != layout.DEFAULT_STORE else "") + "`",
        highlight=False,
        markup=False,
    )
    for warning in r.warnings:
        err.print(f"tpu-perf: warning: {warning}", style="yellow", highlight=False, markup=False)


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
    report = build_report(loaded, convention=_convention(convention))
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


def ls_rows(store: str) -> list[dict[str, Any]]:
    """One row per run of `store` for `ls`, from the runs index: id, name, status, start, steps,
    step time (`steps.step_s`), processes, url, tags, and why a damaged run is damaged (`damage`)."""
    from tpu_perf.analyzers.index_row import load_index
    from tpu_perf.store.fs import filesystem, join, to_url

    fs, base = filesystem(store)
    return [  # a folder's name is user text too (undecodable bytes, control characters): shown escaped
        {"id": printable(row["id"]), "name": row["name"], "status": row["status"], "started_at": row["started_at"], "steps": row.get("steps"), "step_s": row.get("step_s"), "processes": row.get("processes") or 1, "url": printable(to_url(fs, join(base, row["id"]))), "tags": row.get("tags") or {}, "damage": row.get("error") and printable(row["error"])}
        for row in load_index(store)
    ]


LS_FULL_WIDTH = 100
"""Below this many columns `ls` shows when a run started without the year and seconds."""


def render_ls(rows: list[dict[str, Any]], store: str, width: int | None = None) -> Table:
    """The runs as a table that fits the terminal (80 columns too) without cutting an id, a name or
    a status: no vertical rules, a shorter start time when narrow, and any long cell wrapped whole
    (`overflow="fold"`), never cut with "…". Every cell is plain text (names, statuses and reasons
    are user text)."""
    from rich import box
    from rich.text import Text

    from tpu_perf.views import format as fmt
    from tpu_perf.views.report import STATUS_STYLE

    narrow = (width or out.width) < LS_FULL_WIDTH
    table = Table(title=Text(f"runs in {store}"), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("id", "name", "status", "started", "steps", "step time"):
        whole = col in ("id", "status", "started")
        table.add_column(col, no_wrap=whole, overflow="fold", min_width=max(len(r[col]) for r in rows) if col in ("id", "status") and rows else None)  # ids are copied whole
    for r in rows:
        name = str(r["name"] or "") if r["processes"] == 1 else f"{r['name']} ×{r['processes']} processes"
        steps = str(r["steps"]) if r["steps"] is not None else "n/a"
        if r.get("damage"):
            name, steps = f"{r['url']}: {r['damage']}", "n/a"
        started = fmt.timestamp(r["started_at"])
        if narrow and r["started_at"] is not None:
            started = started[5:16]  # "12-02 04:14" of "2026-12-02 04:14:48"
        table.add_row(Text(r["id"]), Text(name), Text(r["status"], style=STATUS_STYLE.get(r["status"], "red")), started, steps, fmt.seconds(r["step_s"]))
    return table


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
        if isinstance(exc, _click_exceptions()):
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


def _click_exceptions() -> tuple[type[Exception], ...]:
    """ClickException from typer's bundled click (typer >= 0.29) and from click itself, if present."""
    found: list[type[Exception]] = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(__import__(module, fromlist=["ClickException"]).ClickException)
        except ImportError:
            continue
    return tuple(found)


if __name__ == "__main__":
    main()
