"""`tpu_perf.record()` and `%%tpu_perf` in a real Jupyter kernel: steps of functions jitted (and
models built) in earlier cells are found, exceptions propagate, a restart leaves a crashed run.

One kernel for the module (started once; each test runs cells in it, as a user would in order)."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

import tpu_perf
from tests.conftest import ROOT, user_env

pytestmark = pytest.mark.slow


class Kernel:
    """A live IPython kernel; `run(code)` executes one cell and returns its outputs."""

    def __init__(self) -> None:
        env = {**user_env(), "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "JAX_PLATFORMS": "cpu"}
        self.manager, self.client = start_new_kernel(kernel_name="python3", env=env, cwd=str(ROOT))

    def run(self, code: str, *, timeout: float = 240, allow_error: bool = False) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any]] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] in ("stream", "execute_result", "display_data", "error"):
                outputs.append({"type": msg["msg_type"], **msg["content"]})

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=hook)
        self.status = (reply["content"]["status"], reply["content"].get("ename"))
        if not allow_error and reply["content"]["status"] != "ok":
            errors = [o for o in outputs if o["type"] == "error"]
            raise AssertionError(f"cell failed: {errors or reply['content']}\n{code}")
        return outputs

    def value(self, expression: str) -> Any:
        """The JSON value of an expression in the kernel."""
        out = self.run(f"import json as _json; print(_json.dumps({expression}))")
        text = "".join(o["text"] for o in out if o["type"] == "stream" and o["name"] == "stdout")
        return json.loads(text.strip().splitlines()[-1])

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernel() -> Any:
    k = Kernel()
    yield k
    k.close()


@pytest.fixture(scope="module")
def nb_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nb") / "runs"


JAX_STEP = """
import time, statistics
import jax, jax.numpy as jnp
import tpu_perf

@jax.jit
def train_step(w, x):
    for _ in range(6):
        x = jnp.tanh(x @ w)
    return w - 1e-4 * x.mean(), x

w = jnp.full((768, 768), 0.01)
x = jnp.ones((512, 768))
w, x = train_step(w, x)
w.block_until_ready()
"""

JAX_LOOP = """
tops = []
with tpu_perf.record(name="nb", store=STORE) as run:
    for i in range(30):
        tops.append(time.perf_counter())
        w, x = train_step(w, x)
        w.block_until_ready()
    tops.append(time.perf_counter())
