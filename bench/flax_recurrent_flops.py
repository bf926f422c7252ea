"""FLOPs tpu-perf counts for flax recurrent layers against a hand count of their matmuls.

    PYTHONPATH=. .venv/bin/python bench/flax_recurrent_flops.py [CASE-SUBSTRING ...]

Each case is a small language model's training step (embed -> recurrent layer -> dense head,
softmax cross-entropy, jax.grad), jitted and compiled on this machine. "counted" is what the
recorder adds up for a step: XLA's cost analysis plus the loop bodies' matmuls beyond their first
trip (analyzers/loops.py); "once" is the cost analysis alone. The hand count is the matmuls only,
2 FLOPs per multiply-add, backward twice the forward: 3 x 2 x tokens x (gates x H x (E + H) + H x V).
A ratio near 1 (the elementwise gate work adds a few %) means the recurrence is counted through
its trips; near 1/SEQ of the recurrent share means a scan body counted once.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax import nnx

from tpu_perf.analyzers.hlo import parse_hlo
from tpu_perf.analyzers.loops import loop_flops

VOCAB, EMBED, HIDDEN, SEQ, BATCH = 1000, 96, 128, 35, 20


class LinenLM(nn.Module):
    cell: type
    unrolled: bool = False

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, EMBED)(tokens)
        if self.unrolled:  # a Python loop over time: the cell inlined SEQ times
            cell = self.cell(features=HIDDEN)
            carry = cell.initialize_carry(jax.random.PRNGKey(0), x[:, 0].shape)
            outs = []
            for t in range(SEQ):
                carry, y = cell(carry, x[:, t])
                outs.append(y)
            x = jnp.stack(outs, axis=1)
        else:  # nn.RNN: an nn.scan over time
            x = nn.RNN(self.cell(features=HIDDEN))(x)
        return nn.Dense(VOCAB)(x)


class NnxLM(nnx.Module):
    def __init__(self, cell: type, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(VOCAB, EMBED, rngs=rngs)
        self.rnn = nnx.RNN(cell(EMBED, HIDDEN, rngs=rngs))
        self.head = nnx.Linear(HIDDEN, VOCAB, rngs=rngs)

    def __call__(self, tokens, carry):
        return self.head(self.rnn(self.embed(tokens), initial_carry=carry))


def _counted(step, *args) -> tuple[float, float]:
    compiled = jax.jit(step).lower(*args).compile()
    once = float(compiled.cost_analysis()["flops"])
    return once + loop_flops(parse_hlo(compiled.as_text())).extra_flops, once


def linen_case(cell: type, unrolled: bool) -> tuple[float, float]:
    model = LinenLM(cell=cell, unrolled=unrolled)
    tokens = jnp.arange(BATCH * SEQ, dtype=jnp.int32).reshape(BATCH, SEQ) % VOCAB
    params = model.init(jax.random.PRNGKey(0), tokens)

    def step(params, tokens):
        loss = lambda p: optax.softmax_cross_entropy_with_integer_labels(model.apply(p, tokens), jnp.roll(tokens, -1, 1)).mean()  # noqa: E731
        return jax.grad(loss)(params)

    return _counted(step, params, tokens)


def nnx_case(cell: type) -> tuple[float, float]:
    model = NnxLM(cell, nnx.Rngs(0))
    carry = model.rnn.cell.initialize_carry((BATCH, EMBED), nnx.Rngs(1))  # outside the trace: nnx.RNN's own draws from its Rngs
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tokens = jnp.arange(BATCH * SEQ, dtype=jnp.int32).reshape(BATCH, SEQ) % VOCAB

    def step(params, rest, tokens):
        def loss(p, rest):
            model = nnx.merge(graphdef, p, rest)
            return optax.softmax_cross_entropy_with_integer_labels(model(tokens, carry), jnp.roll(tokens, -1, 1)).mean()

        return jax.grad(loss)(params, rest)

    return _counted(step, params, rest, tokens)


def hand(gates: int) -> float:
    return 3 * 2 * BATCH * SEQ * (gates * HIDDEN * (EMBED + HIDDEN) + HIDDEN * VOCAB)


def main() -> None:
    cases = [
        ("nnx.RNN(nnx.LSTMCell) (scan)", 4, lambda: nnx_case(nnx.LSTMCell)),
        ("nnx.RNN(nnx.GRUCell) (scan)", 3, lambda: nnx_case(nnx.GRUCell)),
        ("linen nn.RNN(nn.LSTMCell) (scan)", 4, lambda: linen_case(nn.LSTMCell, False)),
        ("linen nn.RNN(nn.OptimizedLSTMCell) (scan)", 4, lambda: linen_case(nn.OptimizedLSTMCell, False)),
        ("linen nn.RNN(nn.GRUCell) (scan)", 3, lambda: linen_case(nn.GRUCell, False)),
        ("linen nn.LSTMCell, Python loop over time", 4, lambda: linen_case(nn.LSTMCell, True)),
        ("linen nn.GRUCell, Python loop over time", 3, lambda: linen_case(nn.GRUCell, True)),
    ]
    wanted = sys.argv[1:]  # substrings of case names; all cases when none
    print(f"{'case':45s} {'hand':>12s} {'counted':>12s} {'ratio':>6s} {'once':>12s} {'ratio':>6s}")
    for name, gates, run in cases:
        if wanted and not any(w in name for w in wanted):
            continue
        counted, once = run()
        print(f"{name:45s} {hand(gates):12.4g} {counted:12.4g} {counted / hand(gates):6.3f} {once:12.4g} {once / hand(gates):6.3f}")


if __name__ == "__main__":
    main()
