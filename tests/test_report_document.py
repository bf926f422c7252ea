"""The report is one typed document with one JSON boundary: the same JSON whatever the import
order, no NaN ever, unknown numbers as null."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import DATA, ROOT, tpu_perf_cli

from tpu_perf import load_run
from tpu_perf.analyzers.report import Report, build_report
from tpu_perf.jsonio import dumps, dumps_lines

MODULES = ("tpu_perf.analyzers.traces", "tpu_perf.analyzers.runtime", "tpu_perf.analyzers.torch_compile", "tpu_perf.analyzers.aot", "tpu_perf.views.report", "tpu_perf.analyzers.report")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> str:
    store = tmp_path_factory.mktemp("doc") / "runs"
    return tpu_perf_cli("import", "--store", str(store), str(DATA / "mi250_minitoy_train.json.gz"), check=True).stdout.strip()


def _json_after_imports(url: str, order: tuple[str, ...]) -> str:
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in order) + (
        "from tpu_perf import load_run\nfrom tpu_perf.analyzers.report import build_report\n"
        f"sys.stdout.write(build_report(load_run({url!r})).to_json())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_json_is_the_same_whatever_the_import_order(imported: str) -> None:
    forward = _json_after_imports(imported, MODULES)
    backward = _json_after_imports(imported, tuple(reversed(MODULES)))
    assert forward == backward
    assert list(json.loads(forward)) == list(build_report(load_run(imported)).to_dict())  # key order too


def test_a_missing_step_duration_is_null_not_nan(imported: str, tmp_path: Path) -> None:
    run = load_run(imported)
    steps = run.steps.copy()
    steps["duration_s"] = float("nan")  # a run whose steps were written without a duration
    folder = tmp_path / Path(imported).name
    folder.mkdir()
    for f in Path(imported).iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    steps.to_parquet(folder / "steps.parquet")
    text = tpu_perf_cli("report", "--json", str(folder), check=True).stdout
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    assert doc["steps"]["iteration_median_s"] is None and doc["steps"]["steps_per_s"] is None
    assert doc["steps"]["count"] == len(steps)


def test_report_is_frozen_and_its_json_refuses_nan(imported: str) -> None:
    report = build_report(load_run(imported))
    assert isinstance(report, Report)
    with pytest.raises(AttributeError):
        report.steps = None  # type: ignore[misc]
    assert json.loads(dumps({"x": math.nan, "y": [math.inf], "z": pd.NA})) == {"x": None, "y": [None], "z": None}


def test_imported_runs_have_unknown_compiles_not_zero(imported: str) -> None:
    doc = build_report(load_run(imported)).to_dict()
    assert doc["compile"]["count"] is None and doc["compile"]["total_s"] is None
    text = tpu_perf_cli("report", imported, env={"COLUMNS": "200"}, check=True).stdout
    assert "n/a (an imported trace carries no compile events)" in text
    assert "0.0 µs" not in text


def test_json_lines_hold_the_same_values_as_the_indented_json() -> None:
    import numpy as np

    rows = [{"id": "a", "v": float("nan"), "n": np.float64(0.5), "k": np.int64(3), "tags": {"commit": "c01", "who": "Zoë"}, "none": None}, {"id": "b", "list": (1, 2.5, float("inf"))}]
    text = dumps_lines(rows)
    assert json.loads(text) == json.loads(dumps(rows)) == [{"id": "a", "v": None, "n": 0.5, "k": 3, "tags": {"commit": "c01", "who": "Zoë"}, "none": None}, {"id": "b", "list": [1, 2.5, None]}]
    assert text.splitlines()[1] == '  {"id": "a", "v": null, "n": 0.5, "k": 3, "tags": {"commit": "c01", "who": "Zo\\u00eb"}, "none": null},'  # one record a line, ASCII as dumps writes it
    assert dumps_lines([]) == "[]"
