"""Eager token loops recorded unchanged (collectors/torch/token_loop.py): PyTorch examples'
word_language_model/generate.py, an unmarked server over its LSTM (sequence-first prompts) and a
hand-written greedy loop over a Hugging Face model with its KV cache, none calling generate() or
marking anything, read as generation runs that match the scripts' own clocks; a training script's
evaluations under no_grad do not."""

from __future__ import annotations

import statistics

import pytest

from tests.conftest import ROOT, report_doc, tpu_perf_cli


def near(value: float | None, truth: float, tolerance: float) -> bool:
    return value is not None and abs(value - truth) <= tolerance * truth


@pytest.mark.parametrize("name", ["torch_word_lm_generate", "hf_greedy_loop", "hf_greedy_one_row", "torch_rnn_server"])
def test_an_eager_token_loop_is_a_generation_run(corpus_runs, name: str) -> None:
    run = corpus_runs(name)
    truth, doc = run.truth, report_doc(run.dir, run.store)
    i = doc["inference"]
    assert i is not None, name
    assert i["source"] == "auto:token-loop", i["source"]
    assert (i["requests"], i["prompt_tokens"], i["generated_tokens"]) == (truth["requests"], truth["prompt_tokens"], truth["generated_tokens"])
    assert near(i["ttft_s"]["p50"], statistics.median(truth["ttft"]), 0.30), (i["ttft_s"], truth["ttft"])
    assert near(i["tpot_s"]["p50"], statistics.median(truth["tpot"]), 0.30), (i["tpot_s"], truth["tpot"])
    assert near(i["tokens_per_s"], truth["tokens_per_s"], 0.20), (i["tokens_per_s"], truth["tokens_per_s"])
    assert near(i["decode_bytes_per_step"], truth["weight_bytes"] + truth["kv_bytes"], 0.15), (i["decode_bytes_per_step"], truth)
    warnings = " ".join(run.manifest.get("warnings") or [])
    assert "training" not in warnings, warnings


def test_evaluations_of_a_training_run_are_not_requests(tmp_path) -> None:
    script = ROOT / "tests" / "torch_scripts" / "lm_train_eval.py"
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path), str(script))
    assert proc.returncode == 0, proc.stderr
    (run,) = [p for p in tmp_path.iterdir() if (p / "run.json").exists()]
    doc = report_doc(run, tmp_path)
    assert doc["steps"]["count"] == 15 and doc["inference"] is None
