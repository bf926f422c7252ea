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
    got = measure_cpu(setup, run, path, env)
    return got if isinstance(got, str) else (got[0], got[2])


def measure_cpu(setup: str, run: str, path: Path, env: dict[str, str] | None = None) -> tuple[float, float, float] | str:
    """(wall seconds, CPU seconds of all the process's threads, peak bytes above the start) of `run`;
    or the error line. CPU time moves far less than wall time when other processes share the cores."""
    code = (f"{PEAK}\nfrom pathlib import Path; P = Path({str(path)!r})\n{setup}\nbase = reset_peak()\n"
            f"_c0, _t0 = time.process_time(), time.perf_counter()\n{run}\nprint(time.perf_counter() - _t0, time.process_time() - _c0, peak() - base)")
    full_env = {**os.environ, "PYTHONPATH": os.getcwd(), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["failed"])[-1]
    secs, cpu, peak = proc.stdout.split()[-3:]
    return float(secs), float(cpu), float(peak)


def _tree_pss(root: int) -> int:
    """Proportional set size (bytes) of `root` and all its descendants: forked workers share the
    parent's pages, which a sum of RSS would count once per process."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            total += next(int(line.split()[1]) for line in open(f"/proc/{pid}/smaps_rollup") if line.startswith("Pss:")) * 1024
        except (OSError, StopIteration):
            pass
    return total


def measure_tree(cmd: list[str], env: dict[str, str] | None = None, interval_s: float = 0.05) -> tuple[float, float] | str:
    """(wall seconds, peak PSS bytes of the whole process tree) of a command, start-up included;
    or its last error line. Sampled every `interval_s`, so a shorter spike can be missed."""
    import time

    full_env = {**os.environ, "PYTHONPATH": os.getcwd(), **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=full_env)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_pss(proc.pid))
        time.sleep(interval_s)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        return (err.strip().splitlines() or ["failed"])[-1]
    return wall, float(peak)
