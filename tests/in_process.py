"""`tpu-perf ARGS` run in the test's own process, through the console entry point and its error
handling: the robustness and fuzz tests run hundreds of commands, too many for a process each."""

from __future__ import annotations

import contextlib
import io
import sys
import time
from dataclasses import dataclass

from tpu_perf import cli


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str
    crash: BaseException | None
    """An exception that escaped the entry point: the traceback a user would have seen."""
    seconds: float


def run_cli(*args: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    argv, code, crash = sys.argv, 0, None
    sys.argv = ["tpu-perf", *args]
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 - a traceback is what these tests count
        crash = exc
    finally:
        sys.argv = argv
    return Result(code, out.getvalue(), err.getvalue(), crash, time.perf_counter() - started)
