"""A run's saved report (`commands.saved_report`): written when `tpu-perf record` ends, read by the
dashboard in place of a build, and never used once it is not what a build would give now."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT, Recordings, copy_run
from tpu_perf import load_run
from tpu_perf.commands import saved_report
from tpu_perf.jsonio import dumps

SCRIPT = ROOT / "tests" / "scripts" / "jax_selftimed.py"


@pytest.fixture(scope="module")
def recorded(recordings: Recordings) -> Path:
    """The 4-step JAX recording tests/test_fuzz_store.py and tests/test_faults.py share. Read only."""
    return recordings.run("-q", "--no-trace", str(SCRIPT), str(recordings.root / "selftimed-o.json"), "--steps", "4")


def _json(value: object) -> object:
    return json.loads(dumps(value))


def test_record_saves_the_report_a_build_gives(recorded: Path) -> None:
    from tpu_perf.advise import advise
    from tpu_perf.advise.document import advice_document
    from tpu_perf.analyzers.report import build_report
    from tpu_perf.analyzers.run_values import run_values

    assert (recorded / saved_report.SAVED_FILE).is_file()
    run = load_run(str(recorded))
    saved = saved_report.load(run)
    assert saved is not None and saved.error is None
    report = build_report(run)
    assert saved.doc == _json(report.to_dict())  # the same document `tpu-perf report --json` prints
    assert saved.advice == _json(advice_document(run, advise(run, report)))
    assert saved.values is not None
    fresh = run_values(run, report)
    assert saved.values.to_dict(samples=True) == _json(fresh.to_dict(samples=True))
    assert saved.values.steady_samples_s == fresh.steady_samples_s and len(fresh.steady_samples_s) >= 2  # the single-run interval's samples


def test_the_dashboard_opens_a_saved_run_without_building_it(recorded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tpu_perf.analyzers.report as report_module
    from tpu_perf.dashboard import data

    expected = saved_report.load(load_run(str(recorded)))
    assert expected is not None

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("built a report the run has saved")

    monkeypatch.setattr(report_module, "build_report", no_build)
    data.clear_caches()
    stamp = load_run(str(recorded)).modified_stamp
    got = json.loads(data._build(str(recorded), stamp))
    assert got["doc"] == expected.doc and got["error"] is None
    assert got["advice"] == expected.advice["findings"] and got["advice_summary"]["conclusion"] == expected.advice["conclusion"]
    values = data.run_values(data.RunRef(id=expected.doc["run"]["id"], url=str(recorded), name="r", status="completed", stamp=stamp, started_at=None))
    assert values == expected.values  # the verdict's numbers, samples included, without a build
    data.clear_caches()


def _stale(run_dir: Path) -> bool:
    return saved_report.load(load_run(str(run_dir))) is None


def test_a_saved_report_is_used_only_while_it_is_what_a_build_gives(recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tpu_perf.version

    assert not _stale(recorded)
    monkeypatch.setattr(tpu_perf.version, "code_key", lambda: "other code")
    assert _stale(recorded)  # another tpu-perf (an analyzer fixed since) would build another report
    monkeypatch.undo()
    run_dir = copy_run(recorded, tmp_path / "store")
    assert _stale(run_dir)  # read from elsewhere: the report names the folder it was saved for
    assert saved_report.save(load_run(str(run_dir)), str(tmp_path / "store")) and not _stale(run_dir)
    manifest = run_dir / "run.json"
    os.utime(manifest, ns=(manifest.stat().st_atime_ns, manifest.stat().st_mtime_ns + 10**9))
    assert _stale(run_dir)  # the run's files changed (a tag set, a table rewritten)
    for damaged in (b"{", b"[]", b'{"format": 1}', b""):
        (run_dir / saved_report.SAVED_FILE).write_bytes(damaged)
        assert _stale(run_dir)
    (run_dir / saved_report.SAVED_FILE).unlink()
    os.mkfifo(run_dir / saved_report.SAVED_FILE)  # a named pipe with nothing writing: read, it would wait forever
    assert _stale(run_dir)


def test_a_stale_report_is_built_again(recorded: Path, tmp_path: Path) -> None:
    """A tag set after the run ended: the dashboard shows it (a build), not the saved report's tags."""
    from tpu_perf.dashboard import data

    run_dir = copy_run(recorded, tmp_path / "store")
    assert saved_report.save(load_run(str(run_dir)), str(tmp_path / "store"))
    manifest = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**manifest, "tags": {**(manifest.get("tags") or {}), "late": "yes"}}))
    assert _stale(run_dir)
    data.clear_caches()
    got = json.loads(data._build(str(run_dir), load_run(str(run_dir)).modified_stamp))
    assert got["doc"]["run"]["tags"]["late"] == "yes"
    data.clear_caches()
