"""HLO analysis on real optimized HLO from jax on CPU and on an --xla_dump_to folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tpu_perf.analyzers.hlo import parse_hlo
from tpu_perf.analyzers.hlo_analysis import analyze_hlo, read_dump, tile_for_chip


def _hlo(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


def test_dot_dtypes_flops_and_padding() -> None:
    a32, b32 = jnp.ones((100, 200), jnp.float32), jnp.ones((200, 130), jnp.float32)
    a16, b16 = jnp.ones((128, 256), jnp.bfloat16), jnp.ones((256, 128), jnp.bfloat16)
    text = _hlo(lambda a, b, c, d: (a @ b, c @ d), a32, b32, a16, b16)
    res = analyze_hlo(parse_hlo(text))
    f32 = next(d for d in res.dots if d.m == 100)
    assert (f32.dtype, f32.n, f32.k, f32.flops) == ("f32", 130, 200, 2 * 100 * 130 * 200)
    assert sum(res.dot_flops_share_by_dtype.values()) == pytest.approx(1.0)
    assert sum(res.dot_flops_by_dtype.values()) == sum(d.flops for d in res.dots) >= f32.flops + 2 * 128 * 128 * 256
    assert f32.padding_waste == pytest.approx(1 - (100 * 130 * 200) / (128 * 256 * 256))
    assert tile_for_chip("tpu-v6e") == 256 and tile_for_chip("tpu-v5e") == 128


def test_scan_is_a_while_loop() -> None:
    def f(x):
        return jax.lax.scan(lambda c, _: (jnp.tanh(c @ c), None), x, None, length=5)[0]

    res = analyze_hlo(parse_hlo(_hlo(f, jnp.ones((64, 64)))))
    assert res.while_loops >= 1 and res.dots


@pytest.mark.slow
def test_xla_dump_folder(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        print(jax.jit(lambda a, b: jnp.tanh(a @ b) + 1)(jnp.ones((64, 32)), jnp.ones((32, 16))).sum())
    """))
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path / 'dump'}"}
    subprocess.run([sys.executable, str(script)], check=True, env=env, capture_output=True, timeout=120)
    modules = read_dump(tmp_path / "dump")
    assert modules
    analyses = [analyze_hlo(m) for m in modules.values()]
    assert any(a.dots and a.dots[0].m == 64 and a.dots[0].n == 16 and a.dots[0].k == 32 for a in analyses)
