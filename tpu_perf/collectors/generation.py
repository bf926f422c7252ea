"""Generation requests and their tokens: what an inference run is made of, recorded unchanged.

Two sources: `tpu_perf.request()` / `tpu_perf.token()` marks (hand-written servers and decode loops),
and Hugging Face `generate()` in PyTorch, hooked where it is defined (`GenerationMixin.generate`):
each call is a request per prompt row, each forward pass of the model inside it one token per row
(the first one is the prefill). A token is stamped when it has been sampled: when the next pass
starts, or `generate()` returns (as a streamer or a `max_new_tokens=1` call would clock it).

A request keeps its token times in memory and is handed over whole when it ends; the recorder's
flush thread writes it (one `requests` row and one `tokens` row per token step), so a token costs
the loop one clock read and two list appends, and a request's end one more (writing the rows there
cost the loop 160 us a 48-token request).
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tpu_perf import marks
from tpu_perf.collectors import imports
from tpu_perf.collectors.session import Recorder

HF_GENERATION_MODULE = "transformers.generation.utils"
"""Where transformers defines `GenerationMixin` (imported lazily by `transformers` itself)."""


@dataclass
class Request:
    index: int
    source: str
    start: float
    prompt_tokens: int | None
    sequences: int
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    arrays: dict[str, Any] = field(default_factory=dict)
    """What the request's arrays weigh: `weight_bytes`, `kv_bytes_per_position` (all its rows),
    `prompt_positions` (per row), for the bytes a decode step must read."""


class GenerationLog:
    """Open requests (one per thread: a server may serve several at once) and their token times."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self._local = threading.local()
        self._lock = threading.Lock()
        self._next = 0
        self.requests = 0
        """Requests ended so far (prompt rows)."""
        self._ended: collections.deque[tuple[Request, float]] = collections.deque()
        """Ended requests with their end times, for the flush thread to write (`drain`)."""
        rec.add_drain(self.drain)

    def warn(self, message: str) -> None:
        self.rec.warn(message)

    def request_start(self, source: str, prompt_tokens: int | None, sequences: int) -> None:
        """A request begins now (its prompt is about to be processed); the thread's open one ends."""
        now = self.rec.now()
        self.request_end(now)
        with self._lock:
            index, self._next = self._next, self._next + 1
        self._local.open = Request(index, source, now, prompt_tokens, sequences)

    def token(self, count: int) -> None:
        """`count` tokens (one per sequence of the request) came out now."""
        request: Request | None = getattr(self._local, "open", None)
        if request is None:
            self.warn("tpu_perf.token() outside a request: mark each request with tpu_perf.request(); those tokens are not counted")
            return
        request.times.append(self.rec.now())
        request.counts.append(count)

    def describe(self, **arrays: Any) -> None:
        """What the thread's open request's arrays weigh (see `Request.arrays`)."""
        request: Request | None = getattr(self._local, "open", None)
        if request is not None:
            request.arrays.update(arrays)

    def request_end(self, now: float | None = None) -> None:
        """The thread's open request (if any) is done: write it and its tokens."""
        request: Request | None = getattr(self._local, "open", None)
        if request is None:
            return
        self._local.open = None
        self.write(request, self.rec.now() if now is None else now)

    def busy(self) -> bool:
        """Whether this thread has a request open (a `generate()` call or marks): its tokens count there."""
        return getattr(self._local, "open", None) is not None

    def new_request(self, source: str, start: float, prompt_tokens: int | None, sequences: int) -> Request:
        """A request outside the thread's open one, kept by its caller and written with `write`
        (a token loop decides only at the end of the run whether its requests are requests)."""
        with self._lock:
            index, self._next = self._next, self._next + 1
        return Request(index, source, start, prompt_tokens, sequences)

    def write(self, request: Request, end: float) -> None:
        """One ended request: written by the next `drain` (a deque's ends are thread-safe: no lock)."""
        self._ended.append((request, end))
        self.requests += request.sequences

    def drain(self) -> None:
        """Write the requests ended so far (on the flush thread, and once more at the end of the run)."""
        while True:
            try:
                request, end = self._ended.popleft()
            except IndexError:
                return
            self._rows(request, end)

    def _rows(self, request: Request, end: float) -> None:
        """A request's `requests` row and a `tokens` row per token step."""
        for time_s, count in zip(request.times, request.counts, strict=True):
            self.rec.append("tokens", {"request": request.index, "time_s": time_s, "tokens": count})
        self.rec.append("requests", {
            "request": request.index,
            "source": request.source,
            "start_time_s": request.start,
            "first_token_time_s": request.times[0] if request.times else None,
            "end_time_s": max(end, request.times[-1]) if request.times else end,
            "prompt_tokens": request.prompt_tokens,
            "sequences": request.sequences,
            "generated_tokens": sum(request.counts),
            "token_steps": len(request.times),
            "weight_bytes": request.arrays.get("weight_bytes"),
            "kv_bytes_per_position": request.arrays.get("kv_bytes_per_position"),
            "prompt_positions": request.arrays.get("prompt_positions"),
            "kv_dtype": request.arrays.get("kv_dtype"),
        })


