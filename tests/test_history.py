"""`tpu-perf history`, the runs index it reads, and `check --baseline history:SEL`.

Runs are real run folders written through the store writer (tests/history_runs.py): a nightly
series whose run-to-run noise the test sets (a loaded CI machine's sleep is not 3 % noise), and one
loop recorded in-process by the real Recorder for the row a recording writes when it ends."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import tpu_perf_cli
from tests.history_runs import record_sleep_loop, write_run, write_series
from tpu_perf.analyzers.history import DETECTABLE_STEP, build_history, detect
from tpu_perf.analyzers.index_row import index_row, load_index, write_index_row
from tpu_perf.store import RunWriter, load_run
from tpu_perf.store.index import COMPACT_AT, INDEX_DIR, ROW_FILE, known_rows, read_rows

STEP = [0.020] * 8 + [0.023] * 8


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """16 runs tagged commit=c01..c16: 20 ms a step, 23 ms from c09 on, 3 % run-to-run noise."""
    store = tmp_path_factory.mktemp("nightly") / "runs"
    return store, write_series(store, STEP, noise=0.03, seed=1)


def history_json(store: Path, *args: str) -> dict:
    proc = tpu_perf_cli("history", *args, "--store", str(store), "--json", check=True)
    return json.loads(proc.stdout)


def test_step_change_is_one_change_point_at_c09(nightly: tuple[Path, list[str]]) -> None:
    store, ids = nightly
    doc = history_json(store, "tag:commit", "--order-by", "tag:commit", "--metric", "step_time")
    [series] = doc["series"]
    assert [p["key"] for p in series["points"]] == [f"c{i:02d}" for i in range(1, 17)]
    [cp] = doc["change_points"]
    assert cp["at"] in ("c08", "c09", "c10") and cp["previous"] < cp["at"]
    assert cp["change"] == pytest.approx(0.15, abs=0.07)
    assert cp["before"] == pytest.approx(0.020, rel=0.05) and cp["after"] == pytest.approx(0.023, rel=0.05)
    assert 0 < cp["p_value"] <= 0.01 and cp["run"] == ids[int(cp["at"][1:]) - 1]
    md = tpu_perf_cli("history", "tag:commit", "--order-by", "tag:commit", "--markdown", "--store", str(store), check=True).stdout
    assert f"{cp['previous']} → **{cp['at']}**" in md and f"{cp['change']:+.1%}" in md


def test_flat_series_has_no_change_point(tmp_path: Path) -> None:
    for seed in (2, 3):
        store = tmp_path / f"flat{seed}"
        write_series(store, [0.020] * 12, noise=0.03, seed=seed)
        doc = history_json(store, "all", "--order-by", "tag:commit")
        assert doc["change_points"] == [] and len(doc["series"][0]["points"]) == 12


def test_running_sums_cost_is_ruptures_l2_cost() -> None:
    """The PELT cost from running sums gives ruptures' CostL2 segment costs, and PELT the same
    change points with either, on noisy stepped series (bench/history_detect.py: 10,400 series)."""
    import math

    import numpy as np
    import ruptures

    from tpu_perf.analyzers.history import PENALTY, _sums_cost

    rng = np.random.default_rng(3)
    for length in (12, 30, 90):
        x = (1 + 0.1 * (np.arange(length) >= length // 2)) * (1 + 0.03 * rng.standard_normal(length))
        ours, theirs = _sums_cost()().fit(x.reshape(-1, 1)), ruptures.costs.CostL2().fit(x.reshape(-1, 1))
        for start, end in ((0, length), (0, 2), (3, length - 1), (length // 2, length)):
            assert ours.error(start, end) == pytest.approx(theirs.error(start, end), rel=1e-9, abs=1e-15)
        pen = PENALTY * 0.03**2 * math.log(length)
        found = ruptures.Pelt(custom_cost=_sums_cost()(), min_size=2, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen)
        assert found == ruptures.Pelt(model="l2", min_size=2, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen) and len(found) >= 2


def test_same_result_every_time(nightly: tuple[Path, list[str]]) -> None:
    """A fixed seed: CI output does not flicker."""
    rows = load_index(str(nightly[0]))
    first = build_history(rows, order_by="tag:commit")
    assert [cp.p_value for cp in build_history(rows, order_by="tag:commit").series[0].change_points] == [cp.p_value for cp in first.series[0].change_points]


def test_repeats_are_one_point_and_fingerprints_split_series(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    for commit, steps in (("c01", [0.020, 0.022]), ("c02", [0.021])):
        for step in steps:
            write_run(store, [step * 3] + [step] * 8, tags={"commit": commit})
    write_run(store, [0.06] + [0.010] * 8, tags={"commit": "c03"}, manifest={"hardware": {"device_kind": "TPU v6 lite", "device_count": 8}})
    doc = history_json(store, "tag:commit", "--order-by", "tag:commit")
    first, other = doc["series"]
    assert [(p["key"], p["n"]) for p in first["points"]] == [("c01", 2), ("c02", 1)]
    assert first["points"][0]["low"] == pytest.approx(0.020) and first["points"][0]["high"] == pytest.approx(0.022)
    assert first["points"][0]["value"] == pytest.approx(0.021)
    assert [p["key"] for p in other["points"]] == ["c03"] and set(other["differs"]) >= {"chip", "chip_count"}
    assert "2 separate series" in doc["notes"][0]


HEAVY = ("pandas", "jax", "torch", "streamlit", "plotly")


def _cli_modules(*args: str) -> tuple[list[str], str]:
    """The heavy modules a `tpu-perf ARGS` process imported by its end, and what it printed."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: sys.stderr.write('MODULES ' + repr(sorted(m for m in {HEAVY!r} if m in sys.modules))))\n"
        f"sys.argv = ['tpu-perf', *{list(args)!r}]\n"
        "from tpu_perf.cli import main\nmain()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stderr.rpartition("MODULES ")[2]), proc.stdout  # noqa: S307 - our own repr of a list of names


