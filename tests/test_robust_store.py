"""Fuzz test of the store's reading side (issue 29): copies of one real recorded run, damaged in every
way `tests/damage.py` lists, side by side with healthy ones in one store. Every reading command
(ls, report, advise, check, baseline save) runs in-process through `tpu_perf.cli.main`, and the
dashboard pages through Streamlit AppTest. Asserted: no traceback, exit codes as documented (0, 2,
3; `check` 0-4), each damaged run named in one line, healthy runs unaffected, user text literal,
no file modified. Plus crafted trace files for `import` (bounded time and memory, one line)."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, tpu_perf_cli, user_env
from tests.damage import DAMAGING, LISTED, USER_TEXT
from tests.in_process import run_cli
from tpu_perf.commands import console as cli_console
from tpu_perf.store import check_run, scan_runs
from tpu_perf.store.index import INDEX_DIR, ROW_FILE
from tpu_perf.views.format import md

EXAMPLE = str(ROOT / "examples" / "jax_mlp.py")
DATA_TRACE = ROOT / "tests" / "data" / "cpu_only_rank34.pt.trace.json.gz"
HEALTHY = ("20300101-000000-00000a", "20300101-000000-00000b")
"""Two untouched copies of the recording; the second is named `[bold]x[/]`."""


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real recording (examples/jax_mlp.py, 16 steps), made once per session."""
    store = tmp_path_factory.mktemp("robust") / "runs"
    tpu_perf_cli("record", "--store", str(store), "--name", "healthy", "-q", EXAMPLE, "--steps", "16", "--width", "64", check=True)
    return next(store.iterdir())


def _copy(source: Path, store: Path, run_id: str, **fields: object) -> Path:
    folder = store / run_id
    shutil.copytree(source, folder)
    manifest = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**manifest, "id": run_id, **fields}))
    return folder


def _case_id(i: int) -> str:
    return f"20300102-000000-{i:06x}"


