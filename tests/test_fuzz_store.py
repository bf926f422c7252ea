"""Fuzz of what a store, a terminal or a full disk can throw at tpu-perf (issue 56), designed apart
from tests/test_robust_store.py: named pipes, devices and sockets where run files should be, user
text no terminal or encoder takes (control characters, bidi controls, lone surrogates, undecodable
bytes), a stale or damaged runs index, error paths of `--json`, remote stores that cannot be
reached, and faults while `record` runs (a full disk, the run folder deleted, bad step marks,
Ctrl-C). Counted over every case: tracebacks, hangs (each command within 30 s), silently wrong
numbers, valid runs refused. All must be 0.

Store cases are copies of one shared recording (conftest `recordings`, the one tests/test_faults.py
takes) and run their commands in this process through `tpu_perf.cli.main`, with TPU_PERF_DEBUG set
so an internal error is a traceback here, never hidden behind a one-line message."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, Recordings, pythonpath, tpu_perf_cli, user_env
from tests.in_process import Result, run_cli
from tpu_perf import cli
from tpu_perf.store.index import INDEX_DIR, ROW_FILE

SCRIPT = ROOT / "tests" / "scripts" / "jax_selftimed.py"
HEALTHY = "20300201-000000-00000a"
LIMIT_S = 30.0
"""Every command ends within this; a hang is a failure."""
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""What must never reach a terminal from user text (rich writes no styles into a captured stream)."""


@pytest.fixture(scope="module")
def recorded(recordings: Recordings) -> Path:
    """A finished 4-step JAX recording, shared with tests/test_faults.py. Read only."""
    return recordings.run("-q", "--no-trace", str(SCRIPT), str(recordings.root / "selftimed-o.json"), "--steps", "4")


@pytest.fixture(autouse=True)
def _debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_PERF_DEBUG", "1")
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(cli.out, "width", 300)
    monkeypatch.setattr(cli.err, "width", 300)


