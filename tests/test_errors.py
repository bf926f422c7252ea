"""Errors a user can hit reach them as one line with the documented exit code, never a traceback."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
from conftest import DATA, tpu_perf_cli
from fsspec.registry import known_implementations


def _import(store: Path, name: str) -> str:
    return tpu_perf_cli("import", "--store", str(store), "--name", name, str(DATA / "mi250_minitoy_train.json.gz"), check=True).stdout.strip()


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_a_name_shared_by_runs_lists_them(store: Path) -> None:
    first, second = _import(store, "nightly"), _import(store, "nightly")
    proc = tpu_perf_cli("report", "--store", str(store), "nightly")
    line = _one_line(proc.stderr)
    assert proc.returncode == 3
    assert "2 runs" in line and "named 'nightly'" in line
    for url in (first, second):
        assert Path(url).name in line
    assert "completed" in line  # each run's status is named


def test_a_store_protocol_without_its_package_names_what_to_install(tmp_path: Path) -> None:
    missing = next(p for p, spec in known_implementations.items() if "://" not in p and importlib.util.find_spec(spec["class"].rsplit(".", 2)[0].split(".")[0]) is None and spec.get("err"))
    proc = tpu_perf_cli("ls", "--store", f"{missing}://bucket/runs")
    line = _one_line(proc.stderr)
    assert proc.returncode == 2
    assert f"{missing}://bucket/runs" in line and known_implementations[missing]["err"] in line


def test_a_failure_inside_an_analyzer_is_one_line_and_exit_3(store: Path) -> None:
    url = _import(store, "damaged")
    # A memory table a hand-edit broke: byte counts that are not numbers.
    pd.DataFrame({"time_s": [1.0, 2.0], "device": ["gpu:0", "gpu:0"], "bytes_in_use": ["12 MB", "x"], "peak_bytes": [1.0, 2.0], "limit_bytes": [4.0, 4.0], "source": ["nvml", "nvml"]}).to_parquet(Path(url) / "memory.parquet")
    before = sorted(p.name for p in Path(url).iterdir())
    proc = tpu_perf_cli("report", url)
    line = _one_line(proc.stderr)
    assert proc.returncode == 3, proc.stderr
    assert url in line and "bytes_in_use" in line  # the table's schema check names the column
    assert sorted(p.name for p in Path(url).iterdir()) == before  # the run is left as it was


def test_a_missing_argument_is_a_usage_error_not_a_traceback() -> None:
    proc = tpu_perf_cli("report")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "Missing argument" in proc.stderr
