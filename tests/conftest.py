"""Shared fixtures: real recordings of real scripts, made once per session where they can be shared."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.zygote import ForkedProcess, Zygote, fork_enabled, startup_key

if TYPE_CHECKING:
    import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

# libtpu is installed with the `tpu` extra; on a CPU machine JAX would probe it for a TPU first.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
# libtpu (loaded by jax[tpu] or torch-tpu) asks the GCE metadata server for the TPU's topology, with
# retries that take minutes off GCP (seen: torch-tpu autoloaded on a CPU machine stalled in
# backward()). jax sets this itself when imported; the torch-tpu environment has no jax.
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
# Bytecode is written, whatever the shell says: the first process that imports a module compiles it
# and the hundreds of recording and CLI processes after it read the .pyc. With PYTHONDONTWRITEBYTECODE
# set, each compiled every module without one again (uv installs none: Makefile).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# A shell without job control starts a background command (`make test` runs the serial part with `&`;
# `nohup ... &`) with SIGINT ignored, every process under it inherits that, and a Python started so
# installs no KeyboardInterrupt handler: a recording the tests interrupt with SIGINT would run on.
# A handler here resets to the default in each child at exec, as under an interactive shell.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


JAX_SET_ENV = ("TPU_LIBRARY_PATH", "TF_CPP_MIN_LOG_LEVEL")
"""Variables jax writes into os.environ when a test imports it in-process (TPU_LIBRARY_PATH: the
libtpu.so it found). A child that inherits them loads that libtpu, not the one on its own path."""


def user_env() -> dict[str, str]:
    """This process's environment without what jax set in it: what a user's shell would pass."""
    return {k: v for k, v in os.environ.items() if k not in JAX_SET_ENV}


def free_port() -> int:
    """A TCP port free on loopback now (for a job's rendezvous)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


MULTIHOST_SCRIPTS = ROOT / "tests" / "scripts" / "multihost"


IN_PROCESS = ("report", "ls", "check", "baseline", "import", "advise", "history", "mfu", "chips")
"""Commands that only read and write run stores on local disk: `tpu_perf_cli` runs them in this
process, through the command's own entry point (`tpu_perf.cli.main`: the same parsing, output, one-line
errors and exit codes), sparing each the 0.7-0.9 s of CPU a fresh interpreter spends importing pandas
and pyarrow (about 130 calls a suite). `record` runs a script, `dashboard` serves, `doctor`
inspects its own interpreter and `calibrate` times matmuls: each keeps a process of its own, as
does a call with a working folder or a remote store (fsspec keeps remote filesystems per process)."""


def pythonpath() -> str:
    """The PYTHONPATH a command gets: this checkout first, then the caller's."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def tpu_perf_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300, check: bool = False, process: bool | None = None) -> subprocess.CompletedProcess[str]:
    """Run `tpu-perf ARGS` as a user would from a shell: in a subprocess (for `record`, forked from a
    warm interpreter: `spawn`), or for IN_PROCESS commands in this process (`process=True` forces a
    subprocess: where the process is the subject)."""
    remote = any("://" in a for a in (*args, *(env or {}).values()))
    if process is None:
        process = not args or args[0] not in IN_PROCESS or cwd is not None or remote
    if process:
        full_env = {**user_env(), "PYTHONPATH": pythonpath(), **(env or {})}
        proc = spawn(list(args), full_env, cwd=cwd)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        proc = subprocess.CompletedProcess([sys.executable, "-m", "tpu_perf", *args], proc.returncode, out, err)
    else:
        proc = _cli_in_process(list(args), env or {})
    if check and proc.returncode != 0:
        raise AssertionError(f"tpu-perf {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


_zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}
_zygotes_lock = threading.Lock()
MAX_ZYGOTES = 3
"""Zygotes kept per test process (one per start-up environment in use; the oldest goes first)."""


def spawn(args: Sequence[str], env: dict[str, str], cwd: Path | None = None, merge_stderr: bool = False, new_session: bool = False) -> subprocess.Popen[str] | ForkedProcess:
    """`python -m tpu_perf ARGS` started with stdout and stderr piped: `record` forked from a zygote
    (tests/zygote.py: the same process, without the second of CPU each spends importing tpu-perf's
    stack), anything else started cold."""
    if args and args[0] == "record" and fork_enabled():
        key = startup_key(env)
        with _zygotes_lock:
            zygote = _zygotes.get(key)
            if zygote is None or not zygote.alive():
                if len(_zygotes) >= MAX_ZYGOTES:
                    _zygotes.pop(next(iter(_zygotes))).close()
                zygote = _zygotes[key] = Zygote(env)
        return zygote.spawn(args, env, cwd=cwd, merge_stderr=merge_stderr, new_session=new_session)
    stderr = subprocess.STDOUT if merge_stderr else subprocess.PIPE
    return subprocess.Popen([sys.executable, "-m", "tpu_perf", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=new_session)


@atexit.register
def _close_zygotes() -> None:
    for zygote in _zygotes.values():
        zygote.close()


def _cli_in_process(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`tpu_perf.cli.main()` with `args` and `env` (set for the call, then put back), its stdout and
    stderr captured, warnings written to stderr as an interpreter would, and its exit code: what the
    subprocess would give. An exception the command lets out is its traceback and exit code 1."""
    import io
    import traceback
    import warnings

    from tpu_perf import cli
    from tpu_perf.commands import console as cli_console

    stdout, stderr = io.StringIO(), io.StringIO()
    saved_env = {k: os.environ.get(k) for k in env}
    saved_argv = sys.argv
    code: int = 0
    try:
        os.environ.update(env)
        sys.argv = ["tpu-perf", *args]
        columns = os.environ.get("COLUMNS", "")
        for console in (cli_console.out, cli_console.err):  # made at import, with that moment's COLUMNS: a process's own width (not a terminal)
            console.width = int(columns) if columns.isdigit() else 80
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
            try:
                cli.main()
            except SystemExit as exc:
                if isinstance(exc.code, str):  # sys.exit("message"): the interpreter prints it
                    print(exc.code, file=sys.stderr)
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = saved_argv
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["tpu-perf", *args], code, stdout.getvalue(), stderr.getvalue())


