"""Loops that stop on data: FLOPs by the trips the trace window saw, not one pass of the body."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, report_doc, tpu_perf_cli

from tpu_perf import load_run
from tpu_perf.analyzers.report import build_report

SCRIPT = ROOT / "tests" / "scripts" / "jax_while_decoder.py"


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("while-decoder")
    truth = tmp / "truth.json"
    proc = tpu_perf_cli("record", "-q", "--store", str(tmp / "runs"), "--trace-steps", "3:6", str(SCRIPT), str(truth))
    assert proc.returncode == 0, proc.stderr
    return next((tmp / "runs").iterdir()), json.loads(truth.read_text())


def test_trips_of_a_data_dependent_loop_are_measured_in_the_trace(decoder: tuple[Path, dict]) -> None:
    """The lm1b-style decoder's while loop runs 40, 48 and 56 times in the traced requests 3-5: the
    FLOPs per step count its matmuls that many times on average, where XLA's analysis counts one."""
    folder, truth = decoder
    flops = build_report(load_run(folder)).to_dict()["flops"]
    traced = truth["iterations"][3:6]
    assert flops["unknown_trip_loops"] == 0
    [(name, trips)] = flops["measured_trips"].items()
    assert name.startswith("predict_step/while") and trips == pytest.approx(np.mean(traced))
    # XLA's once-counted body plus the trips beyond: the matmuls dominate, the rest is its elementwise work
    assert flops["per_step"] == pytest.approx(truth["matmul_flops_per_iteration"] * np.mean(traced), rel=0.1)


def test_the_report_says_how_the_loop_was_counted(decoder: tuple[Path, dict]) -> None:
    folder, truth = decoder
    proc = tpu_perf_cli("report", "--store", str(folder.parent), folder.name)
    assert proc.returncode == 0, proc.stderr
    text = re.sub(r"[│\s]+", " ", proc.stdout)  # the row as read, wherever the table wraps it
    trips = f"{np.mean(truth['iterations'][3:6]):g}"
    assert re.search(rf"predict_step/while[.\d]*: {trips} trips per call, measured in the trace window", text), text


def test_a_request_inside_one_loop_is_a_generation_run(corpus_runs) -> None:
    """flax lm1b's predict_step (tests/corpus/jax_while_predict.py): each call decodes a batch in one
    while_loop; the calls are requests of 4 rows, the measured trips their tokens. The first token is
    not seen apart (TTFT unknown); the time per output token is the call's over its trips; the
    throughput leaves out tpu-perf's own trace start/stop, which the script's clock holds."""
    run = corpus_runs("jax_while_predict")
    truth, doc = run.truth, report_doc(run.dir, run.store)
    i = doc["inference"]
    assert i["source"] == "auto:while-loop" and i["ttft_s"] is None and i["itl_s"] is None
    assert (i["requests"], i["generated_tokens"]) == (truth["requests"], truth["generated_tokens"])
    assert i["tpot_s"]["p50"] == pytest.approx(np.median(truth["tpot"]), rel=0.3)
    script_wall = truth["generated_tokens"] / truth["tokens_per_s"]
    assert i["tokens_per_s"] == pytest.approx(truth["generated_tokens"] / (script_wall - i["own_s"]), rel=0.2)
    assert doc["steps"]["count"] == 12 and "training" not in " ".join(run.manifest.get("warnings") or [])


def test_a_scan_decoder_is_a_generation_run(corpus_runs) -> None:
    """A `generate` that prefills, then samples its new tokens in one `lax.scan` (trips XLA proved:
    tests/corpus/jax_scan_generate.py): each call is a request of 2 rows, 32 tokens each, the first
    sampled after the prefill and the rest one per trip, stacked time-major and transposed."""
    run = corpus_runs("jax_scan_generate")
    truth, doc = run.truth, report_doc(run.dir, run.store)
    i = doc["inference"]
    assert i is not None and i["source"] == "auto:while-loop" and i["ttft_s"] is None
    assert (i["requests"], i["generated_tokens"]) == (truth["requests"], truth["generated_tokens"])
    assert i["tpot_s"]["p50"] == pytest.approx(np.median(truth["tpot"]), rel=0.3)
    script_wall = truth["generated_tokens"] / truth["tokens_per_s"]
    assert i["tokens_per_s"] == pytest.approx(truth["generated_tokens"] / (script_wall - i["own_s"]), rel=0.2)


def test_a_scan_that_feeds_back_no_token_is_not_a_request(tmp_path: Path) -> None:
    """A tagger's scan takes an argmax label per position (tests/scripts/jax_scan_tagger.py) but
    feeds none back: its calls stay steps, not requests."""
    script = ROOT / "tests" / "scripts" / "jax_scan_tagger.py"
    proc = tpu_perf_cli("record", "-q", "--store", str(tmp_path / "runs"), str(script))
    assert proc.returncode == 0, proc.stderr
    folder = next((tmp_path / "runs").iterdir())
    doc = report_doc(folder, tmp_path / "runs")
    assert doc["inference"] is None and doc["steps"]["count"] == 12
