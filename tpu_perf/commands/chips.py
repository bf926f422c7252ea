"""`tpu-perf chips` (the catalogue) and `tpu-perf calibrate` (measure this device's matmul rate)."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tpu_perf.jsonio import dumps
from tpu_perf.store import layout


def register(app: typer.Typer) -> None:
    app.command("chips")(chips_command)
    app.command("calibrate")(calibrate_command)


def chips_command(as_json: Annotated[bool, typer.Option("--json", help="Print as JSON, with a source link per number.")] = False) -> None:
    """List the chip catalogue: dense peak TFLOP/s per chip by dtype, HBM, devices per chip."""
    from tpu_perf.hardware import all_chips

    chips = all_chips()
    if as_json:
        sys.stdout.write(dumps(chips) + "\n")
        return
    table = Table(title="chip catalogue (dense peaks per chip; `--json` for sources)", title_justify="left")
    for col in ("chip", "bf16", "fp8", "int8", "fp32", "HBM GB", "HBM GB/s", "dev/chip", "aliases"):
        table.add_column(col)

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:g}"

    for c in chips:
        peaks = [num(c.peak_tflops.get(p)) for p in ("bf16", "fp8", "int8", "fp32")]
        if c.measured:
            peaks[0] = "measured"
        hbm = f"{c.hbm_bytes / 1e9:.0f}" if c.hbm_bytes else "n/a"
        table.add_row(c.name, *peaks, hbm, num(c.hbm_gbps), str(c.devices_per_chip), ", ".join(c.aliases[:3]))
    Console().print(table)


def calibrate_command(
    store: Annotated[str, typer.Option("--store", envvar=layout.STORE_ENV, help="Run store the calibration is saved in.")] = layout.DEFAULT_STORE,
    save: Annotated[bool, typer.Option("--save", help="Keep the result in <store>/calibration.json; later `record` runs use it as a measured peak.")] = False,
    framework: Annotated[str | None, typer.Option(help="jax or torch (default: jax when installed).")] = None,
    size: Annotated[int | None, typer.Option(help="Matrix side (default 1024 on CPU, 8192 on accelerators).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Measure the achieved bf16 and fp32 matmul TFLOP/s of this machine's first device."""
    from tpu_perf.hardware.calibrate import measure, save_calibration

    cal = measure(framework, size)
    path = save_calibration(cal, store) if save else None
    if as_json:
        sys.stdout.write(dumps({**asdict(cal), "saved_to": path}) + "\n")
        return
    rates = ", ".join(f"{k} {v:.4g} TFLOP/s" for k, v in cal.tflops.items())
    err = Console(stderr=True)
    Console().print(f"{cal.key} ({cal.device_kind}, {cal.framework}, {cal.size}x{cal.size} matmul): {rates} per device (measured)", highlight=False, markup=False)
    if path:
        err.print(f"saved to {path}; `tpu-perf record --store {store}` runs on this device use it as their peak", highlight=False, markup=False)