@pytest.fixture(scope="module")
def fuzzed(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A store of two healthy runs and one copy per case, and the cases by run id."""
    store = tmp_path_factory.mktemp("fuzzed") / "runs"
    store.mkdir()
    _copy(recorded, store, HEALTHY[0])
    _copy(recorded, store, HEALTHY[1], name="[bold]x[/]")
    cases = {}
    for i, (name, damage) in enumerate({**DAMAGING, **LISTED}.items()):
        folder = _copy(recorded, store, _case_id(i))
        damage(folder)
        cases[folder.name] = name
    return {"store": store, "cases": cases}


def _snapshot(store: Path) -> dict[str, tuple[int, str]]:
    """Mode and content hash of every file under the store (folders: mode only), but the runs
    index: a cache that listing builds for runs without a row (docs/ci.md), never a run's data."""
    out = {}
    for path in sorted(store.rglob("*")):
        if path.name == ROW_FILE or INDEX_DIR in path.relative_to(store).parts:
            continue
        st = path.lstat()
        digest = ""
        if path.is_file() and os.access(path, os.R_OK) and st.st_mode & 0o444:
            digest = hashlib.sha1(path.read_bytes()).hexdigest()
        out[str(path.relative_to(store))] = (st.st_mode, digest)
    return out


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide consoles, so table cells are not cut (a cut name could hide markup being applied)."""
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setattr(cli_console.out, "width", 400)
    monkeypatch.setattr(cli_console.err, "width", 400)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.slow
def test_every_reading_command_on_a_fuzzed_store(fuzzed: dict, recorded: Path, wide: None) -> None:
    store, cases = fuzzed["store"], fuzzed["cases"]
    before = _snapshot(store)
    problems: list[str] = []  # (case, command): what went wrong; the test fails on any
    calls = 0

    def expect(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    started = time.perf_counter()
    listed = run_cli("ls", "--json", "--store", str(store))
    table = run_cli("ls", "--store", str(store))
    calls += 2
    assert listed.crash is None and table.crash is None and listed.code == 0 and table.code == 0, listed.err + table.err
    rows = {r["id"]: r for r in json.loads(listed.out)}
    assert set(rows) == set(cases) | set(HEALTHY)  # every folder is listed, damaged or not
    clean = json.loads(run_cli("report", "--json", str(recorded)).out)
    for run_id in HEALTHY:
        doc = json.loads(run_cli("report", "--json", "--store", str(store), run_id).out)
        calls += 1
        assert rows[run_id]["status"] == "completed" and rows[run_id]["steps"] == clean["steps"]["count"]
        assert doc["steps"]["iteration_median_s"] == clean["steps"]["iteration_median_s"] and doc["steps"]["count"] == clean["steps"]["count"]  # unaffected by its neighbours
    assert "[bold]x[/]" in table.out  # a name is text, never console markup
    for run_id, name in cases.items():
        row = rows[run_id]
        report = run_cli("report", "--store", str(store), run_id)
        advise = run_cli("advise", "--store", str(store), run_id)
        as_json = run_cli("report", "--json", "--store", str(store), run_id)
        calls += 3
        for command, result in (("report", report), ("advise", advise), ("report --json", as_json)):
            expect(result.crash is None, f"{name}: {command} raised {result.crash!r}")
        if name in DAMAGING:
            expect(row["status"] == "damaged" and run_id in row["url"] and row.get("damage"), f"{name}: ls row {row}")
            expect(f"{run_id} " in table.out and "damaged" in table.out, f"{name}: ls table does not name it")
            for command, result in (("report", report), ("advise", advise), ("report --json", as_json)):
                expect(result.code == 3, f"{name}: {command} exit {result.code}, expected 3")
                as_error = json.loads(result.out) if command == "report --json" else None  # --json: the error as a JSON object on stdout too
                expect(len(_lines(result.err)) == 1 and run_id in result.err and (as_error == {"error": result.err.strip().removeprefix("tpu-perf: error: "), "exit_code": 3} if as_error is not None else not result.out.strip()), f"{name}: {command} said {result.err!r} {result.out[:200]!r}")
            expect(check_run(store / run_id) is not None or "durations" in name, f"{name}: check_run found no damage")  # values are checked when the table is read
            if name == "schema_version a string":  # before: "schema_version 1 is newer than this tpu-perf reads (1)"
                expect("field schema_version: expected an integer, got str '1'" in report.err, f"{name}: {report.err!r}")
            continue
        expect(row["status"] != "damaged", f"{name}: listed as damaged: {row.get('damage')}")
        for command, result in (("report", report), ("advise", advise), ("report --json", as_json)):
            expect(result.code == 0, f"{name}: {command} exit {result.code}: {result.err}")
        if result.code != 0:
            continue
        doc = json.loads(as_json.out)
        shown = doc["run"]["name"]
        expect(row["name"] == shown and shown in report.out and shown in advise.out, f"{name}: name {shown!r} not shown literally")
        if name.startswith("running"):
            expect(row["status"] == "crashed" and doc["run"]["status"] == "crashed", f"{name}: status {row['status']}, expected crashed (recorder gone)")
        if name == "error message markup":
            expect("[red]boom[/] <b>x</b>" in report.out, f"{name}: error message not literal")
        if name == "steps NaN durations":
            expect(doc["steps"]["steady"] < clean["steps"]["steady"] and doc["steps"]["iteration_median_s"] is not None and doc["steps"]["iteration_median_s"] == doc["steps"]["iteration_median_s"], f"{name}: NaN durations summarised: {doc['steps']}")
    # selectors: `name:healthy` matches the healthy run and copies of it; damaged ones are skipped, each in one note
    check = run_cli("check", "--store", str(store), "--baseline", "name:healthy", "--candidate", HEALTHY[0])
    saved = run_cli("baseline", "save", "b", "name:healthy", "--store", str(store), "--out", str(store.parent / "baseline.json"))
    calls += 2
    for command, result in (("check", check), ("baseline save", saved)):
        expect(result.crash is None and result.code in (0, 1, 2, 3, 4), f"{command}: exit {result.code} {result.crash!r}")
        notes = [line for line in _lines(result.err) if "skipped damaged run" in line]
        manifest_damaged = [i for i, n in cases.items() if n in DAMAGING and not any(r.id == i for r in scan_runs(str(store))[0])]
        expect(all(any(i in note for note in notes) for i in manifest_damaged), f"{command}: {len(notes)} skip notes: {result.err[:400]}")
    expect(_snapshot(store) == before, "a reading command modified the store")
    elapsed = time.perf_counter() - started
    print(f"\nfuzz: {len(cases)} damaged copies ({len(DAMAGING)} damaging, {len(LISTED)} loadable) + {len(HEALTHY)} healthy; {calls} commands in {elapsed:.1f} s; problems: {len(problems)}")
    assert not problems, "\n".join(problems)


def _page(name: str, **query: str) -> AppTest:
    at = AppTest.from_string(f"from tpu_perf.dashboard.screens import {name}\n{name}.render()\n", default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


@pytest.mark.slow
def test_dashboard_pages_on_a_fuzzed_store(fuzzed: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, cases = fuzzed["store"], fuzzed["cases"]
    before = _snapshot(store)
    monkeypatch.setenv("TPU_PERF_STORE", str(store))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path / "cache"))
    runs = _page("runs")
    assert not runs.exception
    cards = " ".join(e.value for e in runs.error)
    damaged = [run_id for run_id, name in cases.items() if name in DAMAGING]
    missing = [cases[i] for i in damaged if i not in cards]
    assert not missing, f"no error card for {missing}"
    shown = runs.dataframe[0].value
    assert set(HEALTHY) <= set(shown["id"]) and "[bold]x[/]" in set(shown["name"])  # healthy runs still listed, names as written
    by_name = {name: run_id for run_id, name in cases.items()}
    for text in USER_TEXT:
        run = _page("run", run=by_name[f"name {text}"])
        assert not run.exception
        assert any(md(text) in m.value for m in run.markdown), f"run page heading does not show {text!r} literally"
    broken = _page("run", run=by_name["steps wrong schema"])
    assert not broken.exception and any("steps.parquet" in e.value for e in broken.error)
    compare = _page("compare", runs=f"{HEALTHY[0]},{HEALTHY[1]},{by_name['steps negative durations']}")
    assert not compare.exception and any("damaged" in e.value or "duration_s" in e.value for e in compare.error)
    assert _snapshot(store) == before


@pytest.mark.slow
def test_invalid_event_times_are_dropped_with_a_note(tmp_path: Path) -> None:
    """A Kineto trace with a NaN timestamp, an infinite one and a negative duration: those three
    events are dropped with one note naming the file, never summarised; the rest imports."""
    import numpy as np

    doc = json.loads(gzip.open(ROOT / "tests" / "data" / "cpu_only_rank34.pt.trace.json.gz").read())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    events[0]["ts"], events[1]["dur"], events[2]["ts"] = float("nan"), -5.0, float("inf")
    trace = tmp_path / "bad_times.pt.trace.json"
    trace.write_text(json.dumps(doc))
    result = run_cli("import", "--store", str(tmp_path / "runs"), str(trace))
    assert result.crash is None and result.code == 0, result.err
    notes = [line for line in _lines(result.err) if "note:" in line]
    assert len(notes) == 1 and str(trace) in notes[0] and f"dropped 3 of {len(events)} events" in notes[0]
    run = next((tmp_path / "runs").iterdir())
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["status"] == "completed" and "dropped 3" in manifest["warnings"][0]
    timeline = json.loads(run_cli("report", "--json", str(run)).out)
    assert timeline["run"]["warnings"] and "dropped 3" in timeline["run"]["warnings"][0]
    import pandas as pd

    assert np.isfinite(pd.read_parquet(run / "timeline.parquet")[["start_s", "end_s"]].to_numpy(dtype=float)).all()


def test_markdown_escaping_shows_user_text_literally() -> None:
    """`md()` escapes every character Markdown, HTML, tables or LaTeX would act on, and only those:
    unescaping gives the text back, and no special character is left bare."""
    from tpu_perf.dashboard.export import comparison_markdown

    for text in (*USER_TEXT, "a\\b", "# heading", "~~x~~"):
        escaped = md(text)
        assert escaped.replace("\\\\", "\0").replace("\\", "").replace("\0", "\\") == text
        bare = escaped.replace("\\\\", "").replace("\\`", "").replace("\\*", "").replace("\\_", "").replace("\\[", "").replace("\\]", "").replace("\\<", "").replace("\\>", "").replace("\\|", "").replace("\\$", "").replace("\\#", "").replace("\\~", "")
        assert not set(bare) & set("`*_[]<>|$#~"), (text, escaped)
    doc = comparison_markdown(["[bold]x[/] is 2.0x slower than <script>"], [], {"[bold]x[/]": "id-a", "<script>": "id-b"}, None)
    assert "\\[bold\\]x\\[/\\]" in doc and "\\<script\\>" in doc and "<script>" not in doc


def _drop_root_file_access() -> None:
    """In a child before exec: drop CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2) from the
    bounding set (prctl PR_CAPBSET_DROP, 24), so the exec'd root process obeys file modes."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.slow
