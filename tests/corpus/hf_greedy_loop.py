"""A greedy decoding loop written by hand over a Hugging Face model, as tutorials write one without
`generate()`: the prompt through the model once (`use_cache=True`), then one token per call with
`past_key_values`, `argmax` of the last logits, under `torch.inference_mode()`. A tiny random Llama
(no download), 4 prompts of 2 rows each, of 10 to 22 tokens, 30 new tokens each.

The script clocks itself: each request's first token (the prefill's argmax), then per token."""

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from truth import write

torch.set_num_threads(1)  # a shared 2-core machine: no thread oversubscription
torch.manual_seed(0)

config = LlamaConfig(vocab_size=2000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
model = LlamaForCausalLM(config).eval()
ROWS, NEW = 2, 30
prompts = [torch.randint(3, config.vocab_size, (ROWS, 10 + 4 * i)) for i in range(4)]


@torch.inference_mode()
def greedy(ids: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, list[float]]:
    stamps = []
    out = model(input_ids=ids, use_cache=True)
    for _ in range(new_tokens):
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        stamps.append(time.perf_counter())
        ids = torch.cat([ids, token], dim=1)
        if len(stamps) < new_tokens:
            out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
    return ids, stamps


ttft, tpot = [], []
began = time.perf_counter()
for prompt in prompts:
    start = time.perf_counter()
    ids, stamps = greedy(prompt, NEW)
    ttft.append(stamps[0] - start)
    tpot.append((stamps[-1] - stamps[0]) / (NEW - 1))
wall = time.perf_counter() - began

weights = sum(p.numel() * p.element_size() for p in model.parameters())
head_dim = config.hidden_size // config.num_attention_heads
mean_prompt = sum(p.shape[1] for p in prompts) / len(prompts)
kv = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4 * ROWS * (mean_prompt + NEW / 2)  # keys and values, fp32, both rows, at the mean decode context
write(requests=ROWS * len(prompts), prompt_tokens=sum(p.numel() for p in prompts), generated_tokens=ROWS * NEW * len(prompts), ttft=ttft, tpot=tpot,
      tokens_per_s=ROWS * NEW * len(prompts) / wall, weight_bytes=weights, kv_bytes=kv)
