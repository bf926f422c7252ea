"""How often PyTorch's DDP tutorial shape ends badly: a 2-rank gloo job started by
`torch.multiprocessing.spawn` whose worker calls `destroy_process_group()` and returns with its DDP
model alive (tests/scripts/multihost/torch_spawn.py), run plain and under `tpu-perf record`.

Each run gets `--timeout` seconds; one still running then is a hang (its process group is killed).
Prints, per mode, how many completed, aborted (a nonzero exit: PyTorch's own teardown says
`terminate called without an active exception`) and hung, interleaving the modes so both see the
same machine. docs/multihost.md ("Known issues") gives the numbers and why tpu-perf holds the
process group until the recording ends.

Run: PYTHONPATH=$PWD python bench/spawn_teardown.py [--runs 30] [--modes plain record] [--del-model]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "multihost" / "torch_spawn.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def once(mode: str, timeout_s: float, script: Path) -> str:
    """`ok`, `abort` (nonzero exit) or `hang` for one run of the job."""
    args = [str(script), str(free_port()), "20", "1", "0.05"]
    with tempfile.TemporaryDirectory() as store:
        cmd = [sys.executable, *args] if mode == "plain" else [sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", store, *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            return "ok" if proc.wait(timeout=timeout_s) == 0 else "abort"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "hang"


def del_model_variant(folder: Path) -> Path:
    """The same job with `del model` before `destroy_process_group()`."""
    text = SCRIPT.read_text().replace("    dist.destroy_process_group()", "    del model, optimizer\n    dist.destroy_process_group()")
    path = folder / "torch_spawn_del_model.py"
    path.write_text(text)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--modes", nargs="+", default=["plain", "record"], choices=["plain", "record"])
    parser.add_argument("--timeout", type=float, default=90.0)
    parser.add_argument("--del-model", action="store_true", help="run the variant that deletes the model before destroy_process_group()")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = del_model_variant(Path(tmp)) if args.del_model else SCRIPT
        counts = {mode: Counter() for mode in args.modes}
        for i in range(args.runs):
            for mode in args.modes:
                counts[mode][once(mode, args.timeout, script)] += 1
            print(f"{i + 1}/{args.runs}: " + "; ".join(f"{m} {dict(c)}" for m, c in counts.items()), flush=True)
    for mode, c in counts.items():
        print(f"{mode}{' (del model)' if args.del_model else ''}: {c['ok']} completed, {c['abort']} aborted, {c['hang']} hung of {args.runs}")


if __name__ == "__main__":
    main()
