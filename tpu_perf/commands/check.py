"""`tpu-perf check` (a CI gate with verdicts and exit codes) and `tpu-perf baseline save`.

Thin: resolve selectors into run sets, read each run through `run_values`, call `check_sets`,
render. Exit codes are the verdict's (0 PASS/IMPROVEMENT/CHANGED/UNCHANGED, 1 REGRESSION, 3 INCONCLUSIVE,
4 BAD_DATA, 5 NOT_COMPARABLE), 2 for a usage error (a selector that matches nothing, a bad flag),
and 4 for a run or baseline file that cannot be read (3 would read as INCONCLUSIVE).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand

from tpu_perf.errors import DataError, RunNotFoundError, TpuPerfError, UsageError
from tpu_perf.store import layout
from tpu_perf.text import printable

if TYPE_CHECKING:
    from tpu_perf.store import Damage

SIDES = ("--baseline", "--candidate")

out = Console()
err = Console(stderr=True, soft_wrap=True)


class CheckDataError(TpuPerfError):
    """A run or baseline file cannot be read: exit 4 (BAD_DATA), never 3, which means INCONCLUSIVE."""

    exit_code = 4


class GreedySides(TyperCommand):
    """Lets `--baseline A B C` take several selectors, as `--baseline A --baseline B --baseline C`."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread_sides(args))


def spread_sides(args: Sequence[str]) -> list[str]:
    """Repeat the side flag before each selector that follows it (up to the next option)."""
    out_args: list[str] = []
    side = None
    for token in args:
        if token in SIDES:
            side = token
            continue
        if token.startswith("-"):
            side = None
            out_args.append(token)
            continue
        out_args += [side, token] if side else [token]
    return out_args


def register(app: typer.Typer) -> None:
    app.command("check", cls=GreedySides)(check_command)
    baseline_app = typer.Typer(help="Saved baselines: per-run values a repository can commit and `check` can read.", no_args_is_help=True)
    baseline_app.command("save")(baseline_save)
    app.add_typer(baseline_app, name="baseline")


StoreOption = Annotated[str, typer.Option("--store", envvar=layout.STORE_ENV, help="Run store (a folder or fsspec URL); for `check`, of both sides unless --baseline-store.")]
Selectors = Annotated[list[str], typer.Option(help="Runs: id, prefix, name, folder, tag:KEY=VALUE, name:NAME, file:PATH.json, or history:SEL (SEL's runs since its last change point); several may follow.", show_default=False)]


