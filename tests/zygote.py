"""`python -m tpu_perf record ...` for the tests, forked from a warm interpreter instead of started cold.

A cold recording process spends 0.5-1 CPU-s before the script's first line: starting Python and
importing tpu-perf's own stack (numpy, pandas, pyarrow, fsspec, typer, rich). The suite forks about
150 recordings, and on 2 cores it is CPU-bound: about 7-9 % of its CPU (docs/testing.md). A zygote
process imports that stack once (`WARM`: what `python -m tpu_perf record` itself imports before it runs a
script; never a framework the script imports, which is what the recorder hooks) and forks a child
per command. The child is set up as a fresh `python -m tpu_perf` would be (argv, environment, working
folder, stdio, process group) and then runs `tpu_perf` as `__main__` at the top level, so that its
exit, uncaught exceptions, KeyboardInterrupt, atexit handlers and finalisation are the interpreter's
own. It is a real process: signals, kills, exit codes and its own children behave as under
`subprocess.Popen`.

A zygote is started with the environment of the first command it serves, and serves only commands
that agree with it on what a process reads as it starts (`startup_key`: PYTHON* but
PYTHONFAULTHANDLER, which the child turns on itself, the locale, LD_*, and what the warm modules read
at import); a command that disagrees gets a zygote of its own. `TPU_PERF_TEST_FORK=0` runs every
command cold.

Layout: the test process `spawn`s; the zygote forks a waiter per command, the waiter forks the
command, reports its pid, waits for it and reports its exit code (the zygote stays single-threaded
and the test process, not being the parent, could not wait for it itself).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WARM = ("tpu_perf.cli", "tpu_perf.collectors.record", "psutil", "pydantic")
"""Imported once in the zygote: every module here is one `python -m tpu_perf record` imports before
the script's first line (checked: tests/test_zygote.py)."""

STARTUP_ENV = ("PYTHON", "LC_", "LANG", "LD_", "MALLOC", "NO_COLOR", "FORCE_COLOR", "TERM", "TTY_", "FSSPEC_", "OMP_", "OPENBLAS_", "MKL_", "NPY_", "PANDAS_", "ARROW_")
"""Prefixes of variables read only as a process starts (the interpreter, the C library, the loader)
or as a warm module is imported: rich's consoles (colours, terminal), fsspec's configuration
(FSSPEC_*: an S3 endpoint), numpy's BLAS threads, pandas, pyarrow. A command whose environment
differs from the zygote's in one of them runs cold. COLUMNS is set on the consoles per command."""

_HEADER = 1 << 20


def fork_enabled() -> bool:
    """Whether the tests fork `record` (TPU_PERF_TEST_FORK=0: every command starts cold)."""
    return os.environ.get("TPU_PERF_TEST_FORK", "1") != "0"