def test_ls_and_history_import_no_pandas_and_no_framework(nightly: tuple[Path, list[str]]) -> None:
    """Every command pays the CLI's start: `ls` and `history` read the index with pyarrow only."""
    store, ids = nightly
    modules, out = _cli_modules("ls", "--json", "--store", str(store))
    assert modules == [] and [r["id"] for r in json.loads(out)] == ids
    assert out.startswith("[\n  {") and len(out.splitlines()) == len(ids) + 2  # one run a line
    modules, out = _cli_modules("history", "tag:commit", "--order-by", "tag:commit", "--store", str(store), "--json")
    assert modules == [] and [c["at"] for c in json.loads(out)["change_points"]] == ["c09"]


def test_check_baseline_is_the_runs_since_the_last_change(nightly: tuple[Path, list[str]]) -> None:
    store, ids = nightly
    doc = history_json(store, "tag:commit", "--order-by", "started")
    at = doc["change_points"][0]["index"]
    proc = tpu_perf_cli("check", "--baseline", "history:tag:commit", "--candidate", ids[-1], ids[-2], ids[-3], "--store", str(store), "--json")
    verdict = json.loads(proc.stdout)
    assert verdict["baseline_runs"] == ids[at:]
    assert verdict["verdict"] != "REGRESSION", verdict  # the 23 ms runs are the accepted level now
    bad = tpu_perf_cli("check", "--baseline", "history:tag:nope", "--candidate", ids[-1], "--store", str(store))
    assert bad.returncode == 2 and "history:" in bad.stderr


