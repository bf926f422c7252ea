"""The recorder's cost per generated token, measured in one process: blocks of requests run plain
and inside `with tpu_perf.record(...)`, alternating, on the same model.

Two workloads: `generate`, Hugging Face `model.generate()` on a tiny random GPT-2 (the recorder hooks
each forward pass: a token); `marked`, PyTorch examples' word_language_model sampling loop (a small
LSTM fed one word at a time, about 1 ms a token here) marked with `tpu_perf.request()` and
`tpu_perf.token()`. Each block times its own requests (time per output token after the first,
`time.perf_counter`); the ratio is the median recorded TPOT over the median plain TPOT, and the
median of the blocks' paired ratios. Target: <= 1.03 at about 1 ms a token.

    python bench/generation_overhead.py [--workload marked|generate] [--blocks 8] [--requests 4]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tpu_perf  # noqa: E402

torch.set_num_threads(1)
NEW_TOKENS = 48


def hf_generate() -> Callable[[], float]:
    """One generate() request; returns its time per output token after the first."""
    from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessor, LogitsProcessorList

    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config).eval()

    class Clock(LogitsProcessor):
        def __init__(self) -> None:
            self.first: float | None = None

        def __call__(self, input_ids, scores):  # noqa: ANN001, ANN204 -- transformers' signature
            self.first = self.first or time.perf_counter()
            return scores

    def one() -> float:
        ids, clock = torch.randint(0, 1000, (1, 16)), Clock()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, logits_processor=LogitsProcessorList([clock]))
        return (time.perf_counter() - clock.first) / (NEW_TOKENS - 1)

    return one


def marked_lstm() -> Callable[[], float]:
    """One word_language_model-style sampling request, marked; returns its time per output token."""
    encoder, rnn, decoder = torch.nn.Embedding(2000, 128), torch.nn.LSTM(128, 128, 2), torch.nn.Linear(128, 2000)

    def one() -> float:
        with torch.no_grad(), tpu_perf.request(prompt_tokens=1):
            word, hidden = torch.randint(2000, (1, 1)), None
            for i in range(NEW_TOKENS):
                output, hidden = rnn(encoder(word), hidden)
                word = torch.multinomial(decoder(output[-1]).exp(), 1).view(1, 1)
                tpu_perf.token()
                if i == 0:
                    first = time.perf_counter()
        return (time.perf_counter() - first) / (NEW_TOKENS - 1)

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("marked", "generate"), default="marked")
    parser.add_argument("--blocks", type=int, default=8, help="blocks per arm, alternating")
    parser.add_argument("--requests", type=int, default=4, help="requests per block")
    args = parser.parse_args()
    one = marked_lstm() if args.workload == "marked" else hf_generate()
    one()  # warm-up
    plain, recorded = [], []
    with tempfile.TemporaryDirectory() as store:
        for i in range(2 * args.blocks):
            arm = "record" if (i % 2) ^ (i // 2 % 2) else "plain"  # plain, record, record, plain, ...
            block = tpu_perf.record(f"bench-{i}", store, trace_steps=None, quiet=True) if arm == "record" else contextlib.nullcontext()
            with block:
                tpots = [one() for _ in range(args.requests)]
            (recorded if arm == "record" else plain).append(statistics.median(tpots))
            print(f"block {i:2d} {arm:6s} {statistics.median(tpots) * 1e3:.3f} ms/token")
    ratio = statistics.median(recorded) / statistics.median(plain)
    paired = statistics.median(r / p for r, p in zip(recorded, plain, strict=True))
    print(f"median TPOT: plain {statistics.median(plain) * 1e3:.3f} ms, record {statistics.median(recorded) * 1e3:.3f} ms")
    print(f"ratio record/plain per generated token ({args.workload}): {ratio:.3f} (median of paired blocks {paired:.3f}; target <= 1.03 at about 1 ms a token)")


if __name__ == "__main__":
    main()
