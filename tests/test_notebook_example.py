"""examples/notebook.ipynb executes on a real kernel (nbclient): record, report, advise, change one
thing, record again, compare; every cell runs without an error and shows what it promises."""

from __future__ import annotations

import os
from pathlib import Path

import nbclient
import nbformat
import pytest

import tpu_perf
from tests.conftest import JAX_SET_ENV, ROOT

pytestmark = pytest.mark.slow

NOTEBOOK = ROOT / "examples" / "notebook.ipynb"


def test_example_notebook_executes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "runs"
    monkeypatch.setenv("TPU_PERF_STORE", str(store))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in JAX_SET_ENV:
        monkeypatch.delenv(name, raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the example without outputs"
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    report, advice, check = (next(h for h in html if h.count(title)) for title in ("<h3>tpu-perf report", "<h3>tpu-perf advise", "<h3>tpu-perf check"))
    assert "<h4>Steps</h4>" in report and "Plotly.newPlot" in report
    assert "rules fired" in advice
    assert any(f"tpu-perf check: {v}</h3>" in check for v in ("PASS", "IMPROVEMENT", "REGRESSION", "INCONCLUSIVE", "BAD_DATA"))  # the verdict, inline
    runs = sorted((r.name, r.status, len(r.table("steps"))) for r in tpu_perf.list_runs(str(store)))
    assert runs == [("scan", "completed", 30)] * 2 + [("unrolled", "completed", 30)] * 2