def test_unreadable_files_are_one_line_naming_them(fuzzed: dict, recorded: Path) -> None:
    """A run.json or table another user's umask left unreadable: that run is damaged with a line
    saying whose file and what to do; the rest of the store lists. As root, the commands run in a
    subprocess without the capabilities that let root read any file (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH), so file modes apply to it as to any user."""
    base = Path(tempfile.mkdtemp(prefix="tpu-perf-perm-"))
    try:
        base.chmod(0o755)
        store = base / "runs"
        store.mkdir()
        _copy(recorded, store, HEALTHY[0])
        (_copy(recorded, store, "20300103-000000-000001") / "run.json").chmod(0)
        (_copy(recorded, store, "20300103-000000-000002") / "steps.parquet").chmod(0)
        for path in store.rglob("*"):
            if path.name not in ("run.json", "steps.parquet") or path.stat().st_mode & 0o444:
                path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
        demote = _drop_root_file_access if os.geteuid() == 0 else None
        env = {**user_env(), "PYTHONPATH": str(ROOT), "HOME": str(base), "COLUMNS": "300"}

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "tpu_perf", *args], env=env, cwd=base, capture_output=True, text=True, timeout=120, preexec_fn=demote)  # noqa: PLW1509

        listed = run("ls", "--json", "--store", str(store))
        assert listed.returncode == 0, listed.stderr
        rows = {r["id"]: r for r in json.loads(listed.stdout)}
        assert rows[HEALTHY[0]]["status"] == "completed"
        for run_id, file in (("20300103-000000-000001", "run.json"), ("20300103-000000-000002", "steps.parquet")):
            assert rows[run_id]["status"] == "damaged" and "not readable by this user" in rows[run_id]["damage"] and file in rows[run_id]["damage"]  # the reason names the file; the url is the run folder
            report = run("report", "--store", str(store), run_id)
            assert report.returncode == 3 and len(_lines(report.stderr)) == 1 and f"{file}: not readable by this user" in report.stderr and "chmod" in report.stderr
        store.chmod(0)  # no one may list it, its owner neither
        closed = run("ls", "--store", str(store))
        assert closed.returncode == 3 and len(_lines(closed.stderr)) == 1 and "not readable" in closed.stderr, closed.stderr
    finally:
        for path in [base, *base.rglob("*")]:
            with contextlib.suppress(OSError):
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_recorded_files_follow_the_umask(tmp_path: Path) -> None:
    """Under umask 002 every file of a recording is 0664 and every folder 0775 (a team can read it);
    before, 46 of 53 files were 0600."""
    store = tmp_path / "runs"
    proc = subprocess.run(["bash", "-c", 'umask 002 && exec "$0" -m tpu_perf record -q --store "$1" "$2" --steps 4 --width 32', sys.executable, str(store), EXAMPLE], env={**user_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    modes = {p.relative_to(store): p.stat().st_mode & 0o777 for p in store.rglob("*")}
    wrong = {str(p): oct(m) for p, m in modes.items() if m != (0o775 if (store / p).is_dir() else 0o664)}
    assert len(modes) > 10 and not wrong, wrong


MEASURED = "import resource, subprocess, sys; p = subprocess.run(sys.argv[2:]); open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(p.returncode)"
"""Runs a command and writes its peak RSS (KiB): RUSAGE_CHILDREN of this test process would be the
largest of every child the whole session started (a recording of 1 GiB earlier in the suite)."""


def _import_peak_mib(args: list[str], rss_file: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**user_env(), "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", MEASURED, str(rss_file), sys.executable, "-m", "tpu_perf", "import", *args], env=env, capture_output=True, text=True, timeout=60)
    return proc, int(rss_file.read_text()) / 1024


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Files built to make a reader run away: sparse 5 GiB files (no disk used), a gzip bomb, deep
    nesting, a FIFO."""
    base = tmp_path_factory.mktemp("crafted")
    files = {}
    with open(base / "huge.xplane.pb", "wb") as f:  # an XSpace whose first plane claims 5e9 bytes of NULs
        f.write(b"\x0a" + _varint(5_000_000_000))
        f.truncate(5 << 30)
    files["xplane declares 5e9 bytes"] = base / "huge.xplane.pb"
    with open(base / "huger.xplane.pb", "wb") as f:  # ... and one that claims more than the file holds
        f.write(b"\x0a" + _varint(1 << 60))
        f.truncate(5 << 30)
    files["xplane declares 2^60 bytes"] = base / "huger.xplane.pb"
    with open(base / "unterminated.json", "wb") as f:
        f.write(b'{"traceEvents": [{"name": "')
        f.truncate(5 << 30)
    files["json unterminated string"] = base / "unterminated.json"
    (base / "deep.json").write_bytes(b'{"traceEvents": [' + b"[" * 200_000)
    files["json deep nesting"] = base / "deep.json"
    with gzip.open(base / "bomb.json.gz", "wb", compresslevel=9) as g:  # 256 MiB of blanks in ~260 KB
        g.write(b'{"traceEvents": [')
        for _ in range(16):
            g.write(b" " * (16 << 20))
    files["gzip bomb (with --max-bytes 64 MB)"] = base / "bomb.json.gz"
    os.mkfifo(base / "fifo.json")
    files["fifo"] = base / "fifo.json"
    files["/dev/zero"] = Path("/dev/zero")
    yield files


@pytest.mark.slow
def test_crafted_trace_files_end_bounded(crafted: dict[str, Path], tmp_path: Path) -> None:
    """Each crafted file: one line, exit 2 (not a regular file) or 3 (damaged), in under 30 s and
    under 1 GiB, and no run left in the store."""
    store = tmp_path / "runs"
    for name, path in crafted.items():
        extra = ["--max-bytes", "64000000"] if "bomb" in name else []
        started = time.perf_counter()
        proc, peak_mib = _import_peak_mib(["--store", str(store), *extra, str(path)], tmp_path / "rss")
        elapsed = time.perf_counter() - started
        lines = _lines(proc.stderr)
        assert proc.returncode == (2 if name in ("fifo", "/dev/zero") else 3), (name, proc.stderr)
        assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in proc.stderr, (name, proc.stderr)
        assert elapsed < 30, (name, elapsed)
        assert peak_mib < 1024, (name, peak_mib)
    assert not store.exists() or not any(store.iterdir())


def test_a_second_interrupt_while_the_trace_is_read_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C while the trace window becomes op tables: the run still finishes, and its
    warnings say the ops and timeline tables are missing (before: they were silently absent). The
    KeyboardInterrupt is raised where a real one lands, in the trace reader."""
    from tpu_perf.collectors.record import record
    from tpu_perf.collectors.runner import resolve_target
    from tpu_perf.collectors.session import RecordOptions
    from tpu_perf.store import load_run
    from tpu_perf.traces import ingest

    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")

    def with_a_trace(writer: object) -> None:  # a Kineto capture in the run's trace window folder
        trace = Path(writer.dir) / "trace"  # type: ignore[attr-defined]
        trace.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "tests" / "data" / "cpu_only_rank34.pt.trace.json.gz", trace / "rank34.pt.trace.json.gz")

    def interrupted(path: Path, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest, "read_traces", interrupted)
    result = record(resolve_target(str(script), None, []), store=str(tmp_path / "runs"), options=RecordOptions(trace_steps=None, progress=False), log=lambda line: None, on_created=with_a_trace)
    run = load_run(result.url)
    assert run.status == "completed" and (Path(result.url) / "trace" / "rank34.pt.trace.json.gz").exists()
    assert any("ops, timeline and device tables are missing" in w for w in run.manifest["warnings"])
    assert not (Path(result.url) / "ops.parquet").exists()


