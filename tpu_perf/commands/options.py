"""Option values checked before anything runs, shared by the CLI, its commands and the notebook:
`--store`, `--tag KEY=VALUE`, `--tpu-metrics-addr`, `--convention`, and every option of `record`
(`tpu-perf record`, `tpu_perf.record()` and `%%tpu_perf` take the same ones, checked the same way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tpu_perf.collectors.sampler import DEFAULT_SAMPLE_INTERVAL_S
from tpu_perf.errors import UsageError
from tpu_perf.store import layout

if TYPE_CHECKING:
    from tpu_perf.collectors.session import RecordOptions

StoreOption = Annotated[str, typer.Option("--store", envvar=layout.STORE_ENV, help="Run store: a folder or an fsspec URL (memory://, gs://...).", show_default=True)]


def parse_tags(tags: list[str]) -> dict[str, str]:
    """`--tag KEY=VALUE` values as a dict; a UsageError naming the tag that has no `=`."""
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


def parse_addr(text: str | None) -> str | None:
    """`--tpu-metrics-addr HOST:PORT`, checked; None stays None (libtpu's default is used)."""
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--tpu-metrics-addr {text!r}: expected HOST:PORT, e.g. localhost:8431")
    return text


def convention_name(name: str | None) -> str | None:
    """Validate --convention before anything runs; returns its canonical name."""
    if name is None:
        return None
    from tpu_perf.modelflops.conventions import get_convention

    return get_convention(name).name


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
            convention=convention_name(convention),
            architecture=architecture,
            calibration=calibration,
            sample_interval_s=sample_interval,
            tpu_metrics_addr=parse_addr(tpu_metrics_addr),
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


def _model_and_calibration(model: str | None, hf_config: str | None, store: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Validate --model / --hf-config now (not after a long run) and read the store's calibration."""
    from tpu_perf.hardware.calibrate import load_calibrations
    from tpu_perf.modelflops.calculator import resolve_architecture

    arch = resolve_architecture(model=model, hf_config=hf_config) if (model or hf_config) else None
    return (arch.to_dict() if arch else None), (load_calibrations(store) or None)
