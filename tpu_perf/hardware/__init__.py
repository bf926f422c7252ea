"""Chip catalogue and device detection."""

from tpu_perf.hardware.chips import (
    PRECISIONS,
    Chip,
    all_chips,
    lookup_chip,
    suggest_chips,
    unknown_chip_message,
)

__all__ = ["PRECISIONS", "Chip", "all_chips", "lookup_chip", "suggest_chips", "unknown_chip_message"]