class Tally:
    """Problems by class; the test fails listing all of them."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def expect(self, ok: bool, what: str) -> None:
        if not ok:
            self.problems.append(what)

    def clean(self, case: str, command: str, result: Result) -> None:
        """No traceback, no hang, no raw control character or surrogate in what was printed."""
        self.expect(result.crash is None and "Traceback" not in result.err, f"traceback: {case}: {command}: {result.crash!r} {result.err[-300:]!r}")
        self.expect(result.seconds < LIMIT_S, f"hang: {case}: {command} took {result.seconds:.0f} s")
        shown = RAW_CONTROL.search(result.out + result.err)
        self.expect(shown is None, f"raw text: {case}: {command} printed {shown.group()!r}" if shown else "")

    def fail_if_any(self) -> None:
        assert not self.problems, f"{len(self.problems)} problem(s):\n" + "\n".join(self.problems)


def _copy(source: Path, store: Path, folder: str | bytes, **fields: object) -> Path:
    """A copy of `source` named `folder` in `store`, its manifest's id the folder's name, `fields` set."""
    name = os.fsdecode(folder)
    target = store / name
    shutil.copytree(source, target)
    for stale in (target / ROW_FILE,):
        stale.unlink(missing_ok=True)
    manifest = json.loads((target / "run.json").read_text())
    (target / "run.json").write_text(json.dumps({**manifest, "id": name, **fields}))  # \\ud800 stays an escape: valid JSON
    return target


# -- what can sit where a run file should ------------------------------------------------------
def _fifo(name: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        os.mkfifo(folder / name)

    return apply


def _link(name: str, target: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(target)

    return apply


def _socket(name: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(folder / name))

    return apply


def _loop(name: str) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(folder / name)

    return apply


def _sparse(name: str, size: int) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        with open(folder / name, "r+b") as f:
            f.truncate(size)

    return apply


NOT_FILES: dict[str, Callable[[Path], None]] = {
    "run.json a FIFO": _fifo("run.json"),
    "steps.parquet a FIFO": _fifo("steps.parquet"),
    "compiles.parquet a FIFO": _fifo("compiles.parquet"),
    "memory.parquet a FIFO": _fifo("memory.parquet"),
    "programs.parquet a FIFO": _fifo("programs.parquet"),
    "run.json -> /dev/zero": _link("run.json", "/dev/zero"),
    "steps.parquet -> /dev/zero": _link("steps.parquet", "/dev/zero"),
    "steps.parquet a socket": _socket("steps.parquet"),
    "steps.parquet a symlink loop": _loop("steps.parquet"),
    "run.json a 40 GiB sparse file": _sparse("run.json", 40 << 30),
}
"""Each makes its run damaged: listed as such, `report` one line and exit 3; the others unaffected."""

NOT_FILES_HARMLESS: dict[str, Callable[[Path], None]] = {
    "index.parquet (the run's row) a FIFO": _fifo(ROW_FILE),
    "a FIFO beside the tables": _fifo("notes.txt"),
}
"""Each leaves a valid run: listed and reported as the untouched copy is."""


# -- user text ---------------------------------------------------------------------------------
TEXT_CASES: dict[str, dict[str, object]] = {
    "name a lone surrogate": {"name": "\ud800x"},
    "name recolours the terminal": {"name": "a\x1b[31mRED\x1b[0m"},
    "name clears the screen": {"name": "x\x1b[2J\x1b[Hy"},
    "name rings the bell, NUL and DEL": {"name": "b\x07e\x00l\x7fl"},
    "name with a C1 CSI": {"name": "c1\x9b31mx"},
    "name reversed by a bidi override": {"name": "evil\u202etxt.exe"},
    "name with a newline and a tab": {"name": "two\nlines\tand a tab"},
    "name markup and a surrogate": {"name": "[bold]\udcff[/]"},
    "tags with control characters": {"tags": {"k\x1b[1m": "v\x07", "s\ud801": "\udc00"}},
    "error message recolours": {"status": "failed", "exit_code": 1, "error": {"message": "boom\x1b[41m\ud800 <b>x</b>"}},
    "command with escapes": {"command": ["python", "\x1b]0;title\x07.py"], "cwd": "/tmp/\x1b[5mblink"},
    "emoji and other scripts (kept as they are)": {"name": "训练 🙂 ñ"},
}


def _invalid_utf8_name(folder: Path) -> None:
    data = (folder / "run.json").read_bytes()
    manifest = json.loads(data)
    (folder / "run.json").write_bytes(data.replace(json.dumps(manifest["name"]).encode(), b'"bad \xff\xfe bytes"'))


@pytest.fixture(scope="module")
def store(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One store: a healthy copy, one copy per case, by folder name."""
    root = tmp_path_factory.mktemp("fuzz56") / "runs"
    root.mkdir()
    _copy(recorded, root, HEALTHY)
    damaged, valid = {}, {}
    for i, (case, damage) in enumerate(NOT_FILES.items()):
        folder = _copy(recorded, root, f"20300202-000000-{i:06x}")
        damage(folder)
        damaged[folder.name] = case
    for i, (case, damage) in enumerate(NOT_FILES_HARMLESS.items()):
        folder = _copy(recorded, root, f"20300203-000000-{i:06x}")
        damage(folder)
        valid[folder.name] = case
    for i, (case, fields) in enumerate(TEXT_CASES.items()):
        valid[_copy(recorded, root, f"20300204-000000-{i:06x}", **fields).name] = case
    folder = _copy(recorded, root, "20300205-000000-000000")
    _invalid_utf8_name(folder)
    valid[folder.name] = "name of undecodable bytes in run.json"
    folder = _copy(recorded, root, "20300205-000000-000001")
    (folder / "steps.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in pd.read_parquet(folder / "steps.parquet").to_dict("records")))
    (folder / "steps.parquet").unlink()
    valid[folder.name] = "steps only as JSON lines (a recorder that could not convert them)"
    odd = os.fsencode(str(root)) + b"/20300206-000000-\xff\xfe"
    _copy(recorded, root, odd)
    return {"root": root, "damaged": damaged, "valid": valid, "odd_folder": os.fsdecode(odd)}


@pytest.mark.slow
def test_store_cases_never_hang_crash_lie_or_refuse(store: dict, recorded: Path) -> None:
    tally = Tally()
    root = str(store["root"])
    clean_doc = json.loads(run_cli("report", "--json", str(recorded)).out)
    base_steps, base_median = clean_doc["steps"]["count"], clean_doc["steps"]["iteration_median_s"]
    listings = {}
    for command in (("ls",), ("ls", "--json"), ("history", "all", "--json")):
        result = run_cli(*command, "--store", root)
        tally.clean("store", " ".join(command), result)
        tally.expect(result.code == 0, f"refused: store: {' '.join(command)} exit {result.code}: {result.err[-300:]}")
        listings[command] = result
    rows = {r["id"]: r for r in json.loads(listings[("ls", "--json")].out or "[]")}
    tally.expect(len(rows) == 2 + len(store["damaged"]) + len(store["valid"]), f"ls --json listed {len(rows)} runs: {sorted(rows)}")
    for run_id, case in store["damaged"].items():
        row = rows.get(run_id, {})
        tally.expect(row.get("status") == "damaged" and bool(row.get("damage")), f"lie: {case}: ls row {row}")
        for command in (("report",), ("report", "--json"), ("advise", "--json")):
            result = run_cli(*command, "--store", root, run_id)
            tally.clean(case, " ".join(command), result)
            lines = [line for line in result.err.splitlines() if line.strip()]
            tally.expect(result.code == 3 and len(lines) == 1 and run_id in lines[0], f"{case}: {' '.join(command)} exit {result.code}: {result.err[-300:]!r}")
            if "--json" in command:
                tally.expect(json.loads(result.out or "null") == {"error": lines[0].removeprefix("tpu-perf: error: ") if lines else None, "exit_code": 3}, f"--json: {case}: {' '.join(command)} printed {result.out[:200]!r}")
    for run_id, case in {HEALTHY: "healthy", **store["valid"]}.items():
        row = rows.get(run_id, {})
        tally.expect(row.get("status") in ("completed", "failed") and row.get("steps") == base_steps, f"refused or wrong: {case}: ls row {row}")
        doc = run_cli("report", "--json", "--store", root, run_id)
        tally.clean(case, "report --json", doc)
        tally.expect(doc.code == 0, f"refused: {case}: report --json exit {doc.code}: {doc.err[-300:]}")
        if doc.code == 0:
            steps = json.loads(doc.out)["steps"]
            tally.expect((steps["count"], steps["iteration_median_s"]) == (base_steps, base_median), f"wrong: {case}: steps {steps['count']}, median {steps['iteration_median_s']} (clean: {base_steps}, {base_median})")
            name = json.loads(doc.out)["run"]["name"]
            tally.expect(RAW_CONTROL.search(name) is None, f"raw text: {case}: report --json name {name!r}")
            text = run_cli("report", "--store", root, run_id)
            tally.clean(case, "report", text)
            tally.expect(text.code == 0 and name.splitlines()[0][:20] in text.out, f"{case}: report shows not the name {name!r}")
        checked = run_cli("check", "--json", "--store", root, "--baseline", HEALTHY, "--candidate", run_id, "--margin", "0.5")
        tally.clean(case, "check --json", checked)
        tally.expect(checked.code in (0, 3, 4) and "verdict" in json.loads(checked.out or "{}"), f"{case}: check --json exit {checked.code}: {checked.out[:200]!r} {checked.err[-200:]!r}")
    shown = {r["name"] for r in rows.values()}
    tally.expect("a\\x1b[31mRED\\x1b[0m" in shown and "\\ud800x" in shown and "evil\\u202etxt.exe" in shown and "训练 🙂 ñ" in shown, f"escapes: names listed as {sorted(shown)}")
    tally.expect("bad \\udcff\\udcfe bytes" in shown, f"undecodable bytes: names listed as {sorted(shown)}")
    tally.fail_if_any()


@pytest.mark.slow
def test_dashboard_pages_beside_hostile_runs(store: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs page lists every run (the damaged with a card), and the run pages of hostile names
    (a lone surrogate, terminal escapes, a bidi override) render: before, one surrogate name made
    every page, the healthy run's too, a Streamlit exception."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TPU_PERF_STORE", str(store["root"]))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path / "cache"))

    def page(name: str, **query: str) -> AppTest:
        at = AppTest.from_string(f"from tpu_perf.dashboard.screens import {name}\n{name}.render()\n", default_timeout=120)
        for key, value in query.items():
            at.query_params[key] = value
        return at.run()

    runs = page("runs")
    assert not runs.exception
    shown = runs.dataframe[0].value
    assert HEALTHY in set(shown["id"]) and "\\ud800x" in set(shown["name"])
    cards = " ".join(e.value for e in runs.error)
    assert all(run_id in cards for run_id in store["damaged"])
    by_case = {case: run_id for run_id, case in store["valid"].items()}
    for case in ("name a lone surrogate", "name recolours the terminal", "name reversed by a bidi override", "tags with control characters"):
        run = page("run", run=by_case[case])
        assert not run.exception, case
        assert not any(RAW_CONTROL.search(str(m.value)) for m in run.markdown), case
    assert not page("run", run=HEALTHY).exception


# -- the runs index ----------------------------------------------------------------------------
def _index_store(recorded: Path, root: Path, runs: int = 3) -> list[str]:
    ids = [f"20300301-000000-{i:06x}" for i in range(runs)]
    for run_id in ids:
        _copy(recorded, root, run_id)
    return ids


def _part(root: Path, name: str, data: bytes | None = None, *, folder: bool = False, fifo: bool = False, frame: pd.DataFrame | None = None) -> None:
    path = root / INDEX_DIR / name
    path.parent.mkdir(exist_ok=True)
    if folder:
        path.mkdir()
    elif fifo:
        os.mkfifo(path)
    elif frame is not None:
        frame.to_parquet(path)
    else:
        path.write_bytes(data or b"")


INDEX_DAMAGE: dict[str, Callable[[Path], None]] = {
    "a garbage part": lambda root: _part(root, "part-garbage.parquet", b"PAR1 not parquet PAR1"),
    "an empty part": lambda root: _part(root, "part-empty.parquet", b""),
    "a part that is a folder": lambda root: _part(root, "part-folder.parquet", folder=True),
    "a part that is a FIFO": lambda root: _part(root, "part-fifo.parquet", fifo=True),
    "a part of another schema": lambda root: _part(root, "part-other.parquet", frame=pd.DataFrame({"x": [1, 2]})),
    "a part whose ids are numbers": lambda root: _part(root, "part-ints.parquet", frame=pd.DataFrame({"id": [1, 2], "status": ["completed", "completed"]})),
    ".index a file": lambda root: (root / INDEX_DIR).write_text("not a folder"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(INDEX_DAMAGE))
def test_a_damaged_runs_index_never_stops_the_store(case: str, recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # `baseline save` writes main.baseline.json here
    tally = Tally()
    root = tmp_path / "runs"
    root.mkdir()
    ids = _index_store(recorded, root)
    assert run_cli("ls", "--json", "--store", str(root)).code == 0  # rows written
    INDEX_DAMAGE[case](root)
    for command in (("ls",), ("ls", "--json"), ("history", "all", "--json"), ("check", "--json", "--baseline", ids[0], "--candidate", ids[1], "--margin", "0.5"), ("baseline", "save", "main", ids[0])):
        result = run_cli(*command, "--store", str(root))
        tally.clean(case, " ".join(command), result)
        tally.expect(result.code in ((0, 3, 4) if command[0] == "check" else (0,)), f"refused: {case}: {' '.join(command)} exit {result.code}: {result.err[-300:]}")
        if "--json" in command:
            tally.expect(bool(result.out.strip()) and json.loads(result.out) is not None, f"--json: {case}: {' '.join(command)} printed {result.out[:200]!r}")
    listed = json.loads(run_cli("ls", "--json", "--store", str(root)).out)
    tally.expect(sorted(r["id"] for r in listed) == ids and all(r["status"] == "completed" for r in listed), f"refused: {case}: ls --json {listed}")
    tally.fail_if_any()


@pytest.mark.slow
def test_an_index_row_follows_its_run_files(recorded: Path, tmp_path: Path) -> None:
    """A finished run's steps rewritten (every duration doubled) after its row was indexed and
    compacted: `ls` gives what `report` gives, never the old number."""
    root = tmp_path / "runs"
    root.mkdir()
    ids = _index_store(recorded, root, runs=18)  # more than COMPACT_AT: the rows go into a part
    before = {r["id"]: r["step_s"] for r in json.loads(run_cli("ls", "--json", "--store", str(root)).out)}
    assert list((root / INDEX_DIR).glob("part-*.parquet"))
    steps = root / ids[0] / "steps.parquet"
    frame = pd.read_parquet(steps)
    frame["duration_s"] = frame["duration_s"] * 2
    frame.to_parquet(steps, index=False)
    after = {r["id"]: r["step_s"] for r in json.loads(run_cli("ls", "--json", "--store", str(root)).out)}
    doc = json.loads(run_cli("report", "--json", "--store", str(root), ids[0]).out)
    assert after[ids[0]] == pytest.approx(doc["steps"]["step_s"]) and after[ids[0]] == pytest.approx(2 * before[ids[0]], rel=0.05)
    assert all(after[i] == before[i] for i in ids[1:])  # the others' rows stand
    (root / ids[1] / ROW_FILE).write_bytes(b"garbage")  # a damaged row file: rebuilt, the run listed
    (root / ids[2] / ROW_FILE).write_bytes((root / ids[3] / ROW_FILE).read_bytes())  # another run's row: rebuilt
    shutil.rmtree(root / INDEX_DIR)
    rows = {r["id"]: r for r in json.loads(run_cli("ls", "--json", "--store", str(root)).out)}
    assert rows[ids[1]]["step_s"] == before[ids[1]] and rows[ids[2]]["id"] == ids[2] and rows[ids[2]]["step_s"] == before[ids[2]]


# -- --json and help ---------------------------------------------------------------------------
def test_json_is_json_on_every_error(tmp_path: Path) -> None:
    tally = Tally()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    (tmp_path / "runs").mkdir()
    runs = str(tmp_path / "runs")
    for command in (
        ("report", "--json", "nope", "--store", runs),
        ("report", "--json", str(tmp_path / "no-folder")),
        ("advise", "--json", "nope", "--store", runs),
        ("ls", "--json", "--store", str(a_file)),
        ("ls", "--json", "--store", str(a_file / "below")),
        ("ls", "--json", "--bogus"),
        ("check", "--json", "--store", runs, "--baseline", "nope", "--candidate", "nope"),
        ("check", "--json", "--store", runs),
        ("history", "--json", "tag:nope", "--store", runs, "--metric", "nope"),
        ("report", "--json", "--convention", "nope", "nope", "--store", runs),
    ):
        result = run_cli(*command)
        tally.clean("json", " ".join(command), result)
        try:
            doc = json.loads(result.out)
        except ValueError:
            doc = None
        tally.expect(doc is not None, f"--json: {' '.join(command)} exit {result.code} printed {result.out[:200]!r} {result.err[-200:]!r}")
        if result.code != 0 and isinstance(doc, dict) and "verdict" not in doc:
            tally.expect(doc.get("exit_code") == result.code and isinstance(doc.get("error"), str), f"--json: {' '.join(command)}: {doc}")
    tally.fail_if_any()


def test_no_help_text_renders_as_an_emoji() -> None:
    """Rich turns `:name:` into an emoji in help text (`tag:KEY:` became `tag🔑`): no command's
    help or option help holds a `:code:` that Rich knows."""
    import typer
    from rich._emoji_codes import EMOJI

    found = []

    def walk(command: object, path: str) -> None:
        texts = [getattr(command, "help", None) or ""] + [getattr(p, "help", None) or "" for p in getattr(command, "params", [])]
        for text in texts:
            found.extend(f"{path}: {m.group(0)}" for m in re.finditer(r":(\S*?):", text) if m.group(1).lower() in EMOJI)
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(cli.app), "tpu-perf")
    assert not found
    shown = run_cli("check", "--help")
    assert "tag:KEY" in shown.out and "🔑" not in shown.out


@pytest.mark.slow
def test_hostile_command_lines(store: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values no one means to type, in every place a command takes text or a path: one line and
    exit 2 or 3 (or a result), never a traceback, a hang or the memory filled (`file:/dev/zero`)."""
    monkeypatch.chdir(tmp_path)  # `baseline save NAME` writes NAME.baseline.json here
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    root = str(store["root"])
    values = ["", "\x00", "a\x00b", "\udcff\udcfe", "x" * 5000, "/dev/zero", f"file:{fifo}", "file:/dev/zero", "tag:", "history:", "nope://x", "\x1b[2J"]
    tally = Tally()
    for value in values:
        for command in (
            ("report", value, "--store", root),
            ("report", "--json", HEALTHY, "--store", value),
            ("ls", "--json", "--store", value),
            ("check", "--json", "--store", root, "--baseline", value, "--candidate", HEALTHY),
            ("baseline", "save", value, HEALTHY, "--store", root),
            ("mfu", "--chip", "v6e", "--hf-config", value, "--tokens-per-second", "1"),
        ):
            result = run_cli(*command)
            tally.clean(repr(value[:20]), " ".join(c[:20] for c in command[:2]), result)
            tally.expect(result.code in (0, 2, 3, 4), f"{value[:20]!r}: {command[:2]} exit {result.code}: {result.err[-200:]!r}")
    tally.fail_if_any()


# -- remote stores -----------------------------------------------------------------------------
def _bare_env(**extra: str) -> dict[str, str]:
    """The user's environment without cloud credentials or endpoints, on this checkout."""
    env = {k: v for k, v in user_env().items() if not k.startswith(("AWS_", "FSSPEC_", "GOOGLE_", "GCE_", "CLOUDSDK_"))}
    return {**env, "PYTHONPATH": pythonpath(), "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true", "NO_GCE_CHECK": "true", **extra}


def _remote(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tpu_perf", *args], env=env, capture_output=True, text=True, timeout=LIMIT_S)
    return proc, time.perf_counter() - started


@pytest.mark.slow
def test_a_remote_store_that_cannot_be_read_is_one_line_in_bounded_time(tmp_path: Path) -> None:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        moto = _bare_env(FSSPEC_S3_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
        cases = [
            ("no credentials", ["ls", "--store", "s3://nope-bucket"], _bare_env(), "no credentials"),
            ("no credentials, --json", ["ls", "--json", "--store", "s3://nope-bucket"], _bare_env(), "no credentials"),
            ("no credentials, report", ["report", "x", "--store", "s3://nope-bucket/runs"], _bare_env(), "no credentials"),
            ("no such bucket", ["ls", "--store", "s3://no-such-bucket/runs"], moto, "no such bucket"),
            ("no such bucket, check --json", ["check", "--json", "--store", "s3://no-such-bucket/runs", "--baseline", "a", "--candidate", "b"], moto, "no such bucket"),
            ("no network", ["ls", "--store", "s3://bucket/runs"], _bare_env(FSSPEC_S3_ENDPOINT_URL="http://127.0.0.1:9", AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_DEFAULT_REGION="us-east-1", TPU_PERF_STORE_TIMEOUT_S="5"), ""),
            ("gs without credentials or network", ["ls", "--store", "gs://nope-bucket/runs"], _bare_env(TPU_PERF_STORE_TIMEOUT_S="5"), ""),
        ]
        problems = []
        for case, args, env, cause in cases:
            proc, seconds = _remote(args, env)
            store = next(a for a in args if "://" in a)
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            if not (proc.returncode == 2 and len(lines) == 1 and store in lines[0] and cause in lines[0] and "Traceback" not in proc.stderr):
                problems.append(f"{case}: exit {proc.returncode} in {seconds:.1f} s: {proc.stderr[-400:]!r}")
            if "--json" in args and json.loads(proc.stdout or "null") != {"error": lines[0].removeprefix("tpu-perf: error: "), "exit_code": 2}:
                problems.append(f"{case}: --json printed {proc.stdout[:200]!r}")
        assert not problems, "\n".join(problems)
    finally:
        server.stop()


# -- record under faults -----------------------------------------------------------------------
FAULTY = """\
import os, resource, shutil, sys, time
import tpu_perf

mode, store, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(steps):
    mark = i
    if mode == "marks":
        mark = {3: "abc", 4: 1.5, 5: True, 6: None, 7: [1]}.get(i, i)
    tpu_perf.step(mark)
    if mode == "full" and i == 2:
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    if mode == "vanish-store" and i == 3:
        shutil.rmtree(store)
    if mode == "vanish-run" and i == 3:
        shutil.rmtree(next(p for p in os.scandir(store) if p.is_dir() and not p.name.startswith(".")).path)
    time.sleep(0.0005 if mode == "full" else 0.01)
print("script done", flush=True)
"""


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faulty") / "faulty.py"
    path.write_text(FAULTY)
    return path


def _only_run(store: Path) -> Path:
    runs = [p for p in store.iterdir() if (p / "run.json").is_file()]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "steps", "warning"), [
    ("marks", 12, "tpu_perf.step('abc'): a step number must be an integer"),
    ("vanish-run", 12, "deleted during the run"),
    ("vanish-store", 12, "deleted during the run"),
    ("full", 300, "written at the end"),  # 300 steps: over 30 kB as JSON lines, well under it as Parquet (600 came near it on a loaded machine)
    ("full", 4000, "are lost"),
])
def test_record_under_faults_finishes_the_script_and_says_why(mode: str, steps: int, warning: str, faulty: Path, tmp_path: Path) -> None:
    """The script runs to its end (exit 0), `record` prints no traceback of its own, and the run
    is `completed` with one warning per fault; what was kept is read back as it was recorded."""
    store = tmp_path / "runs"
    store.mkdir()
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(store), str(faulty), mode, str(store), str(steps), timeout=120)
    assert proc.returncode == 0 and "script done" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert warning in proc.stderr, proc.stderr[-2000:]
    run = _only_run(store)
    doc = json.loads(run_cli("report", "--json", str(run)).out)
    assert doc["run"]["status"] == "completed" and any(warning in w for w in doc["run"]["warnings"])
    if mode == "full" and warning == "are lost":  # more than fits: the steps the disk took, no torn line, the rest said to be lost
        assert 0 < doc["steps"]["count"] < steps and any("File too large" in w for w in doc["run"]["warnings"])
    elif mode == "full":  # the table fits once it is Parquet: every step the disk refused while the run went was held and kept
        assert doc["steps"]["count"] == steps and (run / "steps.parquet").is_file()
    else:  # every step kept: marks without their numbers, records of deleted files from the open files
        assert doc["steps"]["count"] == steps
        assert (run / "steps.parquet").is_file() and not (run / "steps.jsonl").exists()


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.3, 1.0, 2.5])
def test_ctrl_c_soon_after_launch_is_never_a_traceback(after_s: float, faulty: Path, tmp_path: Path) -> None:
    """SIGINT at several moments of a cold start (importing, setting up the run, the script
    running): no traceback, exit 130 (or killed by it before Python handles signals), and any
    run it left is final, never `running`."""
    store = tmp_path / "runs"
    env = {**user_env(), "PYTHONPATH": pythonpath()}
    proc = subprocess.Popen([sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", str(store), str(faulty), "plain", str(store), "2000"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0]
    assert "Traceback" not in out and proc.returncode in (130, -signal.SIGINT), out[-3000:]
    for folder in store.iterdir() if store.exists() else []:
        if (folder / "run.json").is_file():
            assert json.loads((folder / "run.json").read_text())["status"] in ("interrupted", "completed"), out