class _HtmlTable(HTMLParser):
    """The rows of an HTML table (`dashboard.html_table`), each a {header: cell text} dict; and per
    header cell its column's own name (`data-col`) and its hover help."""

    def __init__(self) -> None:
        super().__init__()
        self.head: list[str] = []
        self.keys: list[str | None] = []
        self.helps: list[str | None] = []
        self.rows: list[dict[str, str]] = []
        self.cells: list[list[str]] = []
        self._cells: list[str] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self._cells = []
        elif tag in ("th", "td"):
            self._text = []
            if not self.head and tag == "th":
                a = dict(attrs)
                self.keys.append(a.get("data-col"))
                self.helps.append(a.get("title"))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._text is not None:
            self._cells.append("".join(self._text).strip())
            self._text = None
        elif tag == "tr" and not self.head:
            self.head = self._cells
        elif tag == "tr":
            self.rows.append(dict(zip(self.head, self._cells, strict=True)))
            self.cells.append(self._cells)

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


def html_rows(body: str) -> list[dict[str, str]]:
    """The rows of the one table in an `st.html` body, as text, keyed by the table's headers."""
    reader = _HtmlTable()
    reader.feed(body)
    return reader.rows


def html_frame(at: object, index: str) -> tuple[pd.DataFrame, dict[str, str], dict[str, str | None]]:
    """The page's HTML table whose first column is `index` (`html_table.table_html(..., index=True)`)
    as the frame it was drawn from: (frame by the columns' own names, {column: header}, {column: help})."""
    import pandas as pd

    body = next(h.proto.body for h in at.get("html") if f'data-index="{index}"' in h.proto.body)  # type: ignore[attr-defined]
    reader = _HtmlTable()
    reader.feed(body)
    keys = [k or h for k, h in zip(reader.keys, reader.head, strict=True)]
    frame = pd.DataFrame(reader.cells, columns=keys).set_index(keys[0])
    frame.index.name = index
    return frame, dict(zip(keys[1:], reader.head[1:], strict=True)), dict(zip(keys[1:], reader.helps[1:], strict=True))