own = [b - a for a, b in zip(tops, tops[1:])]
"""


def _steps(run: tpu_perf.Run) -> tuple[int, float | None]:
    from tpu_perf.analyzers.steps import analyze_steps

    stats = analyze_steps(run)
    return stats.count, stats.iteration_median_s


def _steady(run: tpu_perf.Run) -> list[bool]:
    """Which steps the statistics stand on (not warm-up, the trace window or tpu-perf's own work)."""
    from tpu_perf.analyzers.steps import analyze_steps, run_steps, steady_mask

    return steady_mask(run_steps(run), analyze_steps(run).warmup).tolist()


def test_step_jitted_in_an_earlier_cell(kernel: Kernel, nb_store: Path) -> None:
    kernel.run(f"STORE = {str(nb_store)!r}")
    kernel.run(JAX_STEP)
    kernel.run(JAX_LOOP)
    own = kernel.value("own")
    assert kernel.value("type(train_step).__name__") == "PjitFunction"  # put back after the block
    run = tpu_perf.load_run("nb", store=str(nb_store))
    count, median = _steps(run)
    assert run.status == "completed"
    assert count == 30
    # the script's own clock over the same steps (its median over all 30 held the slower traced ones)
    own_steady = statistics.median(t for t, steady in zip(own, _steady(run), strict=True) if steady)
    assert median == pytest.approx(own_steady, rel=0.10), (median, own_steady)
    assert run.manifest["frameworks"] == ["jax"]


def test_cell_magic_records_the_cell(kernel: Kernel, nb_store: Path) -> None:
    kernel.run("%load_ext tpu_perf")
    outputs = kernel.run(f"%%tpu_perf --name nb2 --store {nb_store} --no-trace\nfor i in range(20):\n    w, x = train_step(w, x)\n    w.block_until_ready()\n")
    assert not [o for o in outputs if o["type"] == "error"]
    run = tpu_perf.load_run("nb2", store=str(nb_store))
    assert run.status == "completed"
    assert _steps(run)[0] == 20
    assert run.manifest["command"] == [f"%%tpu_perf --name nb2 --store {nb_store} --no-trace"]
    assert run.manifest["config"]["trace_steps"] is None


def test_line_magic_renders_html(kernel: Kernel, nb_store: Path) -> None:
    outputs = kernel.run(f"%tpu_perf report nb2 --store {nb_store}")
    html = next(o["data"]["text/html"] for o in outputs if o["type"] == "execute_result")
    assert "<table" in html and "Steps" in html and "Advice" in html
    assert "Plotly.newPlot" in html and "<script src=" not in html  # the chart, plotly.js inside (no CDN)
    assert "median" in html and "\x1b[" not in html  # HTML, not terminal escapes
    listed = kernel.run(f"%tpu_perf ls --store {nb_store}")
    listing = next(o["data"]["text/html"] for o in listed if o["type"] == "execute_result")
    assert "nb2" in listing and "completed" in listing
    usage = kernel.run("%tpu_perf nonsense", allow_error=True)
    assert kernel.status == ("error", "UsageError")  # the cell fails, with one line and no traceback
    assert "".join(o.get("text", "") for o in usage).startswith("UsageError: tpu-perf: usage: %tpu_perf {report|advise|check|ls}")
    bad = kernel.run(f"%%tpu_perf --trace-steps 5:2 --store {nb_store}\npass\n", allow_error=True)
    assert kernel.status == ("error", "UsageError")
    assert "".join(o.get("text", "") for o in bad) == "UsageError: tpu-perf: --trace-steps '5:2': expected START:STOP with 0 <= START < STOP\n"


def test_torch_model_built_in_an_earlier_cell(kernel: Kernel, nb_store: Path) -> None:
    kernel.run("""
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data, target = torch.randn(128, 256), torch.randint(0, 10, (128,))
def train_one():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(data), target)
    loss.backward()
    opt.step()
    return loss.item()
train_one()
""")
    kernel.run(f"%%tpu_perf --name torch-nb --store {nb_store} --no-trace\nfor i in range(20):\n    train_one()\n")
    run = tpu_perf.load_run("torch-nb", store=str(nb_store))
    assert run.status == "completed"
    assert _steps(run)[0] == 20
    assert "torch" in run.manifest["frameworks"]


def test_exception_marks_the_run_failed_and_propagates(kernel: Kernel, nb_store: Path) -> None:
    outputs = kernel.run("with tpu_perf.record(name='boom', store=STORE, trace_steps=None):\n    for i in range(3):\n        w, x = train_step(w, x)\n    raise ValueError('bad batch')\n", allow_error=True)
    errors = [o for o in outputs if o["type"] == "error"]
    assert [(e["ename"], e["evalue"]) for e in errors] == [("ValueError", "bad batch")]
    run = tpu_perf.load_run("boom", store=str(nb_store))
    assert run.status == "failed"
    assert "ValueError: bad batch" in run.manifest["error"]["message"]
    outputs = kernel.run(f"%%tpu_perf --name boom2 --no-trace --store {nb_store}\nfor i in range(3):\n    w, x = train_step(w, x)\nraise KeyError('gone')\n", allow_error=True)
    assert [(o["ename"], o["evalue"]) for o in outputs if o["type"] == "error"] == [("KeyError", "'gone'")]
    assert any("raise KeyError('gone')" in line for o in outputs if o["type"] == "error" for line in o["traceback"])  # the cell's own line
    assert tpu_perf.load_run("boom2", store=str(nb_store)).status == "failed"
    # the kernel records again after a failure: the hooks were undone
    kernel.run("with tpu_perf.record(name='again', store=STORE, trace_steps=None):\n    for i in range(5):\n        w, x = train_step(w, x)\n")
    assert _steps(tpu_perf.load_run("again", store=str(nb_store)))[0] == 5


def test_decorator_records_each_call(kernel: Kernel, nb_store: Path) -> None:
    kernel.run("""
@tpu_perf.record(name="deco", store=STORE, trace_steps=None)
def train(n):
    global w, x
    for i in range(n):
        w, x = train_step(w, x)
train(4)
train(6)
""")
    runs = sorted((r for r in tpu_perf.list_runs(str(nb_store)) if r.name == "deco"), key=lambda r: r.started_at)
    assert [(r.status, _steps(r)[0]) for r in runs] == [("completed", 4), ("completed", 6)]


def test_kernel_restart_mid_block_leaves_a_crashed_run(kernel: Kernel, nb_store: Path) -> None:
    """Last in the module: it restarts the shared kernel."""
    kernel.client.execute("with tpu_perf.record(name='restarted', store=STORE, trace_steps=None):\n    for i in range(100000):\n        w, x = train_step(w, x)\n        w.block_until_ready()\n")
    deadline = time.monotonic() + 120
    steps_file = None
    while time.monotonic() < deadline:
        found = [p for p in nb_store.glob("*/steps.jsonl") if json.loads((p.parent / "run.json").read_text()).get("name") == "restarted"]
        if found and len(found[0].read_text().splitlines()) >= 5:
            steps_file = found[0]
            break
        time.sleep(0.2)
    assert steps_file is not None, "the recording wrote no steps"
    kernel.manager.restart_kernel(now=True)
    run = tpu_perf.load_run("restarted", store=str(nb_store))
    assert run.status == "crashed"
    assert _steps(run)[0] >= 5
