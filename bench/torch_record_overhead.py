"""Overhead of `tpu-perf record` on a PyTorch training loop (trace window off).

The JAX bench (bench/record_overhead.py) run on a torch script: plain and recorded, interleaved,
comparing the medians of the steps the script timed itself. The FLOP-counted step (one) is among
them in the recorded arm, so the median barely moves; the target is <= 1.02.

    python bench/torch_record_overhead.py [--repeats 5] [--steps 60] [--width 512]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # torch-tpu's autoload costs both arms ~2 s of start-up

import record_overhead  # noqa: E402

if __name__ == "__main__":
    if "--script" not in sys.argv:
        sys.argv += ["--script", str(ROOT / "tests" / "torch_scripts" / "selftimed.py")]
    record_overhead.main()