def report_doc(run: str | Path, store: str | Path | None = None) -> dict:
    """What `tpu-perf report --json [--store STORE] RUN` prints, computed in this process (the same
    load_run, build_report, advice and JSON boundary as the command): for tests about the report's
    numbers, not the command. Each command keeps a CLI test of its own."""
    from tpu_perf.advise.document import report_advice
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.jsonio import dumps
    from tpu_perf.store import load_run

    loaded = load_run(str(run), store=None if store is None else str(store))
    report = build_report(loaded)
    return json.loads(dumps({**report.to_dict(), "advice": report_advice(loaded, report)}))


def advice_doc(run: str | Path, store: str | Path | None = None, target: str | None = None) -> dict:
    """What `tpu-perf advise --json [--store STORE] [--target T] RUN` prints, computed in this process."""
    from tpu_perf.advise import advise
    from tpu_perf.advise.document import advice_document
    from tpu_perf.jsonio import dumps
    from tpu_perf.store import load_run

    loaded = load_run(str(run), store=None if store is None else str(store))
    return json.loads(dumps(advice_document(loaded, advise(loaded, target=target))))


def tpu_perf_clis(*arg_lists: Sequence[str], env: dict[str, str] | None = None, timeout: float = 300) -> list[subprocess.CompletedProcess[str]]:
    """Several independent `python -m tpu_perf ARGS` at once (for tests that are not about timing:
    the processes share the machine's cores); their results in the order given."""
    full_env = {**user_env(), "PYTHONPATH": pythonpath(), **(env or {})}
    procs = [spawn(list(args), full_env) for args in arg_lists]
    results = []
    for args, proc in zip(arg_lists, procs, strict=True):
        out, err = proc.communicate(timeout=timeout)
        results.append(subprocess.CompletedProcess([sys.executable, "-m", "tpu_perf", *args], proc.returncode, out, err))
    return results


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "runs"


# -- recordings made once per session ----------------------------------------------------------------
def copy_run(run_dir: Path, dest_store: Path) -> Path:
    """A private copy of a recorded run folder in `dest_store` (created): for a test that damages it."""
    dest_store.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(run_dir, dest_store / run_dir.name, symlinks=True))


class Recordings:
    """`tpu-perf record ARGS` made once per session per distinct (ARGS, env), each in a store of its own.

    `run(*args)` returns the run folder; tests must only read it. A test that damages a run takes
    `copy(*args, dest_store=...)`. Keys are the exact argument list: a test that needs other steps,
    flags or a store holding several runs records its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        """A session folder for the recordings' own outputs (a script's OUT file)."""
        self._runs: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], Path] = {}

    def run(self, *args: str, env: dict[str, str] | None = None) -> Path:
        key = (args, tuple(sorted((env or {}).items())))
        if key not in self._runs:
            store = self.root / f"store{len(self._runs)}" / "runs"
            tpu_perf_cli("record", "--store", str(store), *args, env=env, check=True)
            (run_dir,) = [p for p in store.iterdir() if (p / "run.json").exists()]
            self._runs[key] = run_dir
        return self._runs[key]

    def copy(self, *args: str, dest_store: Path, env: dict[str, str] | None = None) -> Path:
        return copy_run(self.run(*args, env=env), dest_store)


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every pytest-xdist worker of this session sees (the session's base folder when the
    suite runs in one process): what a session fixture makes there is made once for all workers."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def made_once(folder: Path) -> Iterator[bool]:
    """Hold `folder`'s lock across processes; yields whether it is still to be made (the caller
    makes it inside the block). It counts as made once the block ends without an error."""
    import filelock

    folder.parent.mkdir(parents=True, exist_ok=True)
    done = folder.parent / f"{folder.name}.done"
    with filelock.FileLock(str(folder.parent / f"{folder.name}.lock")):
        missing = not done.exists()
        yield missing
        if missing:
            done.touch()


@pytest.fixture(scope="session")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    """The session's shared recordings (see `Recordings`): record a script once, read it in many tests."""
    return Recordings(tmp_path_factory.mktemp("recordings"))


@pytest.fixture(scope="session")
def corpus_runs(tmp_path_factory: pytest.TempPathFactory):
    """tests/corpus and the advisor's planted scripts, each recorded once per session on first use
    and shared by test_corpus.py and test_advice_corpus.py (see tests/corpus_runs.py). Read only."""
    from tests.corpus_runs import CorpusRuns

    return CorpusRuns(shared_root(tmp_path_factory) / "corpus")


