"""The IPython extension: `%load_ext tpu_perf`.

    %%tpu_perf --name baseline --store runs --trace-steps 3:6
    for batch in batches:
        state, loss = train_step(state, batch)

records the cell with the `record` command's options (parsed by the command itself, so they are
the same flags with the same checks), and

    %tpu_perf report baseline --store runs
    %tpu_perf advise baseline --store runs --all
    %tpu_perf check --baseline baseline --candidate bigger-batch --store runs
    %tpu_perf ls --store runs

show runs as HTML in Jupyter (the same sections as the terminal's commands).
"""

from __future__ import annotations

import shlex
from typing import Any

from tpu_perf.errors import TpuPerfError, UsageError

LINE_COMMANDS = ("report", "advise", "check", "ls")


class HelpShown(Exception):
    """`--help` was given: the command's help is printed, nothing else is done."""


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magic_function(cell_magic, magic_kind="cell", magic_name="tpu_perf")
    ipython.register_magic_function(line_magic, magic_kind="line", magic_name="tpu_perf")


def _command_params(name: str, args: list[str], *, extra_ok: bool = False) -> dict[str, Any]:
    """Parse `args` as the `tpu-perf NAME` command would: its options, its checks, its defaults."""
    import typer.main

    from tpu_perf.cli import app
    from tpu_perf.commands.console import click_exceptions

    group = typer.main.get_command(app)
    command = group.commands[name]  # type: ignore[attr-defined]
    try:
        with command.make_context(f"%tpu_perf {name}", list(args)) as ctx:
            params = dict(ctx.params)
            extra = list(ctx.args)
    except Exception as exc:  # typer ships its own copy of click: match both copies' classes
        if type(exc).__name__ == "Exit":  # --help: click printed it
            raise HelpShown() from None
        if isinstance(exc, click_exceptions()):
            raise UsageError(exc.format_message()) from None
        raise
    if extra and not extra_ok:
        raise UsageError(f"%tpu_perf {name}: unexpected arguments {' '.join(extra)}")
    return {**params, "extra": extra} if extra_ok else params


def record_arguments(line: str) -> tuple[str | None, str, dict[str, str], dict[str, Any]]:
    """(name, store, tags, options for `record_options`) from a `%%tpu_perf` line."""
    from tpu_perf.commands.options import parse_tags

    params = _command_params("record", shlex.split(line), extra_ok=True)
    given = [params.pop("script", None) or "", *params.pop("extra")]
    if any(given) or params.get("module") or params.get("repeat") != 1:
        extra = " ".join(a for a in given if a) or ("-m" if params.get("module") else "--repeat")
        raise UsageError(f"%%tpu_perf: unexpected {extra}: the cell is what runs; the options are `tpu-perf record`'s (--name, --store, --trace-steps, --chip, ...), a script and --repeat are for a shell")
    options = {
        "trace_steps": None if params.pop("no_trace") else params.pop("trace_steps"),
        **{k: params[k] for k in ("tokens_per_step", "flops_per_step", "chip", "model", "hf_config", "convention", "warmup_steps", "sample_interval", "tpu_metrics_addr", "batch_size", "topology", "quiet")},
    }
    return params["name"], params["store"], parse_tags(params["tag"]), options


def cell_magic(line: str, cell: str) -> Any:
    """`%%tpu_perf [record options]`: record the cell into a run; the run's handle is the result.

    The cell runs in the notebook's namespace, inside the recording: an exception in it marks the
    run failed and fails the cell with the cell's own traceback (as `%%time` does)."""
    from IPython import get_ipython

    from tpu_perf.notebook.recording import Recording

    shell = get_ipython()
    try:
        name, store, tags, options = record_arguments(line)
        recording = Recording(name or "cell", store, tags, options, command="%%tpu_perf " + line.strip())
    except TpuPerfError as exc:
        raise _usage(exc) from None
    except HelpShown:
        return None
    code = shell.transform_cell(cell)  # the cell's own magics and !commands, as IPython runs them
    compiled = compile(code, shell.compile.cache(code, shell.execution_count), "exec")
    recording.namespaces = [shell.user_ns]
    with recording as handle:
        exec(compiled, shell.user_ns)
    return handle


def _usage(exc: Exception | str) -> Exception:
    """IPython's UsageError: one line in red, no traceback, and the cell fails."""
    from IPython.core.error import UsageError as IPythonUsageError

    return IPythonUsageError(f"tpu-perf: {exc}")


def line_magic(line: str) -> Any:
    """`%tpu_perf report|advise|check|ls ...`: the command's view of runs, as HTML in Jupyter."""
    args = shlex.split(line)
    if not args or args[0] not in LINE_COMMANDS:
        raise _usage(f"usage: %tpu_perf {{{'|'.join(LINE_COMMANDS)}}} ARGS (the `tpu-perf` command's arguments); %%tpu_perf [record options] records a cell")
    try:
        return _view(args[0], args[1:])
    except TpuPerfError as exc:
        raise _usage(exc) from None
    except HelpShown:
        return None


def _view(command: str, args: list[str]) -> Any:
    from tpu_perf.notebook import handle

    params = _command_params(command, args)
    if command == "report":
        return handle.report_view(params["run"], store=params["store"], convention=params["convention"])
    if command == "advise":
        return handle.advise_view(params["run"], store=params["store"], target=params["target"], show_all=params["show_all"])
    if command == "check":
        options = {"alpha": params["alpha"], "margin": params["margin"], "max_cv": params["max_cv"], "metrics": tuple(params["metric"]) or None, "ignore_fingerprint": tuple(params["ignore_fingerprint"])}
        return handle.check_view(params["baseline"], params["candidate"], store=params["store"], baseline_store=params.get("baseline_store"), **options)
    return handle.runs_view(params["store"])
