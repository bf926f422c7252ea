"""Hugging Face `generate()` on a padded batch, sampled several times per prompt: 2 prompts of
different lengths, left-padded to one width with an attention mask (as a tokenizer with
`padding_side="left"` returns them), `do_sample=True, num_return_sequences=3`: each prompt comes
back as 3 sequences, a token each per forward pass. 2 calls, 16 new tokens each, a tiny random GPT-2.

The truth: prompts' real tokens (the mask's ones), the rows returned, and the KV cache a decode
step reads (every returned row holds the padded width plus its tokens)."""

import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from truth import write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

CALLS, PROMPTS, WIDTH, SAMPLES, NEW_TOKENS = 2, 2, 10, 3, 16
config = GPT2Config(vocab_size=500, n_positions=128, n_embd=64, n_layer=2, n_head=4)
model = GPT2LMHeadModel(config).eval()

began, generated, prompt_tokens = time.perf_counter(), 0, 0
for _ in range(CALLS):
    ids = torch.randint(1, config.vocab_size, (PROMPTS, WIDTH))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # the shorter prompt, left-padded
    ids[0, :4] = 0
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=True,
                             num_return_sequences=SAMPLES, pad_token_id=0)
    assert out.shape == (PROMPTS * SAMPLES, WIDTH + NEW_TOKENS)
    generated += out.shape[0] * NEW_TOKENS
    prompt_tokens += int(mask.sum())
wall = time.perf_counter() - began

weights = sum(p.numel() * p.element_size() for p in model.parameters())
kv = PROMPTS * SAMPLES * 2 * config.n_layer * config.n_embd * 4 * (WIDTH + NEW_TOKENS / 2)  # every returned row, at a decode step's mean context
write(requests=CALLS * PROMPTS * SAMPLES, prompt_tokens=prompt_tokens, generated_tokens=generated, tokens_per_s=generated / wall, weight_bytes=weights, kv_bytes=kv)
