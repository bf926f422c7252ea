"""Time a snippet, and its peak memory, in a fresh Python process: shared by the import benches.

ru_maxrss is no use here: a child inherits its parent's high-water mark across fork/exec. On Linux
the mark is reset by writing 5 to /proc/self/clear_refs and read back as VmHWM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PEAK = """import time
def _status(key):
    return int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1]) * 1024
def reset_peak():
    open('/proc/self/clear_refs', 'w').write('5')
    return _status('VmRSS:')
def peak():
    return _status('VmHWM:')"""


def measure(setup: str, run: str, path: Path, env: dict[str, str] | None = None) -> tuple[float, float] | str:
    """(seconds, peak bytes above the start) of `run` after `setup`, with `P` bound to `path`; or the error line."""
    code = f"{PEAK}\nfrom pathlib import Path; P = Path({str(path)!r})\n{setup}\nbase = reset_peak()\n_t0 = time.perf_counter()\n{run}\nprint(time.perf_counter() - _t0, peak() - base)"
    full_env = {**os.environ, "PYTHONPATH": os.getcwd(), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["failed"])[-1]
    secs, peak = proc.stdout.split()[-2:]
    return float(secs), float(peak)