def test_early_checks_are_one_line_before_anything_runs(tmp_path: Path) -> None:
    """`--topology` names a TPU the catalogue knows before the script starts; `--store` that is a
    file is one line (exit 2) in every command that reads or writes a store."""
    marker = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    for topology, said in (("zz9:1x1", "unknown chip"), ("v100:2x2", "is not a TPU"), ("v6e:0x2", "at least one chip")):
        result = run_cli("record", "--store", str(tmp_path / "runs"), "--topology", topology, str(script))
        assert result.crash is None and result.code == 2 and len(_lines(result.err)) == 1 and said in result.err, result.err
    assert not marker.exists() and not (tmp_path / "runs").exists()
    a_file = tmp_path / "store.txt"
    a_file.write_text("not a store")
    store = ("--store", str(a_file))
    commands = (("ls", *store), ("ls", "--json", *store), ("report", "x", *store), ("advise", "x", *store), ("import", str(DATA_TRACE), *store), ("check", "--baseline", "name:a", "--candidate", "name:b", *store),
                ("baseline", "save", "b", "name:a", "--out", str(tmp_path / "b.json"), *store), ("record", *store, str(script)))  # fmt: skip
    for command in commands:
        result = run_cli(*command)
        assert result.crash is None and result.code == 2, (command, result.code, result.err)
        assert len(_lines(result.err)) == 1 and f"--store {a_file}: is a file" in result.err, (command, result.err)
    assert not marker.exists() and a_file.read_text() == "not a store"
