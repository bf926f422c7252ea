"""Hugging Face `generate()` as the transformers docs write it: a causal LM, a tokenized prompt,
`model.generate(**inputs, max_new_tokens=...)`, greedy. The model is a tiny random GPT-2 built from
its config (no download), 8 requests of one prompt each, 48 new tokens each.

The script clocks itself with a logits processor (called once per new token, right after the
forward pass that made the token's logits): each request's time to first token, its time per output
token after the first, and the wall time of all requests."""

import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LogitsProcessor, LogitsProcessorList
from truth import write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

REQUESTS, NEW_TOKENS, PROMPT = 8, 48, 16
config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=2, n_head=4)
model = GPT2LMHeadModel(config).eval()


class TokenClock(LogitsProcessor):
    """Stamps each new token's logits as they reach the sampler."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


ttft, tpot = [], []
began = time.perf_counter()
for _ in range(REQUESTS):
    inputs = {"input_ids": torch.randint(0, config.vocab_size, (1, PROMPT)), "attention_mask": torch.ones(1, PROMPT, dtype=torch.long)}
    clock = TokenClock()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, logits_processor=LogitsProcessorList([clock]), pad_token_id=0)
    end = time.perf_counter()
    assert out.shape[1] - PROMPT == NEW_TOKENS
    ttft.append(clock.times[0] - start)
    tpot.append((end - clock.times[0]) / (NEW_TOKENS - 1))
wall = time.perf_counter() - began

weights = sum(p.numel() * p.element_size() for p in model.parameters())
kv = 2 * config.n_layer * config.n_embd * 4 * (PROMPT + NEW_TOKENS / 2)  # keys and values, fp32, at a decode step's mean context
write(requests=REQUESTS, prompt_tokens=REQUESTS * PROMPT, generated_tokens=REQUESTS * NEW_TOKENS, ttft=ttft, tpot=tpot, tokens_per_s=REQUESTS * NEW_TOKENS / wall, weight_bytes=weights, kv_bytes=kv)
