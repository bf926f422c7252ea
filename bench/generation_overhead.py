"""The recorder's cost per generated token, measured in one process: blocks of requests run plain
and inside `with tpu_perf.record(...)`, alternating, on the same model.

Three workloads, each about 1 ms a token on a CPU core: `loop`, PyTorch examples'
word_language_model/generate.py as written (an LSTM LM over 5,000 words sampled one word at a time
under `torch.no_grad()`, `.cpu()` per word, no marks: the token loop's hooks find it); `marked`, the
same loop marked with `tpu_perf.request()` / `tpu_perf.token()`; `generate`, Hugging Face
`model.generate()` on a tiny random GPT-2 (the recorder hooks each forward pass: a token).

Each request clocks its own tokens after the first: wall time (`time.perf_counter`) and the loop
thread's CPU time (`time.thread_time`, which other processes on a loaded machine barely move). A
block's figure is the median over its requests; the ratios are the median recorded over the median
plain, and the median of the blocks' paired ratios. Target: <= 1.03 at about 1 ms a token.

`--paired N` measures finer under load: N rounds of two plain requests, a recording holding two
(after one to warm it), two plain again; it prints the median over the rounds of the recorded
requests' thread CPU per token less the plain ones' around them (and the quartiles).

    python bench/generation_overhead.py [--workload loop|marked|generate] [--blocks 8] [--requests 4] [--paired N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
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
VOCAB = 5000
Clocks = tuple[float, float]
"""(wall seconds, thread CPU seconds) per output token after the first, of one request."""


def _since(first: Clocks) -> Clocks:
    return ((time.perf_counter() - first[0]) / (NEW_TOKENS - 1), (time.thread_time() - first[1]) / (NEW_TOKENS - 1))


def hf_generate() -> Callable[[], Clocks]:
    """One generate() request."""
    from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessor, LogitsProcessorList

    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=2, n_head=4)
    model = GPT2LMHeadModel(config).eval()

    class Clock(LogitsProcessor):
        def __init__(self) -> None:
            self.first: Clocks | None = None

        def __call__(self, input_ids, scores):  # noqa: ANN001, ANN204 -- transformers' signature
            self.first = self.first or (time.perf_counter(), time.thread_time())
            return scores

    def one() -> Clocks:
        ids, clock = torch.randint(0, 1000, (1, 16)), Clock()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, logits_processor=LogitsProcessorList([clock]))
        return _since(clock.first)

    return one


class WordLM(torch.nn.Module):
    """word_language_model's RNNModel (LSTM, 200 wide, 2 layers) over VOCAB words."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.rnn, self.decoder = torch.nn.Embedding(VOCAB, 200), torch.nn.LSTM(200, 200, 2), torch.nn.Linear(200, VOCAB)

    def forward(self, input: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        output, hidden = self.rnn(self.encoder(input), hidden)
        return torch.nn.functional.log_softmax(self.decoder(output).view(-1, VOCAB), dim=1), hidden


def word_lm(marked: bool) -> Callable[[], Clocks]:
    """One request of word_language_model/generate.py's sampling loop, marked or as written."""
    model = WordLM().eval()

    def one() -> Clocks:
        with torch.no_grad(), (tpu_perf.request(prompt_tokens=1) if marked else contextlib.nullcontext()):
            input, hidden = torch.randint(VOCAB, (1, 1)), None
            for i in range(NEW_TOKENS):
                output, hidden = model(input, hidden)
                word_weights = output.squeeze().exp().cpu()
                input.fill_(torch.multinomial(word_weights, 1)[0])
                if marked:
                    tpu_perf.token()
                if i == 0:
                    first = (time.perf_counter(), time.thread_time())
        return _since(first)

    return one


def ratios(recorded: list[float], plain: list[float]) -> str:
    ratio = statistics.median(recorded) / statistics.median(plain)
    paired = statistics.median(r / p for r, p in zip(recorded, plain, strict=True))
    return f"{ratio:.3f} (paired blocks {paired:.3f})"


def paired(one: Callable[[], Clocks], rounds: int, workload: str) -> None:
    """Recorded less plain thread CPU per token, per round of plain, recorded, plain requests."""
    diffs, plains = [], []
    with tempfile.TemporaryDirectory() as store:
        for i in range(rounds):
            before = statistics.mean(one()[1] for _ in range(2))
            with tpu_perf.record(f"paired-{i}", store, trace_steps=None, quiet=True):
                one()
                recorded = statistics.mean(one()[1] for _ in range(2))
            plain = (before + statistics.mean(one()[1] for _ in range(2))) / 2
            diffs.append(recorded - plain)
            plains.append(plain)
    q1, median, q3 = statistics.quantiles(diffs, n=4)
    base = statistics.median(plains)
    print(f"loop thread's CPU per token ({workload}, {rounds} rounds, load {os.getloadavg()[0]:.1f}): plain {base * 1e6:.1f} us, "
          f"recorded - plain {statistics.median(diffs) * 1e6:+.1f} us (quartiles {q1 * 1e6:+.1f} .. {q3 * 1e6:+.1f}), "
          f"ratio {1 + statistics.median(diffs) / base:.4f}; target <= 1.03 at about 1 ms a token")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("loop", "marked", "generate"), default="loop")
    parser.add_argument("--blocks", type=int, default=8, help="blocks per arm, alternating")
    parser.add_argument("--requests", type=int, default=4, help="requests per block")
    parser.add_argument("--paired", type=int, metavar="N", help="instead: N rounds of plain, recorded, plain requests (thread CPU)")
    args = parser.parse_args()
    one = hf_generate() if args.workload == "generate" else word_lm(marked=args.workload == "marked")
    one()  # warm-up
    if args.paired:
        paired(one, args.paired, args.workload)
        return
    wall: dict[str, list[float]] = {"plain": [], "record": []}
    cpu: dict[str, list[float]] = {"plain": [], "record": []}
    with tempfile.TemporaryDirectory() as store:
        for i in range(2 * args.blocks):
            arm = "record" if (i % 2) ^ (i // 2 % 2) else "plain"  # plain, record, record, plain, ...
            block = tpu_perf.record(f"bench-{i}", store, trace_steps=None, quiet=True) if arm == "record" else contextlib.nullcontext()
            with block:
                clocks = [one() for _ in range(args.requests)]
            wall[arm].append(statistics.median(c[0] for c in clocks))
            cpu[arm].append(statistics.median(c[1] for c in clocks))
            print(f"block {i:2d} {arm:6s} {wall[arm][-1] * 1e3:.3f} ms/token, CPU {cpu[arm][-1] * 1e3:.3f} ms/token")
    print(f"median TPOT: plain {statistics.median(wall['plain']) * 1e3:.3f} ms, record {statistics.median(wall['record']) * 1e3:.3f} ms; "
          f"loop thread's CPU per token: plain {statistics.median(cpu['plain']) * 1e6:.1f} us, record {statistics.median(cpu['record']) * 1e6:.1f} us")
    print(f"ratio record/plain per generated token ({args.workload}, load {os.getloadavg()[0]:.1f}): wall {ratios(wall['record'], wall['plain'])}, "
          f"CPU {ratios(cpu['record'], cpu['plain'])}; target <= 1.03 at about 1 ms a token")


if __name__ == "__main__":
    main()
