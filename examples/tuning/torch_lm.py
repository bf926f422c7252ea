"""A small transformer LM in PyTorch with torch.compile, written with the defects ported code often has.

Run as it is, the compiled model has two defects; `--fix NAME,...` applies the fixes `tpu-perf
advise` ranks (docs/tuning.md):

- `breaks`: the forward logs a tensor statistic with `.item()` and `print` inside the compiled
  region: Dynamo breaks the graph there                               -> advise id `graph-break`
- `shapes`: each batch is trimmed to a random length, and Dynamo recompiles
  for new lengths (then falls back to dynamic shapes)                  -> `recompilation`

    python examples/tuning/torch_lm.py --steps 20
    tpu-perf record examples/tuning/torch_lm.py --steps 20 && tpu-perf advise torch_lm

`--time-json PATH` writes the wall time per step after the first, like examples/tuning/jax_lm.py.
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

FIXES = ("breaks", "shapes")


class Block(nn.Module):
    def __init__(self, d_model, n_heads, log_stats):
        super().__init__()
        self.n_heads, self.log_stats = n_heads, log_stats
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.up = nn.Linear(d_model, 4 * d_model, bias=False)
        self.down = nn.Linear(4 * d_model, d_model, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d))
        if self.log_stats and x.mean().item() > 1e6:  # the ported sanity check: a graph break in every block
            print("activations exploded")
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class LM(nn.Module):
    def __init__(self, vocab, d_model, n_heads, n_layers, seq, log_stats):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, log_stats) for _ in range(n_layers))
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--fix", default="", help=f"comma-separated fixes to apply: {', '.join(FIXES)}")
    parser.add_argument("--time-json", help="write the wall time per step here")
    args = parser.parse_args()
    fixes = {f for f in args.fix.split(",") if f}
    if fixes - set(FIXES):
        parser.error(f"--fix: unknown {sorted(fixes - set(FIXES))}; choose from {', '.join(FIXES)}")

    torch.manual_seed(0)
    model = LM(args.vocab, args.d_model, 4, args.layers, args.seq, log_stats="breaks" not in fixes)
    forward = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(1)
    start = None
    for step in range(args.steps):
        if step == 1:
            start = time.perf_counter()
        length = args.seq if "shapes" in fixes else int(torch.randint(args.seq // 2, args.seq + 1, (1,), generator=gen)) // 4 * 4
        tokens = torch.randint(0, args.vocab, (args.batch, length + 1), generator=gen)
        loss = F.cross_entropy(forward(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    per_step = (time.perf_counter() - start) / (args.steps - 1)
    print(f"final loss {loss.item():.4f}; {per_step * 1e3:.1f} ms per step")
    if args.time_json:
        with open(args.time_json, "w") as f:
            json.dump({"fixes": sorted(fixes), "steps": args.steps, "per_step_s": per_step}, f)


if __name__ == "__main__":
    main()
