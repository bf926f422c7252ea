"""A two-slot JAX server marked with tpu_perf.request()/token(): each slot is a thread serving its
own requests, and the device runs one program at a time (a lock around every call, as a TPU runs
its queue). Slot A decodes long answers to short prompts; slot B brings long prompts (1024 tokens)
for short answers, and each of its prefills runs between two of slot A's decode steps: A's next
token waits for the whole prompt. Each slot feeds its decode step the device array the last call
returned (streaming a copy of each token to the host), so the decode step is found as the step
(it consumes its own outputs) and its prefills as restarts beside the marks: the marks are the
requests. Writes, to the JSON file named by argv[1], the gaps between A's
tokens that held one of B's prefills and their time: what tpu-perf's stall count is checked against."""

import json
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

import tpu_perf

VOCAB, D, LAYERS = 512, 256, 2
device = threading.Lock()
keys = jax.random.split(jax.random.PRNGKey(0), 1 + LAYERS)
params = {"embed": jax.random.normal(keys[0], (VOCAB, D)) / 8, "layers": [jax.random.normal(k, (D, D)) / 8 for k in keys[1:]]}


@jax.jit
def prefill(params, prompt):  # the whole prompt, every position through every layer
    x = params["embed"][prompt]
    for w in params["layers"]:
        x = x + jnp.tanh(x @ w) @ w.T
    return jnp.argmax(x[:, -1] @ params["embed"].T, axis=-1)


@jax.jit
def decode_step(params, token):
    x = params["embed"][token]
    for w in params["layers"]:
        x = x + jnp.tanh(x @ w) @ w.T
    return jnp.argmax(x @ params["embed"].T, axis=-1)


def call(fn, *args):
    with device:
        out = fn(*args)
        np.asarray(out)  # the sampled token, streamed
        return out


prefills: list[tuple[float, float]] = []
a_tokens: list[list[float]] = []
a_done = threading.Event()


def slot_a(requests: int, prompt: int, new: int) -> None:
    rng = np.random.default_rng(1)
    for _ in range(requests):
        with tpu_perf.request(prompt_tokens=prompt):
            token = call(prefill, params, jnp.asarray(rng.integers(0, VOCAB, (1, prompt))))
            tpu_perf.token()
            a_tokens.append([time.perf_counter()])
            for _ in range(new - 1):
                time.sleep(0.0005)  # the host's work between tokens (sampling, streaming): the other slot's turn
                token = call(decode_step, params, token)
                tpu_perf.token()
                a_tokens[-1].append(time.perf_counter())
    a_done.set()


def slot_b(prompt: int, new: int) -> None:
    rng = np.random.default_rng(2)
    while not a_done.is_set():
        time.sleep(0.02)  # a request arrives
        if a_done.is_set():
            break
        with tpu_perf.request(prompt_tokens=prompt):
            began = time.perf_counter()
            token = call(prefill, params, jnp.asarray(rng.integers(0, VOCAB, (1, prompt))))
            prefills.append((began, time.perf_counter()))
            tpu_perf.token()
            for _ in range(new - 1):
                time.sleep(0.0005)
                token = call(decode_step, params, token)
                tpu_perf.token()


call(prefill, params, jnp.zeros((1, 16), jnp.int32)), call(prefill, params, jnp.zeros((1, 1024), jnp.int32)), call(decode_step, params, jnp.zeros((1,), jnp.int32))  # compile first
threads = [threading.Thread(target=slot_a, args=(2, 16, 200)), threading.Thread(target=slot_b, args=(1024, 4))]
for t in threads:
    t.start()
for t in threads:
    t.join()
gaps = [gap for times in a_tokens for gap in zip(times[:-1], times[1:], strict=True)]
held = [(lo, hi) for lo, hi in gaps if any(lo <= s and e <= hi for s, e in prefills)]
if os.environ.get("CORPUS_TRUTH"):
    with open(os.environ["CORPUS_TRUTH"], "w") as f:
        plain = float(np.median([hi - lo for lo, hi in gaps if (lo, hi) not in held]))
        json.dump({"requests": 2 + len(prefills), "prefills": len(prefills), "held_gaps": len(held), "held_s": sum(hi - lo for lo, hi in held), "stall_s": sum(hi - lo - plain for lo, hi in held)}, f)
print(f"{len(prefills)} long prefills, {len(held)} of slot A's token gaps held one")