def start_recording(store: Path, script: Path, args: Sequence[str], env: dict[str, str], *record_args: str) -> subprocess.Popen[str] | ForkedProcess:
    """`tpu-perf record -q --store STORE [RECORD_ARGS] SCRIPT ARGS` started in the background, as
    one process of a job would be (stdout and stderr together), in a process group of its own with
    Python's fault handler on, so that `finish` can show where a hung job stands."""
    full = {**user_env(), "PYTHONPATH": pythonpath(), "JAX_PLATFORMS": "cpu", "PYTHONFAULTHANDLER": "1", **env}
    return spawn(["record", "-q", "--store", str(store), *record_args, str(script), *args], full, merge_stderr=True, new_session=True)


def finish(proc: subprocess.Popen[str] | ForkedProcess, timeout: float) -> str:
    """The output of a `start_recording` process once it ends; past `timeout`, every process of its
    group (spawned workers too) is sent SIGABRT, on which the fault handler prints each thread's
    stack, and the test fails with them: a hang shows where it hung."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGABRT)
        try:
            out = proc.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out = proc.communicate()[0]
        pytest.fail(f"{' '.join(proc.args)} ran past {timeout:.0f} s; the stacks of its processes then:\n{out[-12000:]}")


def record_job(store: Path, script: Path, args: Sequence[str], envs: Sequence[dict[str, str]], timeout: float = 300) -> None:
    """One recording per process of a job, all with the same command, started at once; waits for
    all and fails with their output."""
    procs = [start_recording(store, script, args, env) for env in envs]
    outputs = [finish(p, timeout) for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out


@pytest.fixture(scope="session")
def jax_job(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A real 2-process JAX job (jax.distributed with gloo collectives on CPU, 20 steps), process 1
    doing 50 ms more own work per step: one run with a shard per process, alone in its store.
    {"store": Path, "dir": run folder, "report": its `report --json`}. Read only. Its tests are
    marked `serial` (a 50 ms straggler is what they read): the job is recorded with nothing beside it."""
    folder = shared_root(tmp_path_factory) / "jax-job"
    store = folder / "runs"
    with made_once(folder) as missing:  # pytest-xdist workers share the job
        if missing:
            coordinator = f"127.0.0.1:{free_port()}"
            record_job(store, MULTIHOST_SCRIPTS / "jax_spmd.py", ["20", "1", "0.05"], [{"PROCESS_ID": str(i), "COORDINATOR": coordinator} for i in range(2)])
    (run_dir,) = [p for p in store.iterdir() if (p / "run.json").exists()]
    doc = report_doc(run_dir.name, store)
    return {"store": store, "dir": run_dir, "report": doc}


WRONG_LIBTPU = "libtpu==0.0.52"
"""torch-tpu 0.2.0's libtpu: not the one jax 0.10.2 pins (0.0.42.*), so a real mismatched pair."""


TEST_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tpu-perf-tests"
"""Downloads the tests reuse between sessions (never results): delete it to download again."""


@pytest.fixture(scope="session")
def wrong_libtpu() -> Path:
    """A folder holding a real libtpu wheel that jax did not choose, installed with pip --target.

    Put first on PYTHONPATH (or given to `tpu-perf doctor --site`), it shadows the environment's
    libtpu the way a hand-built environment with the wrong pin would. Installed once into TEST_CACHE
    (about 30 s and 480 MB) and reused by later sessions; read only."""
    target = TEST_CACHE / WRONG_LIBTPU.replace("==", "-")
    if not (target / "libtpu").is_dir():
        TEST_CACHE.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=target.name + ".partial-", dir=TEST_CACHE))
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(partial), WRONG_LIBTPU], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"pip install --target {partial} {WRONG_LIBTPU} failed:\n{proc.stderr[-2000:]}"
        try:
            partial.rename(target)  # atomic: another session (an xdist worker) may have won the race
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    assert (target / "libtpu").is_dir(), f"{target}: no libtpu package in the cached install"
    return target


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI every dependency is installed, so a skipped test means a broken install: fail the run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if os.environ.get("CI") and skipped and exitstatus == 0:
        reporter.write_line(f"CI: {skipped} test(s) skipped; CI installs every extra, so a skip is a failure here", red=True)
        session.exitstatus = 1
