"""The JAX collector's fetch counter (collectors/jax/jit.py) on a loop that logs one step behind:
fetching the previous call's loss while the latest call runs is no fetch of the latest (the derived
-value rule, a fetch that waited while the call ran, must not take it for one). The decode loops that
fetch through an index, a slice or an op are in test_inference.py."""

from __future__ import annotations

import json

from tests.conftest import ROOT, tpu_perf_cli


def test_a_loss_logged_one_step_behind_is_not_a_fetch_of_the_latest_step(tmp_path) -> None:
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path), str(ROOT / "tests" / "scripts" / "jax_log_behind.py"))
    assert proc.returncode == 0, proc.stderr
    (run,) = [p for p in tmp_path.iterdir() if (p / "run.json").exists()]
    counts = json.loads((run / "run.json").read_text())["jax"]
    assert counts["step_calls"] == 40 and counts["fetched_step_calls"] == 0, counts