def install(rec: Recorder) -> Callable[[], None]:
    """Take the marks and hook transformers' `generate()` when the script imports it; returns the undo."""
    log = GenerationLog(rec)
    rec.generation = log
    marks.set_generation_sink(log)
    undos: list[Callable[[], None]] = []
    imports.when_imported(HF_GENERATION_MODULE, lambda module: undos.append(_hook_hf(log, module)))
    rec.add_before_close(log.request_end)

    def uninstall() -> None:
        marks.set_generation_sink(None)
        for undo in reversed(undos):
            undo()

    return uninstall


def _hook_hf(log: GenerationLog, module: ModuleType) -> Callable[[], None]:
    """Wrap `GenerationMixin.generate`: one request per prompt row, one token per row per forward."""
    mixin = module.GenerationMixin
    original = mixin.generate
    busy = threading.local()

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(busy, "depth", 0):  # generate() inside generate() (assisted decoding): the outer call is the request
            return original(self, *args, **kwargs)
        ids = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
        prompts, prompt = _prompt_shape(ids, kwargs.get("attention_mask"))
        width = ids.shape[1] if prompt is not None else None  # the positions each row's cache holds, pads included
        rows = prompts * _returned_per_prompt(self, kwargs)  # num_return_sequences=n: n rows per prompt, a token each per pass
        device = getattr(getattr(self, "device", None), "type", "cpu")
        sync = log.rec.sync if device != "cpu" else None
        cache: list[Any] = [None]
        pending = [False]

        def forward_start(_module: Any, _inputs: Any) -> None:
            if pending[0]:  # the token the last pass made was sampled: the loop moved on to the next
                pending[0] = False
                log.token(rows)

        def forward_done(_module: Any, _inputs: Any, output: Any) -> None:
            if sync is not None:  # the token exists once the device has computed it
                sync()
            pending[0] = True
            cache[0] = output_cache(output)

        log.request_start("auto:generate", prompt, rows)
        busy.depth = 1
        handles = (self.register_forward_pre_hook(forward_start), self.register_forward_hook(forward_done))
        try:
            out = original(self, *args, **kwargs)
            forward_start(self, ())  # the last token: sampled before generate() returned
            return out
        finally:
            for handle in handles:
                handle.remove()
            busy.depth = 0
            kv_bytes, kv_dtype = kv_cache_bytes(cache[0])
            log.describe(weight_bytes=weight_bytes_of(self), prompt_positions=width, kv_bytes_per_position=kv_bytes, kv_dtype=kv_dtype)
            log.request_end()

    mixin.generate = generate

    def undo() -> None:
        mixin.generate = original

    return undo


def _prompt_shape(ids: Any, mask: Any = None) -> tuple[int, int | None]:
    """(prompt rows, prompt tokens in all rows) of `generate()`'s input ids; (1, None) when unknown.
    A padded batch's tokens are its attention mask's ones (the pads are not prompt)."""
    shape = getattr(ids, "shape", None)
    if shape is None or len(shape) != 2:
        return 1, None
    if getattr(mask, "shape", None) == shape:
        try:
            return int(shape[0]), int(mask.sum())
        except (TypeError, ValueError, RuntimeError):
            pass
    return int(shape[0]), int(shape[0]) * int(shape[1])


def _returned_per_prompt(model: Any, kwargs: dict[str, Any]) -> int:
    """`num_return_sequences` of this call: the call's own, its `generation_config`'s, else the model's."""
    for source in (kwargs, getattr(kwargs.get("generation_config"), "__dict__", {}), getattr(getattr(model, "generation_config", None), "__dict__", {})):
        n = source.get("num_return_sequences")
        if isinstance(n, int) and n >= 1:
            return n
    return 1


def weight_bytes_of(model: Any) -> int | None:
    """Bytes of the model's parameters (each shared tensor once): what every decode step reads."""
    try:
        seen = {id(p): p.numel() * p.element_size() for p in model.parameters()}
    except Exception:  # noqa: BLE001 -- a model without torch parameters: unknown
        return None
    return sum(seen.values()) or None


def output_cache(output: Any) -> Any:
    """The KV cache a model's forward pass returned, None without one."""
    kv = getattr(output, "cache", None)  # transformers 5 (`past_key_values` there is a deprecated alias: 27 us a read)
    return kv if kv is not None else getattr(output, "past_key_values", None)


def kv_cache_bytes(cache: Any) -> tuple[float | None, str | None]:
    """Bytes the KV cache holds per position (all rows, all layers) and its dtype, read from the cache
    the last forward pass returned: a `transformers` Cache (`layers` of keys/values) or legacy tuples."""
    if cache is None:
        return None, None
    layers = getattr(cache, "layers", None)
    pairs = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in layers] if layers is not None else cache if isinstance(cache, (tuple, list)) else None
    tensors = [t for pair in pairs or () for t in (pair if isinstance(pair, (tuple, list)) else ()) if hasattr(t, "element_size") and t.dim() >= 2]
    if not tensors:
        return None, None
    positions = tensors[0].shape[-2]  # (batch, heads, positions, head_dim)
    total = sum(t.numel() * t.element_size() for t in tensors)
    return (total / positions if positions else None), str(tensors[0].dtype).removeprefix("torch.")