def test_a_recorded_run_writes_its_row_when_it_ends(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    run_id = record_sleep_loop(store, 0.01, steps=6, tags={"commit": "abc"})
    assert (store / run_id / ROW_FILE).exists() and not (store / INDEX_DIR).exists()  # its own file, in its folder
    row = known_rows(str(store), [run_id])[run_id]
    assert row["status"] == "completed" and json.loads(row["tags"]) == {"commit": "abc"} and row["steps"] >= 6
    assert 0.009 < row["step_s"] < 0.2 and row["all_in_s"] >= 0.009 and row["compiles_after_warmup"] == 0
    assert index_row(load_run(str(store / run_id)))["step_s"] == row["step_s"]  # a rebuild gives the same row


def test_index_rebuilds_missing_rows_lists_damaged_runs_and_drops_deleted(tmp_path: Path) -> None:
    store = tmp_path / "runs"
    good = write_run(store, [0.03] + [0.01] * 6, index=False)  # an older run: no row
    torn = write_run(store, [0.03] + [0.01] * 6, index=False)
    (store / torn / "steps.parquet").write_bytes(b"not parquet")
    (store / "broken").mkdir()
    (store / "broken" / "run.json").write_text("{ torn")
    gone = write_run(store, [0.03] + [0.01] * 6)
    import shutil

    shutil.rmtree(store / gone)
    listed = json.loads(tpu_perf_cli("ls", "--json", "--store", str(store), check=True).stdout)
    by_id = {r["id"]: r for r in listed}
    assert set(by_id) == {good, torn, "broken"}
    assert by_id[good]["status"] == "completed" and by_id[good]["step_s"] == pytest.approx(0.01)
    assert by_id[torn]["status"] == "damaged" and "steps.parquet" in by_id[torn]["damage"]
    assert by_id["broken"]["status"] == "damaged" and "manifest" in by_id["broken"]["damage"]
    assert (store / good / ROW_FILE).exists()  # the rebuilt row is kept; damaged ones are built again next time
    assert not (store / torn / ROW_FILE).exists() and not (store / "broken" / ROW_FILE).exists()
    doc = history_json(store, "all")
    assert {e["run"] for e in doc["excluded"]} == {torn, "broken"}


def test_compaction_under_concurrent_writers_keeps_every_row(tmp_path: Path) -> None:
    """Writers ending runs while readers compact: no row is lost, the rows end up in parts."""
    store = tmp_path / "runs"
    ids = [write_run(store, [0.03] + [0.01] * 4, index=False) for _ in range(COMPACT_AT + 8)]
    from tpu_perf.analyzers.index_row import write_index_row

    errors: list[BaseException] = []

    def writer(part: list[str]) -> None:
        try:
            for run_id in part:
                write_index_row(load_run(str(store / run_id)), str(store))
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(3):
                load_index(str(store))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(ids[i::2],)) for i in range(2)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = load_index(str(store))
    assert sorted(r["id"] for r in rows) == sorted(ids) and all(r["status"] == "completed" for r in rows)
    parts, _, _ = read_rows(str(store))  # the compacted parts hold every row
    assert sorted(parts) == sorted(ids)
    assert 1 <= len(list((store / INDEX_DIR).glob("part-*.parquet"))) <= 5


def test_index_on_an_object_store(tmp_path: Path) -> None:
    """memory:// (fsspec's in-process object store): rows are PUT whole, read and compacted alike."""
    store = f"memory://history-{tmp_path.name}/runs"
    ids = write_series(store, [0.020] * 6 + [0.024] * 6, noise=0.01, seed=4)
    rows = load_index(store)
    assert [r["id"] for r in rows] == ids
    [cp] = build_history(rows, order_by="tag:commit").series[0].change_points
    assert cp.at == "c07"


