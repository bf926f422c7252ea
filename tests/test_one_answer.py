"""Every surface agrees: one run gives one answer.

Over a corpus of real runs (a recompiling run and its fix, a 5-step run, a loop that runs ahead of
the device, a `--repeat 2` pair of groups 3.7x apart, an imported trace, a failed run, a PyTorch run,
a notebook run), each run's headline step time and its basis, tokens/s, MFU, peak memory and program
hash read the same in `report` (text), `report --json`, `ls --json`, `check --json`'s per-run
values, `history --json`, the notebook's handle and view, the dashboard's runs table and its run
page's KPI rows; and for each pair the compare page's Step time delta points the way its verdict does.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA, ROOT, tpu_perf_cli
from tpu_perf.views import format as fmt

pytestmark = pytest.mark.slow

SCRIPTS = ROOT / "tests" / "scripts"
GATE_LOOP = str(SCRIPTS / "gate_loop.py")
FIELDS = ("step_s", "step_basis", "tokens_per_s", "mfu", "peak_memory_bytes", "program_hash")
"""A run's one answer, under `ls --json`'s names (the report's `steps.step_s`, `steps.step_basis`,
`steps.tokens_per_s`, `mfu`, `memory.peak_bytes`, `program_hash`)."""


def answer(doc: dict[str, Any]) -> dict[str, Any]:
    """The answer as `report --json` gives it."""
    steps = doc["steps"]
    return {"step_s": steps["step_s"], "step_basis": steps["step_basis"], "tokens_per_s": steps["tokens_per_s"], "mfu": doc["mfu"],
            "peak_memory_bytes": doc["memory"]["peak_bytes"], "program_hash": doc["program_hash"]}


def record(store: Path, name: str, script: str, *args: str, record_args: tuple[str, ...] = ()) -> None:
    proc = tpu_perf_cli("record", "--store", str(store), "--name", name, "-q", *record_args, script, *args)
    assert proc.returncode == 0 or name == "failed", proc.stderr


def notebook_run(store: Path) -> None:
    """A run recorded with the notebook API in this process (`with tpu_perf.record(...)`)."""
    import tpu_perf

    with tpu_perf.record(name="notebook", store=str(store), tokens_per_step=512):
        for i in range(12):
            tpu_perf.step(i)
            time.sleep(0.004)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    store = tmp_path_factory.mktemp("one-answer") / "runs"
    record(store, "recompiles", str(SCRIPTS / "recompile_bad.py"), record_args=("--tokens-per-step", "4096"))
    record(store, "fixed", str(SCRIPTS / "recompile_fixed.py"), record_args=("--tokens-per-step", "4096"))
    record(store, "ahead", str(ROOT / "examples" / "jax_mlp.py"), "--steps", "40")  # never waits for a step: runs ahead
    record(store, "five", GATE_LOOP, "--steps", "5", "--work", "20", record_args=("--no-trace",))
    for work in ("10", "37"):
        record(store, f"repeat-{work}", GATE_LOOP, "--steps", "16", "--work", work, record_args=("--no-trace", "--repeat", "2", "--tag", f"work={work}"))
    record(store, "failed", str(SCRIPTS / "crash_loop.py"), record_args=("--no-trace",))
    record(store, "torch", str(ROOT / "examples" / "torch_mlp.py"), "--steps", "16", "--batch", "64", "--width", "256", record_args=("--no-trace",))
    tpu_perf_cli("import", "--store", str(store), "--name", "imported", str(DATA / "mi250_minitoy_train.json.gz"), check=True)
    notebook_run(store)
    rows = json.loads(tpu_perf_cli("ls", "--store", str(store), "--json", check=True).stdout)
    docs = {row["id"]: json.loads(tpu_perf_cli("report", row["id"], "--store", str(store), "--json", check=True).stdout) for row in rows}
    return {"store": store, "rows": rows, "docs": docs}


def test_the_corpus_holds_every_kind(corpus: dict[str, Any]) -> None:
    docs = corpus["docs"].values()
    bases = {d["steps"]["step_basis"] for d in docs}
    assert "all-in" in bases and "median iteration" in bases and "device pace" in bases, bases
    by_name = {d["run"]["name"]: d for d in docs}
    assert by_name["recompiles"]["steps"]["step_basis"] == "all-in"  # most of its time recompiles
    assert by_name["five"]["steps"]["step_basis"] == "all-in"  # 5 steps: too few steady ones
    assert by_name["fixed"]["steps"]["step_basis"] == "median iteration"
    assert by_name["ahead"]["steps"]["runs_ahead"]
    assert by_name["failed"]["run"]["status"] == "failed" and by_name["imported"]["run"]["imported"]
    assert by_name["notebook"]["steps"]["tokens_per_s"] == pytest.approx(512 / by_name["notebook"]["steps"]["step_s"])
    assert by_name["fixed"]["program_hash"] and by_name["fixed"]["memory"]["peak_bytes"]


def test_every_report_fits_the_published_schema(corpus: dict[str, Any]) -> None:
    import jsonschema

    from tpu_perf.views.schema import report_schema

    schema = report_schema()
    assert json.loads((ROOT / "docs" / "report-schema.json").read_text()) == json.loads(json.dumps(schema)), "docs/report-schema.json is stale: python -m tpu_perf.views.schema > docs/report-schema.json"
    validator = jsonschema.Draft202012Validator(schema)
    for doc in corpus["docs"].values():
        errors = [f"{'.'.join(map(str, e.path))}: {e.message[:200]}" for e in validator.iter_errors(doc)]
        assert not errors, (doc["run"]["name"], errors[:5])


def test_the_headline_is_the_all_in_time_where_the_steady_sample_cannot_stand_for_the_run(corpus: dict[str, Any]) -> None:
    for doc in corpus["docs"].values():
        s = doc["steps"]
        if s["step_basis"] == "all-in":
            assert s["step_s"] == s["all_in_s"] and s["step_basis_reason"], s
            assert s["steady"] < 5 or s["outside_share"] > 0.25, s
            if s["tokens_per_s"] is not None:  # every rate divides by the headline
                assert s["tokens_per_s"] == pytest.approx(s["tokens_per_step"] / s["all_in_s"])
        else:
            assert s["step_s"] == s["steady_step_s"] and s["step_basis_reason"] is None
            assert s["all_in_s"] is None or (s["steady"] >= 5 and (s["outside_share"] is None or s["outside_share"] <= 0.25)), s  # no all-in time (a 2-step import): the steady one stands
        if s["step_s"] is not None:
            assert s["steps_per_s"] == pytest.approx(1 / s["step_s"])


def test_ls_report_and_the_notebook_agree(corpus: dict[str, Any]) -> None:
    from tpu_perf.notebook.handle import RunHandle, report_view

    store = corpus["store"]
    for row in corpus["rows"]:
        doc = corpus["docs"][row["id"]]
        assert {k: row[k] for k in FIELDS} == answer(doc), row["name"]
        text = tpu_perf_cli("report", row["id"], "--store", str(store), env={"COLUMNS": "200"}, check=True).stdout
        line = next(t for t in text.splitlines() if "step time" in t)
        if doc["steps"]["step_s"] is not None:
            assert fmt.seconds(doc["steps"]["step_s"]) in line and ("all-in" in line) == (doc["steps"]["step_basis"] == "all-in"), (row["name"], line)
        if doc["memory"]["peak_bytes"] is not None:
            assert fmt.bytes_(doc["memory"]["peak_bytes"]) in text
        view = report_view(row["id"], store=str(store), chart=False)
        assert answer(view.data) == answer(doc), row["name"]
        handle = RunHandle(row["id"], doc["run"]["url"], str(store)).summary_line()
        if doc["steps"]["step_s"] is not None:
            assert f"step time {fmt.seconds(doc['steps']['step_s'])}" in handle, handle


def test_check_and_history_read_the_same_values(corpus: dict[str, Any]) -> None:
    store = corpus["store"]
    for row in corpus["rows"]:
        proc = tpu_perf_cli("check", "--store", str(store), "--baseline", row["id"], "--candidate", row["id"], "--json")
        runs = json.loads(proc.stdout)["runs"]
        for side in ("baseline", "candidate"):
            (values,) = runs[side]
            assert {k: values[k] for k in FIELDS} == answer(corpus["docs"][row["id"]]), (row["name"], values)
    by_id = {row["id"]: row for row in corpus["rows"]}
    for metric, key in (("step_time", "step_s"), ("mfu", "mfu"), ("tokens_per_s", "tokens_per_s"), ("peak_memory", "peak_memory_bytes")):
        doc = json.loads(tpu_perf_cli("history", "all", "--store", str(store), "--metric", metric, "--json", check=True).stdout)
        points = [(p["runs"], p["value"]) for s in doc["series"] for p in s["points"]]
        for ids, value in points:
            if len(ids) == 1:
                assert value == by_id[ids[0]][key], (metric, by_id[ids[0]]["name"])
        if metric == "step_time":
            shown = {i for ids, _ in points for i in ids}
            assert {r["id"] for r in corpus["rows"] if r["status"] == "completed" and r["step_s"] is not None} <= shown


def _dashboard(corpus: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_PERF_STORE", str(corpus["store"]))
    monkeypatch.setenv("TPU_PERF_CACHE_DIR", str(tmp_path / "cache"))


def test_the_dashboards_runs_table_and_run_pages_agree(corpus: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_dashboard import kpi_table, page

    _dashboard(corpus, tmp_path, monkeypatch)
    at = page("runs").run()
    assert not at.exception
    table = at.dataframe[0].value.set_index("id")
    for run_id, doc in corpus["docs"].items():
        row, s = table.loc[run_id], doc["steps"]
        assert row["step"] == fmt.seconds(s["step_s"]) + (" all-in" if s["step_basis"] == "all-in" else ""), doc["run"]["name"]
        assert row["peak HBM"] == fmt.bytes_(doc["memory"]["peak_bytes"]) and row["MFU"] == fmt.percent(doc["mfu"])
        assert row["tokens/s"] == ("n/a" if s["tokens_per_s"] is None else f"{s['tokens_per_s']:,.0f}")
    for run_id, doc in corpus["docs"].items():
        at = page("run")
        at.query_params["run"] = run_id
        at.run()
        assert not at.exception
        cells = kpi_table(at)
        name = doc["run"]["name"]
        assert cells[("Step time", name)][0] == fmt.seconds(doc["steps"]["step_s"]) + (" all-in" if doc["steps"]["step_basis"] == "all-in" else ""), name
        assert cells[("Peak HBM", name)][0] == fmt.bytes_(doc["memory"]["peak_bytes"]), name
        assert (cells[("MFU", name)][0] == "n/a") == (doc["mfu"] is None) and (cells[("Tokens/s", name)][0] == "n/a") == (doc["steps"]["tokens_per_s"] is None), name


@pytest.mark.parametrize("pair", [("recompiles", "fixed"), ("repeat-37", "repeat-10")])
def test_the_compare_pages_step_time_delta_points_the_way_of_its_verdict(pair: tuple[str, str], corpus: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_dashboard import kpi_table, page

    _dashboard(corpus, tmp_path, monkeypatch)
    slow, fast = ([i for i, d in corpus["docs"].items() if d["run"]["name"].startswith(name)] for name in pair)
    at = page("compare")
    at.query_params["runs"] = ",".join([*slow, *fast])
    at.run()
    baseline = at.selectbox(key="compare_baseline")
    baseline.set_value(baseline.options[0]).run()  # a slow run as the baseline
    assert not at.exception
    sentence = at.markdown[1].value  # in full, behind its headline
    said = re.search(r"(faster|slower) per step than", sentence)
    assert said and said.group(1) == "faster", sentence  # 3.7x and more apart: the direction is never in doubt
    verdicts = " ".join(e.value for e in (*at.success, *at.error))  # a repeat group's `check` line
    if re.search(r": (REGRESSION|IMPROVEMENT), exit", verdicts):
        # one verdict: the sentence leads with what the check decided (a REGRESSION of another metric heads it)
        assert "No clear winner" not in sentence or sentence.lstrip("*").startswith("REGRESSION in"), (sentence, verdicts)
    cells = kpi_table(at)
    for name in {corpus["docs"][i]["run"]["name"] for i in fast}:
        labels = [label for (kpi, label) in cells if kpi == "Step time" and label.startswith(name)]
        for label in labels:
            delta = cells[("Step time", label)][1] or ""
            assert "▼" in delta, (label, delta, sentence)  # faster: the step time fell
