"""Peak numbers per chip, looked up by name, alias or the device-kind string a framework reports.

A typed table read from `catalogue.toml` (one entry per chip, a source link per number), never an
if/elif chain. Peaks are dense TFLOP/s per *chip*; `peak_tflops_per_device` divides by the devices
the framework exposes per chip (Ironwood: 2), so throughput and peak can be put at one granularity.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

PRECISIONS = ("bf16", "fp8", "int8", "fp16", "fp32")
"""Dtypes a peak can be given for; bf16 is the default MFU denominator."""


@dataclass(frozen=True, kw_only=True)
class Chip:
    """One accelerator model."""

    name: str
    """Canonical name, e.g. `tpu-v6e`."""
    kind: str = "tpu"
    """`tpu`, `gpu` or `cpu`."""
    aliases: tuple[str, ...] = ()
    peak_tflops: dict[str, float] = field(default_factory=dict)
    """Dense peak TFLOP/s per chip, by dtype (`bf16`, `fp8`, `int8`, `fp16`, `fp32`)."""
    hbm_bytes: int | None = None
    """HBM per chip."""
    hbm_gbps: float | None = None
    """HBM bandwidth per chip, GB/s."""
    devices_per_chip: int = 1
    measured: bool = False
    """True when no published peak exists and one must be measured (`tpu-perf calibrate`)."""
    sources: dict[str, str] = field(default_factory=dict)
    """A source link per number, keyed like it (`bf16`, `hbm_bytes`, `devices_per_chip`, ...)."""

    def peak_tflops_per_device(self, precision: str = "bf16") -> float | None:
        peak = self.peak_tflops.get(precision)
        return None if peak is None else peak / self.devices_per_chip

    @property
    def hbm_bytes_per_device(self) -> int | None:
        return None if self.hbm_bytes is None else self.hbm_bytes // self.devices_per_chip


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-/,()]+", " ", text.strip().lower()).strip()


@cache
def all_chips() -> tuple[Chip, ...]:
    """Every chip in the packaged catalogue, in file order."""
    text = Path(__file__).with_name("catalogue.toml").read_text(encoding="utf-8")  # not importlib.resources: its readers cost ms to import, per trace import
    chips = []
    for entry in tomllib.loads(text)["chip"]:
        chips.append(
            Chip(
                name=entry["name"],
                kind=entry.get("kind", "tpu"),
                aliases=tuple(entry.get("aliases", ())),
                peak_tflops={k: float(v) for k, v in entry.get("peak_tflops", {}).items()},
                hbm_bytes=entry.get("hbm_bytes"),
                hbm_gbps=entry.get("hbm_gbps"),
                devices_per_chip=int(entry.get("devices_per_chip", 1)),
                measured=bool(entry.get("measured", False)),
                sources=dict(entry.get("sources", {})),
            )
        )
    return tuple(chips)


def _keys(chip: Chip) -> list[str]:
    return [_norm(chip.name), *map(_norm, chip.aliases)]


def lookup_chip(name: str | None) -> Chip | None:
    """Find a chip by canonical name, alias, or a device-kind string such as `TPU v6 lite`.

    Exact names and aliases win; otherwise the chip with the longest alias whose words all
    appear in `name` (so `NVIDIA H100 PCIe` finds h100-pcie, `NVIDIA A100-SXM4-40GB` a100-40gb).
    """
    if not name:
        return None
    key = _norm(name)
    for chip in all_chips():
        if key in _keys(chip):
            return chip
    words = set(key.split())
    best: tuple[int, int, Chip] | None = None
    for chip in all_chips():
        for alias in _keys(chip):
            alias_words = alias.split()
            if alias_words and set(alias_words) <= words:
                score = (len(alias_words), len(alias))
                if best is None or score > best[:2]:
                    best = (*score, chip)
    return best[2] if best else None


def by_memory(chip: Chip, total_bytes: float | None) -> Chip:
    """The variant of `chip` (same family: the name before its first "-") whose HBM is nearest a
    device's own total memory, where `chip`'s is more than 15 % off: an `NVIDIA A100-PG509-200`
    with 42.3 GB is the 40 GB A100 (1,555 GB/s), not the 80 GB one its name's "a100" alias finds."""
    if not total_bytes or not chip.hbm_bytes or abs(chip.hbm_bytes - total_bytes) <= 0.15 * total_bytes:
        return chip
    family = chip.name.split("-")[0]
    variants = [c for c in all_chips() if c.kind == chip.kind and c.name.split("-")[0] == family and c.hbm_bytes]
    best = min(variants, key=lambda c: abs(c.hbm_bytes - total_bytes))  # type: ignore[operator]
    return best if abs(best.hbm_bytes - total_bytes) <= 0.15 * total_bytes else chip  # type: ignore[operator]


def suggest_chips(name: str, n: int = 3) -> list[str]:
    """Close canonical names or aliases for an unknown chip name, best first."""
    candidates = {k: c.name for c in all_chips() for k in _keys(c)}
    close = difflib.get_close_matches(_norm(name), list(candidates), n=n * 3, cutoff=0.5)
    seen: list[str] = []
    for k in close:
        label = candidates[k] if candidates[k] == k.replace(" ", "-") else k
        if label not in seen:
            seen.append(label)
    return seen[:n]


def unknown_chip_message(flag: str, name: str) -> str:
    """One line naming the flag, the bad value and close names."""
    close = suggest_chips(name)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"{flag} {name!r}: unknown chip{hint} (`tpu-perf chips` lists them)"
