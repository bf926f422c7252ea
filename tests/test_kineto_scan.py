"""The streamed Kineto reader gives the same tables whatever the JSON layout, window size or decoder.

Real traces (tests/data and the shared V100 capture) are re-serialised minified, indented, gzipped and
with the header after the events; each must give the tables of the original file. Hostile strings
(event boundaries, quotes and backslashes inside names) and values msgspec refuses (NaN, float pids)
must read as the standard library reads them.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import DATA
from tpu_perf.errors import DataError
from tpu_perf.traces import kineto_scan
from tpu_perf.traces.kineto import read_kineto

V100 = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kineto" / "v100_train_rank0.pt.trace.json.gz"  # beside the checkout
FIXTURES = [DATA / "a100_alexnet.json.gz", DATA / "mi250_minitoy_train.json.gz", DATA / "cpu_only_rank34.pt.trace.json.gz"]
FIXTURES += [V100] if V100.exists() or os.environ.get("CI") else []  # CI has ../shared: a missing file fails there
TABLES = ("ops", "timeline", "device_steps", "devices")


def _same(a, b) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=False, rtol=1e-12)
    assert (a.platform, a.format) == (b.platform, b.format)


def _layouts(doc: dict, tmp: Path) -> list[Path]:
    events_last = {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": doc["traceEvents"]}
    events_first = {"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}}
    out = {
        "min.json": json.dumps(events_last, separators=(",", ":")),
        "indent.json": json.dumps(events_first, indent=4),
        "crlf.json": json.dumps(events_last, indent="\t").replace("\n", "\r\n"),
        "ascii.json": json.dumps(events_last, ensure_ascii=True, separators=(", ", " : ")),
    }
    paths = []
    for name, text in out.items():
        p = tmp / name
        p.write_text(text, encoding="utf-8")
        paths.append(p)
    gz = tmp / "min.json.gz"
    gz.write_bytes(gzip.compress(out["min.json"].encode()))
    return [*paths, gz]


@pytest.mark.parametrize("trace", FIXTURES, ids=lambda p: p.name)
def test_any_layout_gives_the_same_tables(trace: Path, tmp_path: Path, monkeypatch) -> None:
    original = read_kineto(trace)
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    for path in _layouts(doc, tmp_path):
        for window in (4096, 1 << 22):  # many windows (boundaries cut everywhere) and one
            monkeypatch.setattr(kineto_scan, "WINDOW_BYTES", window)
            _same(read_kineto(path), original)
    monkeypatch.setattr(kineto_scan, "FAST_DECODE", False)  # the standard library on every window
    _same(read_kineto(tmp_path / "min.json"), original)


def _hostile_doc() -> dict:
    events = []
    tricky = ['a}, {"ph": "X", "name": "fake"}', 'quote \\" and }, {', "brace } , { in name", "tab\tback\\slash\\", "uni \u00e9\u4e2d\U0001f600", "]"]
    for i in range(400):
        name = tricky[i % len(tricky)] + f" #{i % 7}"
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": 10.0 * i, "dur": 4.0,
                       "args": {"note": "}, {", "nested": [{"a": [1, {"b": "}, {"}]}]}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "float pid", "pid": 1.5, "tid": "main", "ts": 5000, "dur": 1})
    events.append({"ph": "X", "cat": "kernel_like", "name": "string device", "pid": 1, "tid": 2, "ts": 6000, "dur": 1, "args": {"device": "3"}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "args not a dict", "pid": 1, "tid": 2, "ts": 7000, "dur": 2, "args": [1, 2]})
    events.append({"ph": "X", "cat": "cpu_op", "name": "null dur", "pid": 1, "tid": 2, "ts": 8000, "dur": None})
    events.append({"ph": "i", "name": "instant", "pid": 1, "tid": 2, "ts": 9000})
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 2, "ts": 0, "dur": 9000})
    return {"schemaVersion": 1, "traceEvents": events, "traceName": "hostile } , {"}


def test_hostile_strings_and_types_read_as_the_stdlib_reads_them(tmp_path: Path, monkeypatch) -> None:
    doc = _hostile_doc()
    text = json.dumps(doc, separators=(",", ":")).replace('"ts":8000', '"ts":NaN', 1)  # NaN: only the stdlib reads it
    path = tmp_path / "hostile.json"
    path.write_text(text, encoding="utf-8")
    reference = json.loads(text)["traceEvents"]
    # an event whose start is NaN is dropped with a warning (issue 29: never summarised)
    expected = Counter(e["name"] for e in reference if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "cpu_op" and math.isfinite(e["ts"]))
    assert "null dur" not in expected
    results = []
    for window, fast in ((64, True), (1024, True), (1 << 22, True), (1024, False)):
        monkeypatch.setattr(kineto_scan, "WINDOW_BYTES", window)
        monkeypatch.setattr(kineto_scan, "FAST_DECODE", fast)
        tables = read_kineto(path)
        ops = tables.ops.set_index("name")["occurrences"]
        assert ops.to_dict() == dict(expected)
        assert tables.device_steps["step_num"].tolist() == [7]
        results.append(tables)
    for other in results[1:]:
        _same(other, results[0])
    header, cols = kineto_scan.scan(path)
    assert header["traceName"] == "hostile } , {" and "fake" not in cols["name"]
    assert {str(p) for p in cols["pid"]} == {"1", "1.5"}  # the float pid's window read by the stdlib


@pytest.mark.parametrize("window", [64, 1 << 22])
@pytest.mark.parametrize("cut", [0.3, 0.9, 0.999])
def test_truncated_anywhere_is_a_one_line_data_error(tmp_path: Path, monkeypatch, window: int, cut: float) -> None:
    monkeypatch.setattr(kineto_scan, "WINDOW_BYTES", window)
    data = json.dumps(_hostile_doc(), indent=1).encode()
    bad = tmp_path / "cut.json"
    bad.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(DataError, match="cut.json"):
        read_kineto(bad)
