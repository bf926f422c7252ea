"""Hugging Face's recipe for faster generation (transformers docs, "static kv cache and
torch.compile"): a static KV cache (`cache_implementation="static"`) and the model's forward
compiled with `torch.compile`, then `generate()` per request. A tiny random Llama, 4 requests of a
16-token prompt, 24 new tokens each, greedy. Compiled with the `eager` backend to keep a CPU test
short: Dynamo traces, guards and recompiles as with inductor, without generating kernels.

The script clocks the wall time of all requests."""

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from truth import write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

REQUESTS, PROMPT, NEW_TOKENS = 4, 16, 24
config = LlamaConfig(vocab_size=800, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=256)
model = LlamaForCausalLM(config).eval()
model.forward = torch.compile(model.forward, backend="eager")

began = time.perf_counter()
for _ in range(REQUESTS):
    ids = torch.randint(1, config.vocab_size, (1, PROMPT))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, cache_implementation="static", pad_token_id=0)
    assert out.shape[1] - PROMPT == NEW_TOKENS
wall = time.perf_counter() - began
write(requests=REQUESTS, prompt_tokens=REQUESTS * PROMPT, generated_tokens=REQUESTS * NEW_TOKENS, tokens_per_s=REQUESTS * NEW_TOKENS / wall)