def startup_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What of `env` a zygote must have been started with to fork a command with `env`."""
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(STARTUP_ENV) and k != "PYTHONFAULTHANDLER"))


class ForkedProcess:
    """The part of `subprocess.Popen` the tests use, for a command the zygote forked: `pid`,
    `returncode`, `stdout`/`stderr` (text, or None when not piped), `poll`, `wait`, `communicate`,
    `send_signal`, `terminate` and `kill`."""

    def __init__(self, args: list[str], pid: int, status: socket.socket, stdout: int | None, stderr: int | None) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._status = status
        self._fds = {fd: name for fd, name in ((stdout, "stdout"), (stderr, "stderr")) if fd is not None}
        self._chunks: dict[str, list[bytes]] = {name: [] for name in self._fds.values()}
        self.stdout = os.fdopen(stdout, "r", encoding="utf-8", closefd=False) if stdout is not None else None
        self.stderr = os.fdopen(stderr, "r", encoding="utf-8", closefd=False) if stderr is not None else None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._status.setblocking(False)
            try:
                data = self._status.recv(64)
            except BlockingIOError:
                return None
            finally:
                self._status.setblocking(True)
            self._ended(data)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and timeout is not None and timeout <= 0:  # settimeout(0) would not block at all
            if self.poll() is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        if self.returncode is None:
            self._status.settimeout(timeout)
            try:
                data = self._status.recv(64)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            finally:
                self._status.settimeout(None)
            self._ended(data)
        assert self.returncode is not None
        return self.returncode

    def _ended(self, data: bytes) -> None:
        self.returncode = int(data) if data else -signal.SIGKILL  # no word from the waiter: it was killed
        self._status.close()

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Read stdout and stderr to their end, then wait; past `timeout`, TimeoutExpired (what was
        read is kept for the next call, as Popen keeps it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for fd in self._fds:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        self._chunks[self._fds[key.fd]].append(data)
                    else:
                        sel.unregister(key.fd)
                        os.close(key.fd)
                        del self._fds[key.fd]
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        out = {name: b"".join(parts).decode("utf-8", errors="replace") for name, parts in self._chunks.items()}
        return out.get("stdout"), out.get("stderr")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """A warm interpreter (started on first use, one per test process) that forks commands."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = tempfile.TemporaryFile()
        # stdout and stderr not a terminal: the consoles made in it take none (each command's are pipes)
        self._proc = subprocess.Popen([sys.executable, str(Path(__file__)), str(theirs.fileno())], env=self.env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log, cwd=ROOT)
        theirs.close()
        if self._sock.recv(64) != b"ready":
            self._log.seek(0)
            raise RuntimeError(f"tests/zygote.py did not start (exit {self._proc.wait()}):\n{self._log.read().decode(errors='replace')}")

    def alive(self) -> bool:
        return self._proc.poll() is None

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | str | None = None, merge_stderr: bool = False, new_session: bool = False) -> ForkedProcess:
        """`python -m tpu_perf ARGV` forked, stdout and stderr piped (stderr into stdout if `merge_stderr`)."""
        out_r, out_w = os.pipe()
        err_r, err_w = (None, out_w) if merge_stderr else os.pipe()
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        null = os.open(os.devnull, os.O_RDONLY)
        header = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd or os.getcwd()), "new_session": new_session}).encode()
        try:
            socket.send_fds(self._sock, [header], [null, out_w, err_w, theirs.fileno()])
        finally:
            for fd in {null, out_w, err_w}:
                os.close(fd)
            theirs.close()
        pid = int(status.recv(64))
        return ForkedProcess([sys.executable, "-m", "tpu_perf", *argv], pid, status, out_r, err_r)

    def close(self) -> None:
        self._sock.close()
        self._log.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


# -- the zygote's side -------------------------------------------------------------------------------
def _serve(fd: int) -> dict:
    """Fork a waiter per request until the test process hangs up (then exit). Returns only in a
    forked command, with its request, for the top level to run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the tests is the commands', not the zygote's
    for name in WARM:
        __import__(name)
    sock = socket.socket(fileno=fd)
    sock.send(b"ready")
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, _HEADER, 4)
        except ConnectionResetError:
            data = b""
        while True:  # reap the waiters that are done
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not data:
            os._exit(0)
        request = json.loads(data)
        if os.fork() != 0:
            for f in fds:
                os.close(f)
            continue
        # the waiter
        sock.close()
        stdio, status = fds[:3], socket.socket(fileno=fds[3])
        command = os.fork()
        if command == 0:
            status.close()
            return {**request, "stdio": stdio}
        for f in stdio:
            os.close(f)
        status.send(str(command).encode())
        while True:
            try:
                _, code = os.waitpid(command, 0)
                break
            except InterruptedError:
                continue
        status.send(str(os.waitstatus_to_exitcode(code)).encode())
        os._exit(0)


def _become(request: dict) -> None:
    """Turn this forked process into `python -m tpu_perf ARGV` started in the request's folder with
    its environment and stdio."""
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(request["stdio"]):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # only stdio, as Popen(close_fds=True) leaves
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # `python -m` puts the working folder first (here it was tests/)
    sys.argv = ["-m", *request["argv"]]  # run_module sets argv[0] to tpu_perf/__main__.py
    sys.orig_argv = [sys.executable, "-m", "tpu_perf", *request["argv"]]
    if os.environ.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()
    if "numpy.random" in sys.modules:  # its global generator was seeded once, in the zygote
        sys.modules["numpy.random"].seed()
    from tpu_perf.commands import console as cli_console

    columns = os.environ.get("COLUMNS", "")
    for console in (cli_console.out, cli_console.err):  # made at import, in the zygote: this process's own width
        console.width = int(columns) if columns.isdigit() else 80


if __name__ == "__main__":
    _request = _serve(int(sys.argv[1]))
    _become(_request)
    del _request
    import runpy

    runpy.run_module("tpu_perf", run_name="__main__", alter_sys=True)
