"""A small decoder-only transformer language model (CPU-sized) trained with AdamW on random tokens.

No tpu-perf marks: record it as it is. `--attention sdpa` uses F.scaled_dot_product_attention,
`--attention manual` writes attention out (softmax(QK^T/sqrt(d)) V with a causal mask).

    python examples/torch_transformer.py --steps 30
    tpu-perf record examples/torch_transformer.py --steps 30
"""

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d_model, n_heads, attention):
        super().__init__()
        self.n_heads = n_heads
        self.attention = attention
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.ln2 = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, 4 * d_model, bias=False)
        self.down = nn.Linear(4 * d_model, d_model, bias=False)

    def attend(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.attention == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            out = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, s, d))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class DecoderLM(nn.Module):
    def __init__(self, vocab, d_model, n_heads, n_layers, seq, attention):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, attention) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = DecoderLM(args.vocab, args.d_model, args.heads, args.layers, args.seq, args.attention)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    forward = torch.compile(model) if args.compile else model
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
    for step in range(args.steps):
        inputs, targets = data[:, :-1], data[:, 1:]
        logits = forward(inputs)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
