"""What a recorded script sees of its process, written to OUT as JSON: for tests/test_zygote.py,
which records it cold and forked and compares. Then it steps, and ends as told.

Usage: process_probe.py OUT [--end ok|raise|exit3|wait]
"""

import argparse
import importlib.util
import json
import os
import signal
import sys
import time

import tpu_perf

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--end", default="ok")
args = parser.parse_args()


def fd_kind(fd: str) -> str | None:
    """pipe, socket, anon_inode or a device; None for a file (the recorder's threads open and close
    files of their own at any moment) or the listing's own folder handle, gone by now."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if ":" in target:
        return target.split(":")[0]
    return target if target.startswith("/dev/") else None


def handler(sig: int) -> str:
    h = signal.getsignal(sig)
    return getattr(h, "__qualname__", str(h))


seen = {
    "argv": sys.argv,
    "orig_argv_tail": sys.orig_argv[1:3],
    "path0": sys.path[0],
    "cwd": os.getcwd(),
    "mark": os.environ.get("PROBE_MARK"),
    "sigint": handler(signal.SIGINT),
    "sigterm": handler(signal.SIGTERM),
    "fds": sorted(k for k in map(fd_kind, os.listdir("/proc/self/fd")) if k),
    "session_leader": os.getsid(0) == os.getpid(),
    "main_file": sys.modules["__main__"].__file__,
    "stdout_line_buffered": sys.stdout.line_buffering,
    "extra_importable": importlib.util.find_spec("probe_extra") is not None,
}
with open(args.out, "w") as f:
    json.dump(seen, f)
for _ in range(6):
    with tpu_perf.step():
        time.sleep(0.002)
print("stepped", flush=True)
if args.end == "raise":
    raise RuntimeError("the probe raised")
if args.end == "exit3":
    sys.exit(3)
if args.end == "wait":
    print("waiting", flush=True)
    time.sleep(120)