def test_dashboard_history_page_marks_the_change(nightly: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1 import AppTest

    store, _ = nightly
    monkeypatch.setenv("TPU_PERF_STORE", str(store))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_string("from tpu_perf.dashboard.screens import history\nhistory.render()\n", default_timeout=60)
    at.query_params.update({"sel": "tag:commit", "order_by": "tag:commit", "metric": "step_time"})
    at.run()
    assert not at.exception
    [change] = at.dataframe[0].value.to_dict("records")
    assert change["commit range"] in ("c07 → c08", "c08 → c09", "c09 → c10") and change["change"].startswith("+1")
    figure = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [s["x"] for s in figure["data"]][0] == [f"c{i:02d}" for i in range(1, 17)]
    assert any(a["text"].startswith(change["commit range"].replace(" → ", "→")) for a in figure["layout"]["annotations"])
    assert at.query_params["order_by"] == ["tag:commit"] or at.query_params["order_by"] == "tag:commit"


def test_a_noisy_series_states_its_noise_and_smallest_detectable_step(tmp_path: Path) -> None:
    """28 % run-to-run noise hides a +12 % step: no change point, and the output says why in numbers."""
    store = tmp_path / "runs"
    write_series(store, [0.020] * 10 + [0.0224] * 10, noise=0.28, seed=4)
    doc = history_json(store, "tag:commit", "--order-by", "tag:commit")
    [series] = doc["series"]
    assert series["change_points"] == []
    assert series["noise"] == pytest.approx(0.28, rel=0.35)
    assert series["detectable_change"] == pytest.approx(DETECTABLE_STEP[20] * series["noise"])
    assert series["detectable_change"] > 0.12  # the step it missed is below what it could see
    text = tpu_perf_cli("history", "tag:commit", "--order-by", "tag:commit", "--store", str(store), check=True).stdout
    flat = " ".join(text.split())
    assert f"no change point: noise {series['noise'] * 100:.1f} % point to point; the smallest step this series finds 80 % of the time: ±{series['detectable_change'] * 100:.1f} %" in flat
    short = build_history([r for r in load_index(str(store))][:8], order_by="tag:commit").series[0]
    assert short.detectable is None and short.noise is not None  # 8 points: no split can reach p <= 0.01
    for metric in ("all_in", "cpu_step_time"):  # the all-in time and the CPU time per step say the same
        [other] = history_json(store, "tag:commit", "--order-by", "tag:commit", "--metric", metric)["series"]
        assert other["change_points"] == [] and other["noise"] == pytest.approx(0.28, rel=0.35), metric
        text = tpu_perf_cli("history", "tag:commit", "--order-by", "tag:commit", "--metric", metric, "--store", str(store), check=True).stdout
        assert f"no change point: noise {other['noise'] * 100:.1f} % point to point; the smallest step this series finds 80 % of the time: ±{other['detectable_change'] * 100:.1f} %" in " ".join(text.split()), metric


def test_the_detectable_step_table_holds_for_the_detector() -> None:
    """At DETECTABLE_STEP[20] noise units a middle step of 20 points is found about 80 % of the
    time, at half of it mostly not (80 fresh draws each, another seed than bench/history_power.py)."""
    import numpy as np

    rng = np.random.default_rng(99)

    def found(multiple: float) -> float:
        hits = 0
        for _ in range(80):
            x = 1 + rng.normal(0, 0.01, 20)
            x[10:] += multiple * 0.01
            hits += any(abs(i - 10) <= 1 for i, _ in detect(list(x)))
        return hits / 80

    assert 0.65 <= found(DETECTABLE_STEP[20]) <= 0.95
    assert found(DETECTABLE_STEP[20] / 2) < 0.4


def test_dashboard_history_by_start_is_in_time_order_with_named_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two scripts' runs interleaved in time (two series) and a failed run: ordered by start, the
    chart's x-axis is a time axis whose points lie in start order across both series (a category axis
    put series 2's runs after series 1's), each series is named by its script, and the page names the
    run it left out (as `tpu-perf history` does), not only how many."""
    from streamlit.testing.v1 import AppTest

    store = tmp_path / "runs"
    base = 1.8e9
    starts = {}
    for i in range(6):
        script = "train_a.py" if i % 2 == 0 else "train_b.py"
        rid = write_run(store, [0.06, 0.02, 0.02, 0.021], name=f"r{i}", started_at=base + 60 * i, manifest={"script": script, "command": ["python", script]})
        starts[rid] = base + 60 * i
    broken = RunWriter.create(str(store), {"name": "broke", "status": "running", "started_at": base + 400, "frameworks": []})
    broken.finish("failed", 1, warnings=[])
    write_index_row(load_run(broken.url), str(store))
    monkeypatch.setenv("TPU_PERF_STORE", str(store))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path / "cache"))
    at = AppTest.from_string("from tpu_perf.dashboard.screens import history\nhistory.render()\n", default_timeout=60)
    at.run()
    assert not at.exception
    figure = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert figure["layout"]["xaxis"]["type"] == "date"
    names = sorted(t["name"] for t in figure["data"])
    assert [n.split(" · ")[0] for n in names] == ["train_a.py", "train_b.py"], names
    xs = sorted((x, t["name"]) for t in figure["data"] for x in t["x"])
    assert [name.split(" · ")[0] for _, name in xs] == ["train_a.py", "train_b.py"] * 3  # interleaved in time, as recorded
    assert [x[:19] for x, _ in xs] == [time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) for s in sorted(starts.values())]
    left = " ".join(c.value for c in at.caption)
    assert f"1 run(s) left out: broke ({broken.run_id}): status failed" in left, left
