"""The greedy loop most tutorials write for one prompt at a time: a GPT-2 called on the tokenized
prompt (batch-first, one row: shape (1, P)), then on each new token with `past_key_values`, the
token fetched with `.item()` to print or stop on. A tiny random GPT-2 (no download), 5 prompts of
8 to 24 tokens, 24 new tokens each, under `torch.no_grad()`.

The script clocks itself: each request's first token (the prefill's argmax fetched), then per token."""

import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from truth import write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=2, n_head=4)
model = GPT2LMHeadModel(config).eval()
NEW = 24
prompts = [torch.randint(0, config.vocab_size, (1, 8 + 4 * i)) for i in range(5)]

ttft, tpot, words = [], [], []
began = time.perf_counter()
for ids in prompts:
    start = time.perf_counter()
    with torch.no_grad():
        out = model(ids, use_cache=True)
        for n in range(NEW):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            words.append(token.item())
            if n == 0:
                first = time.perf_counter()
            if n < NEW - 1:
                out = model(token, past_key_values=out.past_key_values, use_cache=True)
    end = time.perf_counter()
    ttft.append(first - start)
    tpot.append((end - first) / (NEW - 1))
wall = time.perf_counter() - began

weights = sum(p.numel() * p.element_size() for p in model.parameters())
mean_context = sum(p.shape[1] for p in prompts) / len(prompts) + NEW / 2
kv = 2 * config.n_layer * config.n_embd * 4 * mean_context  # keys and values, fp32, at a decode step's mean context
write(requests=len(prompts), prompt_tokens=sum(p.shape[1] for p in prompts), generated_tokens=len(prompts) * NEW, ttft=ttft, tpot=tpot,
      tokens_per_s=len(prompts) * NEW / wall, weight_bytes=weights, kv_bytes=kv)
