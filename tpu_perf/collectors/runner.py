"""Runs a training script in this process as `python SCRIPT` or `python -m MODULE` would.

In-process, so collectors can hook the frameworks the script imports. `sys.argv`, `sys.path[0]`
and `__name__ == "__main__"` are set as Python sets them (with PYTHONSAFEPATH=1, as Python >= 3.11
does, no folder is put first: a package at a checkout's root is then imported from its install).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import runpy
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from tpu_perf.errors import UsageError


@dataclass(frozen=True)
class Target:
    """A script path (or a folder with `__main__.py`) or a module name, with its arguments."""

    path: Path | None
    module: str | None
    args: tuple[str, ...]
    typed: str | None = None
    """The script path as the user typed it: `sys.argv[0]`, as `python SCRIPT` sets it."""

    @property
    def display(self) -> str:
        return f"-m {self.module}" if self.module else str(self.path)


def resolve_target(script: str | None, module: str | None, args: list[str]) -> Target:
    """Check the script exists and is Python *before* anything is created; UsageError otherwise."""
    if module:
        find_module(module)
        return Target(None, module, tuple(args))
    if not script:
        raise UsageError("SCRIPT: give a Python training script (or -m MODULE) to record")
    path = Path(script)
    if path.is_dir():
        if not (path / "__main__.py").is_file():
            raise UsageError(f"{script}: a folder without __main__.py; give a Python training script")
        return Target(path.resolve(), None, tuple(args), typed=script)
    if not path.is_file():
        raise UsageError(f"{script}: no such file; give the path of a Python training script")
    try:
        source = path.read_bytes()
        compile(source, str(path), "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{script}: not a Python script ({type(exc).__name__}: {exc})") from None
    return Target(path.resolve(), None, tuple(args), typed=script)


def find_module(module: str) -> None:
    """Check `-m MODULE` resolves as `python -m` would (the working folder first on the path),
    without importing its packages: a package imported now would import the frameworks before
    tpu-perf hooks them, and every step jitted at its import would be missed."""
    search = [str(Path.cwd()), *sys.path]
    parts = module.split(".")
    for depth in range(len(parts)):
        name = ".".join(parts[: depth + 1])
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, search) or _installed_spec(name)
        except (ImportError, ValueError) as exc:
            raise UsageError(f"-m {module}: cannot be imported ({exc})") from None
        if spec is None:
            raise UsageError(f"-m {module}: no such module in {Path.cwd()} or on sys.path; check the name or install it")
        if depth < len(parts) - 1:
            if spec.submodule_search_locations is None:
                raise UsageError(f"-m {module}: {name} is not a package")
            search = list(spec.submodule_search_locations)


def _installed_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """Built-in and frozen modules (and meta-path finders) that PathFinder does not see."""
    try:
        return importlib.util.find_spec(name) if "." not in name else None
    except (ImportError, ValueError):
        return None


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so the run is closed as `interrupted`."""


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class Outcome:
    status: str
    exit_code: int
    traceback: str | None = None
    error: str | None = None


def run_target(target: Target) -> Outcome:
    """Run the script; map how it ended to a run status and the exit code `python` would give."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    safe = sys.flags.safe_path  # PYTHONSAFEPATH=1 (or -P): Python puts neither the folder nor the cwd first
    if target.module:
        sys.argv = [target.module, *target.args]
        if not safe:
            sys.path.insert(0, str(Path.cwd()))
    else:
        assert target.path is not None
        sys.argv = [target.typed or str(target.path), *target.args]
        if not target.path.is_dir() and not safe:  # run_path puts a folder on sys.path itself
            sys.path.insert(0, str(target.path.parent))
    try:
        with _sigterm_raises():
            if target.module:
                runpy.run_module(target.module, run_name="__main__", alter_sys=True)
            else:
                # a folder: run_path sets sys.argv[0] to the path it is given, so give it as typed
                runpy.run_path(target.typed if (target.typed and target.path.is_dir()) else str(target.path), run_name="__main__")
        return Outcome("completed", 0)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return Outcome("completed", 0)
        if isinstance(code, int):
            return Outcome("completed" if code == 0 else "failed", code, error=None if code == 0 else f"SystemExit({code})")
        print(code, file=sys.stderr)
        return Outcome("failed", 1, error=f"SystemExit({code!r})")
    except KeyboardInterrupt:
        return Outcome("interrupted", 130, traceback.format_exc(), "KeyboardInterrupt")
    except Terminated:
        return Outcome("interrupted", 143, None, "SIGTERM")
    except BaseException as exc:
        text = traceback.format_exc()
        sys.stderr.write(text)
        return Outcome("failed", 1, text, f"{type(exc).__name__}: {exc}")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
