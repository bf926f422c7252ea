"""Chip catalogue and device detection."""

from tpu_perf.hardware.chips import Chip, all_chips, lookup_chip

__all__ = ["Chip", "all_chips", "lookup_chip"]