def check_command(
    baseline: Selectors = [],  # noqa: B006  (missing: our one-line usage error, exit 2)
    candidate: Selectors = [],  # noqa: B006
    store: StoreOption = layout.DEFAULT_STORE,
    baseline_store: Annotated[str | None, typer.Option(help="Run store of the baseline when it lives elsewhere (a team store).")] = None,
    alpha: Annotated[float, typer.Option(help="One-sided error rate of each end of the interval.")] = 0.05,
    margin: Annotated[float, typer.Option(help="Practical margin as a fraction: smaller changes pass.")] = 0.03,
    max_cv: Annotated[float, typer.Option(help="Run-to-run coefficient of variation above which a side is BAD_DATA.")] = 0.05,
    metric: Annotated[list[str], typer.Option(help="Metric to check (mfu, step_time, all_in_step_time, tokens_per_s, peak_memory, compiles, flops_per_step, bytes_accessed, hlo, aot_peak_hbm, aot_flops, aot_step_estimate); repeatable. Default: chosen from what the runs have.", show_default=False)] = [],  # noqa: B006
    ignore_fingerprint: Annotated[list[str], typer.Option(help="Fingerprint field allowed to differ (e.g. jax after a version bump); repeatable.", show_default=False)] = [],  # noqa: B006
    pair_by: Annotated[str | None, typer.Option(help="tag:KEY, where runs sharing a value of tag KEY on both sides are a pair recorded back to back; timed metrics are judged on per-pair ratios (docs/ci.md, Paired runs).")] = None,
    inconclusive_ok: Annotated[bool, typer.Option("--inconclusive-ok", help="Exit 0 instead of 3 when the verdict is INCONCLUSIVE.")] = False,
    timing: Annotated[str, typer.Option("--timing", help="The clock that times the steady step: wall (the iteration), or cpu: the process's CPU time per step where every run ran on a CPU and computed through its step (far steadier beside other work on a shared CPU runner), else wall time; the output says which decided and why.")] = "wall",
    require_timing: Annotated[bool, typer.Option("--require-timing", help="No UNCHANGED: when the compiled program is unchanged but the timing cannot be judged here, keep the timing's verdict (BAD_DATA 4, INCONCLUSIVE 3) instead of exiting 0.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON instead of the table.")] = False,
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML here (one testcase per check).", dir_okay=False)] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a Markdown summary here (also appended to $GITHUB_STEP_SUMMARY when set).", dir_okay=False)] = None,
    github: Annotated[bool, typer.Option("--github", help="Print ::error / ::warning annotations for GitHub Actions (to stderr with --json).")] = False,
) -> None:
    """Is the candidate slower than the baseline? A verdict with confidence, from several runs a side.

    Exit codes: 0 PASS/IMPROVEMENT/CHANGED/UNCHANGED, 1 REGRESSION, 2 usage error, 3 INCONCLUSIVE,
    4 BAD_DATA, 5 NOT_COMPARABLE (docs/ci.md says what to do about each).
    """
    from dataclasses import replace

    from tpu_perf.analyzers.paired import pair_key
    from tpu_perf.analyzers.regression import CheckOptions, check_sets
    from tpu_perf.analyzers.verdict import speed_sentence
    from tpu_perf.jsonio import dumps
    from tpu_perf.views.check import github_annotations, render_check, render_junit, render_markdown

    try:
        options = CheckOptions(alpha=alpha, margin=margin, max_cv=max_cv, metrics=tuple(metric) or None, ignore_fingerprint=tuple(ignore_fingerprint), inconclusive_ok=inconclusive_ok, require_timing=require_timing, timing=timing, pair_by=pair_key(pair_by) if pair_by is not None else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    base = side_values(baseline, baseline_store or store, flag="--baseline")
    cand = side_values(candidate, store, flag="--candidate")
    result = check_sets(base, cand, options)
    result = replace(result, sentence=speed_sentence(*side_labels(base, cand), base, cand, result).text)
    if junit:
        _write(junit, render_junit(result), flag="--junit")
    text = render_markdown(result)
    if markdown:
        _write(markdown, text, flag="--markdown")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as exc:
            err.print(f"tpu-perf: warning: $GITHUB_STEP_SUMMARY {summary}: cannot append ({exc.strerror or exc})", style="yellow", highlight=False, markup=False)
    if github:  # to stderr beside --json, so stdout stays one JSON document (the runner reads both)
        for line in github_annotations(result):
            (sys.stderr if as_json else sys.stdout).write(line + "\n")
    if as_json:  # the verdict, then each run's one answer (the report's headline fields)
        doc = {**result.to_dict(), "runs": {"baseline": [r.headline() for r in base], "candidate": [r.headline() for r in cand]}}
        sys.stdout.write(dumps(doc) + "\n")
    else:
        out.print(render_check(result))
    raise typer.Exit(result.exit_code)


def side_labels(base: Sequence[Any], cand: Sequence[Any]) -> tuple[str, str]:
    """The sides as the verdict sentence names them: run names (as the compare page labels them) for
    one run a side, else "the baseline (N runs)" and "the candidate (N runs)"."""
    from tpu_perf.analyzers.compare import labels_for

    if len(base) == len(cand) == 1:
        first, second = labels_for([(base[0].run_id, base[0].name), (cand[0].run_id, cand[0].name)])
        return first, second
    return f"the baseline ({len(base)} runs)", f"the candidate ({len(cand)} runs)"


def _write(path: Path, text: str, *, flag: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write ({exc.strerror or exc}); give a writable path") from None


def _skip_note(flag: str, run_id: str, damage: Damage) -> None:
    """One line for a damaged run a `tag:`/`name:` selector passed over (the check goes on)."""
    from tpu_perf.commands.console import err

    err.print(f"tpu-perf: note: {flag}: skipped damaged run {run_id}: {damage}", style="yellow", highlight=False, markup=False)


def side_values(selectors: Sequence[str], store: str, *, flag: str) -> list[Any]:
    """RunValues of every run the selectors name (runs in the store, entries of baseline files)."""
    from tpu_perf.analyzers.run_values import RunValues, run_values
    from tpu_perf.commands.history import expand_history
    from tpu_perf.commands.selectors import select
    from tpu_perf.store import DamagedRunError

    if not selectors:
        raise UsageError(f"{flag}: give at least one run selector (id, name:NAME, tag:KEY=VALUE, file:PATH.json)")
    try:
        selection = select(expand_history(selectors, store, flag=flag), store, flag=flag)
        values = []
        for run in selection.runs:
            try:
                values.append(run_values(run))
            except DamagedRunError as exc:
                if run.id not in selection.grouped:
                    raise
                _skip_note(flag, run.id, exc.damage)
        for damage in selection.skipped:
            _skip_note(flag, damage.run_id, damage)
    except RunNotFoundError as exc:
        raise UsageError(str(exc)) from None
    except DataError as exc:
        raise CheckDataError(str(exc)) from None
    for entry in selection.saved:
        try:
            values.append(RunValues.from_dict(entry))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckDataError(f"{flag}: a saved baseline run ({entry.get('run_id', '?')}) is malformed ({type(exc).__name__}: {exc})") from None
    return values


def baseline_save(
    name: Annotated[str, typer.Argument(help="Name of the baseline (stored in the file).")],
    selectors: Annotated[list[str], typer.Argument(help="Runs: id, prefix, name, folder, tag:KEY=VALUE or name:NAME.", show_default=False)],
    out_path: Annotated[Path | None, typer.Option("--out", help="File to write (default: NAME.baseline.json).", dir_okay=False)] = None,
    store: StoreOption = layout.DEFAULT_STORE,
) -> None:
    """Save the per-run values and fingerprints of some runs as a small JSON file to commit.

    `tpu-perf check --baseline file:PATH --candidate ...` compares against it without the run folders.
    """
    from tpu_perf.commands.selectors import write_baseline_file

    values = side_values(selectors, store, flag="SELECTOR")
    path = out_path or Path(f"{name}.baseline.json")
    try:
        write_baseline_file(path, name, [v.to_dict() for v in values])
    except (OSError, ValueError, UnicodeError) as exc:  # ValueError: a NUL in the name; UnicodeError: not encodable as a file name
        raise UsageError(f"--out {printable(str(path))}: cannot write ({getattr(exc, 'strerror', None) or exc}); give a writable path") from None
    bad = [v.run_id for v in values if v.status != "completed"]
    shown = printable(str(path))
    err.print(f"tpu-perf: saved baseline {printable(name)!r} ({len(values)} runs) to {shown}; use it with `tpu-perf check --baseline file:{shown} --candidate ...`", highlight=False, markup=False)
    if bad:
        err.print(f"tpu-perf: warning: runs {', '.join(bad)} did not complete; `check` will call this baseline BAD_DATA", style="yellow", highlight=False, markup=False)
