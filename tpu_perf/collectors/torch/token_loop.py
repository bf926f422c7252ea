"""Eager token loops: a model called once per token under `torch.no_grad()` or
`torch.inference_mode()`, with no `generate()` and no marks (PyTorch examples'
`word_language_model/generate.py`, a hand-written greedy loop over a Hugging Face model).

While such a block is open, module-wide forward hooks find the outermost module calls (the model,
not its layers) whose first argument is a tensor of token ids. Each is a token step, one token per
row, stamped once sampled (when the next call starts or the request ends); a call over more than one
position is a prefill and starts a request, as does the block's first call (read batch-first until
the first decode call's rows show how the prompt was laid out: a single row (1, P) or (P, 1), or
sequence-first (P, rows)). A training script's evaluation under
`no_grad` looks the same, so these requests are kept aside and written only when the run took no
training step: then they are what the run did.
Outside such blocks the hooks are not installed, so training steps pay nothing; inside one, the
module-wide hooks last until the first call on token ids; then the model's class's `forward` is
wrapped for the block instead, passing other instances through (a forward hook sends every call
through torch's slow path: 16-34 us a token measured on a 1 ms word-LM token, against about 6 us for
a wrapper). A block inside `generate()` or a marked
request, or one that finds itself in one, drops its hooks: those tokens are counted there.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from tpu_perf.collectors.generation import (
    GenerationLog,
    Request,
    kv_cache_bytes,
    output_cache,
    weight_bytes_of,
)
from tpu_perf.collectors.session import Recorder

SOURCE = "auto:token-loop"


def token_rows(x: Any, torch: Any) -> tuple[int, int] | None:
    """(rows, positions) of a token-id tensor, None for anything else (images, embeddings).

    Sequence-first (positions, rows) and batch-first (rows, positions) ids look alike; one token
    per step is the decode case, so a dimension of 1 is the positions, else batch-first."""
    if not isinstance(x, torch.Tensor) or x.is_floating_point() or x.is_complex() or x.dtype == torch.bool or x.dim() > 2:
        return None
    if x.dim() == 0:
        return 1, 1
    if x.dim() == 1:
        return int(x.shape[0]), 1
    a, b = int(x.shape[0]), int(x.shape[1])
    if a == 1 or b == 1:
        return max(a, b), 1
    return a, b


class TokenLoop:
    """The hooks' state: open grad-free blocks per thread, and the requests found so far."""

    def __init__(self, rec: Recorder, torch: Any) -> None:
        self.rec = rec
        self.torch = torch
        self._local = threading.local()
        self._lock = threading.Lock()
        self._blocks = 0
        self._handles: list[Any] = []
        """The module-wide hooks, while a block looks for the model."""
        self._wrapped: tuple[Any, Any, Any, Any] | None = None
        """(model, its class, the class's own `forward` or None where inherited, the wrapper) once the
        model is found; (model, None, None, None) where it is hooked instead."""
        self.requests: list[tuple[Request, float]] = []
        """Ended requests with their end times, written at close when the run took no training step."""
        self._undo: list[Any] = []

    def __deepcopy__(self, memo: dict[int, Any]) -> TokenLoop:
        """Itself: `copy.deepcopy` of a hooked model copies its hooks, bound to this (the copy's calls
        then pass through them; one recording has one loop, and its locks cannot be copied)."""
        return self

    @property
    def log(self) -> GenerationLog | None:
        return self.rec.generation

    # -- the grad-free blocks --------------------------------------------------------------------
    def install(self) -> None:
        """Wrap `no_grad` and `inference_mode`'s enter and exit (their decorator forms use them too)."""
        for cls in (self.torch.no_grad, self.torch.inference_mode):
            enter, exit_ = cls.__enter__, cls.__exit__

            def wrapped_enter(ctx: Any, _enter: Any = enter) -> Any:
                out = _enter(ctx)
                self._enter()
                return out

            def wrapped_exit(ctx: Any, *exc: Any, _exit: Any = exit_) -> Any:
                self._exit()
                return _exit(ctx, *exc)

            cls.__enter__, cls.__exit__ = wrapped_enter, wrapped_exit
            self._undo.append((cls, enter, exit_))

    def uninstall(self) -> None:
        for cls, enter, exit_ in self._undo:
            cls.__enter__, cls.__exit__ = enter, exit_
        self._undo.clear()
        with self._lock:
            self._remove_hooks()

    def _enter(self) -> None:
        depth = getattr(self._local, "blocks", 0)
        self._local.blocks = depth + 1
        log = self.log
        if depth == 0:  # a block inside generate() or a marked request: its tokens are counted there
            self._local.active = log is not None and not log.busy()
        if depth == 0 and self._local.active:
            self._local.started = self.rec.now()
            self._local.request = self._local.pending = self._local.output = self._local.decode = None
            with self._lock:
                self._blocks += 1
                if self._blocks == 1:
                    hooks = self.torch.nn.modules.module
                    self._handles = [hooks.register_module_forward_pre_hook(self._pre), hooks.register_module_forward_hook(self._post, with_kwargs=True, always_call=True)]

    def _exit(self) -> None:
        depth = getattr(self._local, "blocks", 0)
        if depth <= 0:
            return
        self._local.blocks = depth - 1
        if depth == 1 and self._local.active:
            self._end_request(self.rec.now())
            self._release()

    def _release(self) -> None:
        """The thread's block stops looking for token steps: its hooks go once no other thread's block needs them."""
        self._local.active = False
        with self._lock:
            self._blocks -= 1
            if self._blocks == 0:
                self._remove_hooks()

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._wrapped is not None:
            _, cls, original, wrapper = self._wrapped
            self._wrapped = None
            if cls is not None and vars(cls).get("forward") is wrapper:  # not replaced by the script meanwhile
                if original is None:
                    delattr(cls, "forward")
                else:
                    cls.forward = original

    def _adopt(self, model: Any) -> None:
        """See only `model`'s calls from now on, and drop the module-wide hooks (with those, every
        layer's call takes torch's slow path with hooks: 14 % a token inside generate() measured).
        Its class's `forward` is wrapped for the block, passing any other instance straight through:
        a forward hook on the model would send each of its calls through that slow path (16-34 us a
        1 ms token), and a wrapper set on the instance would go with it into `copy.deepcopy(model)`.
        A model with a `forward` of its own (torch.compile's module, accelerate's hooks), compiled in
        place, or of a torch class (an `nn.Embedding` called alone: its class is everyone's) is hooked
        instead. Later calls of another model in the block are not seen."""
        wrapped = self._wrapped
        if wrapped is not None and wrapped[0] is model:
            return
        with self._lock:
            if not self._handles:  # every block ended meanwhile
                return
            self._remove_hooks()
            cls = type(model)
            if "forward" in vars(model) or getattr(model, "_compiled_call_impl", None) is not None or cls.__module__.split(".")[0] == "torch":
                self._handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post, with_kwargs=True, always_call=True)]
                self._wrapped = (model, None, None, None)
                return
            original, loop, local, now = cls.forward, self, self._local, self.rec.now
            log = self.log
            busy = log.busy if log is not None else lambda: True

            @functools.wraps(original)
            def forward(module: Any, *args: Any, **kwargs: Any) -> Any:
                if module is not model or not getattr(local, "active", False):  # another instance, thread, or a block inside generate()/marks
                    return original(module, *args, **kwargs)
                started = now()
                loop._stamp(started)
                output = original(module, *args, **kwargs)
                ids = args[0] if args else kwargs.get("input_ids", kwargs.get("input"))
                if local.decode is not None and getattr(ids, "shape", None) == local.decode[0] and not busy():
                    local.pending, local.output = local.decode[1], output  # one more decode call like the last: the rest is known
                else:
                    loop._token_call(module, started, args, kwargs, output)
                return output

            self._wrapped = (model, cls, vars(cls).get("forward"), forward)
            cls.forward = forward

    # -- the model's calls -----------------------------------------------------------------------
    def _pre(self, module: Any, args: tuple[Any, ...]) -> None:
        depth = getattr(self._local, "calls", 0)
        self._local.calls = depth + 1
        if depth == 0:
            self._local.started_call = now = self.rec.now()
            self._stamp(now)

    def _post(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        depth = getattr(self._local, "calls", 1) - 1
        self._local.calls = depth
        wrapped = self._wrapped
        if depth or not getattr(self._local, "active", False) or (wrapped is not None and wrapped[0] is not module):  # a copy of the hooked model carries its hooks
            return
        self._token_call(module, getattr(self._local, "started_call", None) or self.rec.now(), args, kwargs, output)

    def _token_call(self, module: Any, started: float, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """An outermost module call that began at `started` in the thread's open block returned `output`."""
        log = self.log
        if log is None or log.busy():  # generate() or marks count this block's tokens: no hooks on its calls (13-25 us a token)
            self._end_request(started)
            self._release()
            return
        ids = args[0] if args else kwargs.get("input_ids", kwargs.get("input"))  # Hugging Face models take input_ids=
        shape = token_rows(ids, self.torch) if ids is not None else None
        if shape is None:  # not token ids
            return
        self._adopt(module)  # the model of this block: from now on only its calls are seen
        rows, positions = shape
        request: Request | None = getattr(self._local, "request", None)
        if request is None or positions > 1:
            self._end_request(started)
            request = log.new_request(SOURCE, getattr(self._local, "started", started) if request is None and positions == 1 else started,
                                      rows * positions if positions > 1 else None, rows)
            request.arrays.update(weight_bytes=weight_bytes_of(module), prompt_positions=positions)
            self._local.request = request
            self._local.first = tuple(int(n) for n in ids.shape) if ids.dim() == 2 else None
        elif getattr(self._local, "first", None) is not None:  # the request's second call: a decode step
            self._relayout(request, self._local.first, rows)
            self._local.first = None
        self._local.pending = rows  # stamped once sampled: when the next call starts, or the request ends
        self._local.output = output  # its KV cache is read when the request ends
        self._local.decode = (ids.shape, rows) if positions == 1 and getattr(self._local, "first", None) is None else None  # the layout settled: later calls like this one take the fast path

    @staticmethod
    def _relayout(request: Request, first: tuple[int, int], rows: int) -> None:
        """Read the request's first call again by the rows of its first decode step: a prompt of
        one row fed batch-first (1, P) or sequence-first (P, 1), or of several rows sequence-first
        (P, rows) as an RNN LM feeds it, looks like a decode step of other rows until then."""
        if rows == request.sequences:
            return
        a, b = first
        positions = a if b == rows else b if a == rows else None
        if positions is None:
            return
        request.sequences, request.counts = rows, [rows] * len(request.counts)
        request.prompt_tokens = rows * positions
        request.arrays["prompt_positions"] = positions

    def _stamp(self, now: float) -> None:
        """The last call's token was sampled by `now`: it counts to the open request."""
        rows, request = getattr(self._local, "pending", None), getattr(self._local, "request", None)
        self._local.pending = None
        if rows is not None and request is not None:
            request.times.append(now)
            request.counts.append(rows)

    def _end_request(self, end: float) -> None:
        self._stamp(end)
        request: Request | None = getattr(self._local, "request", None)
        if request is None:
            return
        self._local.request = self._local.decode = None
        output, self._local.output = getattr(self._local, "output", None), None
        cache = output_cache(output) if output is not None else None
        kv, dtype = kv_cache_bytes(cache) if cache is not None else (0.0, None)  # no cache returned: none is read (an RNN's state, a full recompute)
        request.arrays.update(kv_bytes_per_position=kv, kv_dtype=dtype)
        with self._lock:
            self.requests.append((request, end))

    def close(self, *, trained: bool) -> None:
        """Write the requests found, unless the run trained (they were its evaluations)."""
        self._end_request(self.rec.now())
        log = self.log
        if trained or log is None:
            return
        for request, end in self.requests:
            log.write(request, end)
