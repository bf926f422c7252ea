"""Peak numbers per chip, looked up by name, alias or the device-kind string a framework reports.

A typed table, never an if/elif chain. Numbers are dense peaks per *device* as the framework
exposes it (a chip with two devices has half the chip's peak per device). Sources: see FACTS.md;
the full catalogue with a link per number lives in `catalogue.toml` (issue [mfu]).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Chip:
    """One accelerator model."""

    name: str
    """Canonical name, e.g. `tpu-v6e`."""
    aliases: tuple[str, ...] = ()
    peak_tflops: dict[str, float] = field(default_factory=dict)
    """Dense peak TFLOP/s per chip, by dtype (`bf16`, `fp8`, `int8`, `fp32`)."""
    hbm_bytes: int | None = None
    hbm_gbps: float | None = None
    devices_per_chip: int = 1
    sources: dict[str, str] = field(default_factory=dict)

    def peak_tflops_per_device(self, precision: str = "bf16") -> float | None:
        peak = self.peak_tflops.get(precision)
        return None if peak is None else peak / self.devices_per_chip

    @property
    def hbm_bytes_per_device(self) -> int | None:
        return None if self.hbm_bytes is None else self.hbm_bytes // self.devices_per_chip


GiB = 1024**3
GB = 1000**3

_CHIPS: tuple[Chip, ...] = (
    Chip(name="tpu-v3", aliases=("v3", "tpu v3"), peak_tflops={"bf16": 123.0}, hbm_bytes=32 * GiB, hbm_gbps=900, devices_per_chip=2),
    Chip(name="tpu-v4", aliases=("v4", "tpu v4"), peak_tflops={"bf16": 275.0, "int8": 275.0}, hbm_bytes=32 * GiB, hbm_gbps=1200),
    Chip(name="tpu-v5e", aliases=("v5e", "v5litepod", "tpu v5 lite", "tpu v5e"), peak_tflops={"bf16": 197.0, "int8": 393.0}, hbm_bytes=16 * GB, hbm_gbps=819),
    Chip(name="tpu-v5p", aliases=("v5p", "tpu v5", "tpu v5p"), peak_tflops={"bf16": 459.0}, hbm_bytes=95 * GB, hbm_gbps=2765),
    Chip(name="tpu-v6e", aliases=("v6e", "trillium", "tpu v6 lite", "tpu v6e"), peak_tflops={"bf16": 918.0, "int8": 1836.0}, hbm_bytes=32 * GB, hbm_gbps=1638),
    Chip(name="tpu7x", aliases=("ironwood", "tpu 7x", "tpu7x", "v7x"), peak_tflops={"bf16": 2307.0, "fp8": 4614.0}, hbm_bytes=192 * GB, hbm_gbps=7380, devices_per_chip=2),
    Chip(name="a100", aliases=("a100-sxm4-80gb", "nvidia a100"), peak_tflops={"bf16": 312.0}, hbm_bytes=80 * GB, hbm_gbps=2039),
    Chip(name="h100", aliases=("h100-sxm", "nvidia h100", "h100 80gb hbm3"), peak_tflops={"bf16": 989.0, "fp8": 1979.0}, hbm_bytes=80 * GB, hbm_gbps=3350),
    Chip(name="h200", aliases=("nvidia h200",), peak_tflops={"bf16": 989.0, "fp8": 1979.0}, hbm_bytes=141 * GB, hbm_gbps=4800),
    Chip(name="b200", aliases=("nvidia b200",), peak_tflops={"bf16": 2250.0}, hbm_bytes=180 * GB, hbm_gbps=8000),
)


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


def all_chips() -> tuple[Chip, ...]:
    return _CHIPS


def lookup_chip(name: str | None) -> Chip | None:
    """Find a chip by canonical name, alias, or a device-kind string such as `TPU v6 lite`."""
    if not name:
        return None
    key = _norm(name)
    for chip in _CHIPS:
        if key in {_norm(chip.name), *map(_norm, chip.aliases)}:
            return chip
    for chip in _CHIPS:  # device kinds carry extra words: "NVIDIA H100 80GB HBM3"
        if any(re.search(rf"\b{re.escape(_norm(a))}\b", key) for a in (chip.name, *chip.aliases)):
            return chip
    return None
