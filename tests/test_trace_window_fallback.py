"""The trace window while no step is known yet (collectors/jax/jit.py `_leads`): the most-called
function's calls open it, as the fallback takes that function as the step at the end of a run with
no carried state (a predict loop: tests/test_corpus.py). When another function turns out to carry
the train state, the window the first one took is dropped and the step's own calls open it again."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, tpu_perf_cli
from tpu_perf import load_run
from tpu_perf.analyzers.report import build_report

pytestmark = pytest.mark.slow  # records a real script in a subprocess


def test_an_eval_before_training_leaves_the_window_to_the_train_step(tmp_path) -> None:
    proc = tpu_perf_cli("record", "-q", "--store", str(tmp_path), str(ROOT / "tests" / "scripts" / "eval_before_train.py"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder,) = [p for p in tmp_path.iterdir() if (p / "run.json").exists()]
    run = load_run(str(folder))
    assert run.steps["source"].unique().tolist() == ["auto:jit(train_step)"] and len(run.steps) == 12
    assert run.steps["traced"].astype(bool).tolist() == [False] * 3 + [True] * 3 + [False] * 6  # the default window, steps 3:6 of train_step
    assert len(list((folder / "trace").rglob("*.xplane.pb"))) == 1  # eval_step's window is gone, not a second capture
    assert build_report(run).to_dict()["breakdown"]["matmul"] > 0
    assert not [w for w in run.manifest["warnings"] if "trace" in w], run.manifest["warnings"]
