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


def test_the_token_loop_wraps_the_model_alone_and_leaves_marked_requests_to_the_marks(tmp_path) -> None:
    """Per token the loop pays for one wrapper around the model's class's forward (no module hooks,
    which send every call through torch's slow path), put back when the block ends; a copy of the
    model made in the block runs its own weights. A model with a forward of its own (as accelerate
    sets) is hooked instead, keeps that forward and can be copied too. A block that finds itself in a marked request
    drops its hooks at once: the marks count those tokens, the loop none."""
    import copy

    import torch

    import tpu_perf
    from tpu_perf.store import load_run

    hooks = torch.nn.modules.module

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.head(self.embed(ids))

    defined = Tiny.__dict__["forward"]
    model, own = Tiny().eval(), Tiny().eval()
    own_forward = own.forward
    scripts_own = vars(own)["forward"] = lambda ids: own_forward(ids)  # noqa: PLW0108 -- a forward set on the instance, as accelerate's hooks do
    seen, copies = [], []
    with tpu_perf.record("loop", tmp_path / "runs", trace_steps=None, quiet=True) as handle:
        for m in (model, own):
            with torch.no_grad():
                ids = torch.randint(50, (2, 6))
                for _ in range(5):  # a prefill of 6 positions, then 4 decode calls of one each
                    ids = m(ids)[:, -1:].argmax(-1)
                    seen.append((Tiny.__dict__["forward"] is not defined, bool(hooks._global_forward_hooks or m.embed._forward_hooks), bool(m._forward_hooks)))
                twin = copy.deepcopy(m)
                torch.nn.init.zeros_(twin.head.weight), torch.nn.init.zeros_(twin.head.bias)
                copies.append((float(twin(ids).abs().sum()), float(m(ids).abs().sum())))
            assert Tiny.__dict__["forward"] is defined and not model._forward_hooks and vars(own)["forward"] is scripts_own
        with torch.no_grad(), tpu_perf.request(prompt_tokens=3):
            for _ in range(4):
                model(torch.randint(50, (1, 1)))
                tpu_perf.token()
                seen.append(bool(hooks._global_forward_hooks or hooks._global_forward_pre_hooks or model._forward_hooks or Tiny.__dict__["forward"] is not defined))
    assert seen[:5] == [(True, False, False)] * 5 and seen[5:10] == [(False, False, True)] * 5 and seen[10:] == [False] * 4, seen
    assert copies[0][0] == 0.0 < copies[0][1], copies  # (the script's own lambda forward goes with a copy of `own` as it is: its business)
    requests = load_run(str(handle.folder)).table("requests").sort_values("request")
    assert requests["source"].tolist() == ["auto:token-loop", "auto:token-loop", "explicit"], requests
    assert requests["generated_tokens"].tolist() == [12, 12, 4] and requests["prompt_tokens"].tolist()[:2] == [12, 12]  # 2 rows x 6 calls (the copy's not counted)
