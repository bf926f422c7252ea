"""How memory at the peak changed between two runs (or slices): whether the peak moved, or bytes only
moved between categories (remat turning saved activations into recomputed ones). Read by the
dashboard's compare page; `tpu_perf.views.at_peak.shift_sentence` puts it in words."""

from __future__ import annotations

from dataclasses import dataclass

PEAK_STEADY_FRACTION = 0.05
"""Two peaks within this share of each other are the same peak: a change that moves more bytes
than this between categories, and not the peak, only moved them (remat recomputing what it saved)."""


@dataclass(frozen=True, kw_only=True)
class CategoryShift:
    """How memory at the peak changed from one run (or slice) to another."""

    peak_change_bytes: int
    peak_change_fraction: float | None
    changes: dict[str, int]
    """Bytes gained (+) or lost (-) by each category that changed; activations are split into the
    saved ones (`activations`) and those of remat regions (`recomputed_activations`)."""
    moved_bytes: int
    """Bytes that left some categories (the sum of the losses)."""
    peak_moved: bool
    """Whether the peak changed by more than PEAK_STEADY_FRACTION."""
    only_moved: bool
    """The peak did not move, yet more than PEAK_STEADY_FRACTION of it changed category."""
    spaces_change_bytes: dict[str, int]
    """Change of each other memory space (TPU VMEM), apart from the peak."""


def category_shift(base: dict, new: dict) -> CategoryShift:
    """The change between two `at_peak` sections (their JSON form, as the report holds them)."""
    def parts(at_peak: dict) -> dict[str, int]:  # activations split into saved and recomputed: remat moves bytes between them
        recomputed = int(at_peak.get("recomputed_bytes") or 0)
        return {**at_peak["categories"], "activations": int(at_peak["categories"].get("activations", 0)) - recomputed, "recomputed_activations": recomputed}

    before, after = parts(base), parts(new)
    changes = {k: int(after.get(k, 0)) - int(v) for k, v in before.items()}
    changes = {k: v for k, v in changes.items() if v}
    delta = int(new["peak_bytes"]) - int(base["peak_bytes"])
    fraction = delta / base["peak_bytes"] if base["peak_bytes"] else None
    moved = fraction is None or abs(fraction) > PEAK_STEADY_FRACTION
    spaces = {k: int((new.get("memory_spaces") or {}).get(k, 0)) - int((base.get("memory_spaces") or {}).get(k, 0)) for k in {*(base.get("memory_spaces") or {}), *(new.get("memory_spaces") or {})}}
    return CategoryShift(
        peak_change_bytes=delta,
        peak_change_fraction=fraction,
        changes=changes,
        moved_bytes=-sum(v for v in changes.values() if v < 0),
        peak_moved=moved,
        only_moved=not moved and -sum(v for v in changes.values() if v < 0) > PEAK_STEADY_FRACTION * base["peak_bytes"],
        spaces_change_bytes={k: v for k, v in sorted(spaces.items()) if v},
    )
