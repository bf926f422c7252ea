"""The notebook's option parsing is the record command's, and its HTML is the terminal views'
renderables drawn as HTML (no kernel needed here; tests/test_notebook.py runs them in one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Group
from rich.table import Table
from rich.text import Text

import tpu_perf
from tpu_perf.errors import UsageError
from tpu_perf.notebook.html import to_html
from tpu_perf.notebook.magics import record_arguments


def test_cell_magic_options_are_the_record_commands(tmp_path: Path) -> None:
    name, store, tags, options = record_arguments(f"--name a --tag k=v --tag x=y --trace-steps 2:4 --chip v6e --store {tmp_path} -q --topology v6e:2x2")
    assert (name, store, tags) == ("a", str(tmp_path), {"k": "v", "x": "y"})
    recording = tpu_perf.record(name, store, tags=tags, **options)
    assert recording.options.trace_steps == (2, 4)
    assert recording.options.chip == "v6e" and recording.options.topologies == ("v6e:2x2",) and not recording.options.progress
    assert record_arguments("--no-trace")[3]["trace_steps"] is None


@pytest.mark.parametrize("line, words", [
    ("train.py", "unexpected train.py"),
    ("--bogus 3", "No such option: --bogus"),
    ("--repeat 3", "unexpected --repeat"),
    ("--trace-steps 5:2", "--trace-steps '5:2'"),
    ("--chip v99", "--chip 'v99': unknown chip"),
])
def test_cell_magic_rejects_what_record_rejects(line: str, words: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=None) as caught:
        name, store, tags, options = record_arguments(line)
        tpu_perf.record(name, str(tmp_path), tags=tags, **options)
    assert words in str(caught.value)


def test_record_checks_its_options_before_the_block(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown option trace_step; the options are the record command's: trace_steps"):
        tpu_perf.record(store=tmp_path, trace_step=(1, 2))
    with pytest.raises(UsageError, match="--trace-steps '3:3'"):
        tpu_perf.record(store=tmp_path, trace_steps=(3, 3))


def test_recordings_do_not_nest(tmp_path: Path) -> None:
    with tpu_perf.record(name="outer", store=tmp_path, trace_steps=None, quiet=True) as outer:
        with pytest.raises(UsageError, match="already running"):
            with tpu_perf.record(name="inner", store=tmp_path):
                pass
    assert outer.load().status == "completed"
    assert [r.name for r in tpu_perf.list_runs(str(tmp_path))] == ["outer"]


def test_html_keeps_rows_styles_and_escapes() -> None:
    table = Table(title="Steps", show_header=False)
    table.add_column()
    table.add_column()
    table.add_row("step time", "median 1.00 ms <p10>")
    table.add_row("status", Text("failed", style="red"))
    html = to_html(Group(Text("run  ", style="bold"), table))
    assert '<span style="font-weight:600">run  </span>' in html
    assert "<h4>Steps</h4>" in html and '<table class="kv">' in html
    assert "<td>median 1.00 ms &lt;p10&gt;</td>" in html
    assert '<td><span style="color:#c0392b">failed</span></td>' in html


WRAPPED_STEPS = '''
import jax, jax.numpy as jnp, equinox as eqx, optax
from flax import nnx
import tpu_perf

class M(nnx.Module):
    def __init__(self, rngs):
        self.l = nnx.Linear(64, 64, rngs=rngs)
    def __call__(self, x):
        return jnp.tanh(self.l(x))

model = M(nnx.Rngs(0))
opt = nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)

@nnx.jit
def nnx_step(model, opt, x):
    loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
    opt.update(model, grads)
    return loss

lin = eqx.nn.Linear(64, 64, key=jax.random.key(0))

@eqx.filter_jit
def eqx_step(m, x):
    grads = eqx.filter_grad(lambda m: (jax.vmap(m)(x) ** 2).mean())(m)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, m, grads)

steps = {"plain": jax.jit(lambda w, x: (w - 1e-3 * (x.T @ (x @ w)), x))}  # reached through a dict
x = jnp.ones((16, 64))
w = jnp.eye(64)


def make_train(step):  # the step reached through a closure's cell
    def train(w, x, n):
        for _ in range(n):
            w, x = step(w, x)
        return w, x
    return train


train = make_train(jax.jit(lambda w, x: (w * 0.999 + 1e-3 * (x.T @ x), x)))
'''

LOOPS = '''
with tpu_perf.record(name="nnx", store=STORE, trace_steps=None, quiet=True):
    for i in range(8):
        nnx_step(model, opt, x)
with tpu_perf.record(name="eqx", store=STORE, trace_steps=None, quiet=True):
    for i in range(8):
        lin = eqx_step(lin, x)
with tpu_perf.record(name="dict", store=STORE, trace_steps=None, quiet=True):
    for i in range(8):
        w, x = steps["plain"](w, x)
with tpu_perf.record(name="closure", store=STORE, trace_steps=None, quiet=True):
    w, x = train(w, x, 8)
'''


@pytest.mark.slow  # imports flax, equinox and optax (about 15 s on a busy 2-core machine)
def test_wrappers_jitted_before_the_block(tmp_path: Path) -> None:
    """nnx.jit, equinox.filter_jit, a jitted function kept in a dict and one in a closure, made before recording
    (as a notebook's earlier cells would, in one namespace), are found as the step."""
    cell: dict[str, object] = {"STORE": str(tmp_path)}
    exec(WRAPPED_STEPS, cell)
    exec(LOOPS, cell)
    runs = {r.name: r for r in tpu_perf.list_runs(str(tmp_path))}
    assert {name: (r.status, len(r.table("steps")), r.manifest["step_source"]) for name, r in runs.items()} == {
        "nnx": ("completed", 8, "auto:jit(nnx_step)"),
        "eqx": ("completed", 8, "auto:jit(eqx_step)"),
        "dict": ("completed", 8, "auto:jit(<lambda>)"),
        "closure": ("completed", 8, "auto:jit(<lambda>)"),
    }
    assert type(cell["steps"]["plain"]).__name__ == "PjitFunction"  # put back after the block
