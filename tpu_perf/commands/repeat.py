"""`tpu-perf record --repeat N`: N fresh-process recordings of one command, tagged as one group.

Fresh processes because the unit of replication for a regression check is the run: a process has
its own compile cache, allocator state and placement, and that is where run-to-run noise comes from.
Each repetition re-invokes `tpu-perf record` with the same arguments (minus `--repeat`) plus
`--tag repeat=<group>`, one after the other, so `check` can select them with `tag:repeat=<group>`.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence

from tpu_perf.errors import UsageError


def group_id(now: float | None = None) -> str:
    """A sortable, unique group name: UTC time plus a random suffix."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + uuid.uuid4().hex[:4]


def child_args(argv: Sequence[str], script_args: Sequence[str], group: str) -> list[str]:
    """`record` arguments for one repetition: argv without `--repeat N`, with the group tag.

    `argv` is the command line after the program name; `script_args` the part that belongs to the
    script (it ends argv: tpu-perf's options come before the script)."""
    argv, script_args = list(argv), list(script_args)
    split = len(argv) - len(script_args)
    if "record" not in argv[:split] or argv[split:] != script_args:
        raise UsageError("--repeat: works from the command line (`tpu-perf record --repeat N SCRIPT ...`)")
    ours = argv[argv.index("record") + 1 : split]
    kept, skip = [], False
    for token in ours:
        if skip:
            skip = False
        elif token == "--repeat":
            skip = True
        elif not token.startswith("--repeat="):
            kept.append(token)
    return ["record", "--tag", f"repeat={group}", *kept, *script_args]


def record_repeated(count: int, argv: Sequence[str], script_args: Sequence[str], *, log: Callable[[str], None]) -> int:
    """Record `count` runs one after another; stop at the first that fails (its exit code)."""
    group = group_id()
    args = child_args(argv, script_args, group)
    for i in range(count):
        log(f"tpu-perf: repeat {i + 1}/{count} (tag repeat={group})")
        code = subprocess.run([sys.executable, "-m", "tpu_perf", *args], check=False).returncode
        if code != 0:
            log(f"tpu-perf: repeat {i + 1}/{count} exited {code}; stopping (the {i} run(s) before it are kept)")
            return code
    log(f"tpu-perf: recorded {count} runs tagged repeat={group}; select them with `tag:repeat={group}` (e.g. `tpu-perf check --baseline tag:repeat={group} --candidate ...`)")
    return 0
