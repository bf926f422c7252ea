"""Training steps of an unchanged PyTorch script: global optimizer hooks and `torch.profiler` steps.

`torch.optim.optimizer.register_optimizer_step_post_hook` fires after every `torch.optim` optimizer
step, so step *k* is the time between the end of optimizer step k-1 and the end of optimizer step k
(forward, backward, optimizer, and whatever data loading the loop does). Several optimizers that
step in one iteration (a GAN) make one step per cycle (`cycle.py`). Step 0 starts when the last
optimizer was created before it (`Optimizer.__init__` is wrapped for the recording), else when torch
was imported; it is warm-up either way. A global module hook would place it better but adding or
removing one makes every `torch.compile`d module recompile (Dynamo guards on the hook dict). What
runs after the last optimizer step is no step, so N optimizer steps make exactly N steps.

A loop that updates its parameters by hand (`p -= lr * p.grad`, no `torch.optim` optimizer ever
created) ends each step at the end of its `backward()` instead (`auto:backward`): one backward per
update is what such loops do; an optimizer created later takes over at its first step.

Hooks check `torch.compiler.is_compiling()` first: Dynamo folds it to a constant, so a compiled
optimizer step traces the hook as a no-op instead of breaking the graph on a clock read. A compiled
optimizer step is therefore invisible here; `tpu_perf.step()` marks such steps.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors.session import Recorder
from tpu_perf.collectors.torch import device
from tpu_perf.collectors.torch.cycle import OptimizerCycle
from tpu_perf.collectors.torch.script_profiler import ScriptProfilers

SOURCE = "auto:optimizer"
BACKWARD = "auto:backward"
ANNOTATION = "annotation"


class OptimizerSteps:
    """Turns optimizer steps into step boundaries; learns the training device on the way."""

    def __init__(self, rec: Recorder, torch: Any, on_device: Callable[[str | None], None], on_grouped: Callable[[], None] = lambda: None) -> None:
        self.rec = rec
        self._on_grouped = on_grouped
        self.cycle = OptimizerCycle(self._grouped)
        self.torch = torch
        self._on_device = on_device
        self._step0_start = rec.now()
        self._steps_seen = 0
        self._device_known = False
        self._handles: list[Any] = []
        self._compiling = torch.compiler.is_compiling
        self._backwards = 0
        self._in_step = 0
        """Optimizer steps under way: a backward() inside one is the closure's (Lightning runs the
        last micro-batch there, once; LBFGS evaluates it up to max_iter times): it counts once."""
        self._step_backwards = 0
        self._optimizers = 0
        """torch.optim optimizers created while recording."""
        self._by_backward: bool | None = None
        """Whether backward() ends steps: decided at the first backward, True where no torch.optim
        optimizer was ever made in this process (one made before the recording began, in an earlier
        notebook cell, still steps); an optimizer made later ends it."""
        self.backwards_per_step: list[int] = []
        """`Tensor.backward()` calls between consecutive optimizer steps: micro-batches per update."""

    def install(self) -> None:
        optim = importlib.import_module("torch.optim.optimizer")
        self._handles.append(optim.register_optimizer_step_pre_hook(self._pre_hook))
        self._handles.append(optim.register_optimizer_step_post_hook(self._post_hook))
        cls = optim.Optimizer
        original, steps = cls.__init__, self

        @functools.wraps(original)
        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            original(opt, *args, **kwargs)
            steps._optimizers += 1
            if steps.rec.steps.source is None:
                steps._step0_start = steps.rec.now()

        cls.__init__ = __init__
        tensor, backward = self.torch.Tensor, self.torch.Tensor.backward

        @functools.wraps(backward)
        def counted_backward(t: Any, *args: Any, **kwargs: Any) -> Any:
            if not steps._in_step or not steps._step_backwards:  # LBFGS's closure re-evaluated inside one step is one micro-batch
                steps._backwards += 1
            steps._step_backwards += bool(steps._in_step)
            out = backward(t, *args, **kwargs)
            if steps._by_backward is None:
                steps._by_backward = not steps._optimizers and not _optimizer_made(steps.torch)
            if steps._by_backward and not steps._optimizers and not steps._compiling():
                steps._backward_ended(t)
            return out

        tensor.backward = counted_backward

        def undo() -> None:
            cls.__init__ = original
            tensor.backward = backward

        self._undo_init = undo

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._undo_init()

    @property
    def steps_seen(self) -> int:
        return self._steps_seen

    # -- hooks ----------------------------------------------------------------------------------
    def _pre_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._compiling():
            self._in_step += 1
            self._step_backwards = 0

    def _post_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._compiling():
            return
        self._in_step = max(0, self._in_step - 1)
        self._steps_seen += 1
        if not self._device_known:
            self._device_known = True
            self._on_device(device.param_device_type(optimizer))
        rec = self.rec
        if not rec.steps.accepts(SOURCE) or not self.cycle.ends_step(optimizer):
            return
        self.backwards_per_step.append(self._backwards)
        self._backwards = 0
        if rec.steps.source is None:
            self._first_step(SOURCE)
        else:
            rec.boundary(SOURCE)

    def _backward_ended(self, loss: Any) -> None:
        """A loop with no optimizer: the end of each backward() ends a step."""
        rec = self.rec
        if not rec.steps.accepts(BACKWARD):
            return
        if not self._device_known:
            self._device_known = True
            device = getattr(loss, "device", None)
            self._on_device(str(device.type) if device is not None else None)
        if rec.steps.source is None:
            self._first_step(BACKWARD)
        else:
            rec.boundary(BACKWARD)

    def _grouped(self, optimizers: list[Any]) -> None:
        names = ", ".join(type(o).__name__ for o in optimizers)
        self.rec.warn(f"{len(optimizers)} optimizers step in each loop iteration ({names}, in that order): one training step is one such cycle, ending at the last optimizer's step")
        self._on_grouped()

    def _first_step(self, source: str) -> None:
        """Step 0 ran from the optimizer's creation (or torch's import) to now: written after the fact, then step 1 opens."""
        rec = self.rec
        rec.sync()
        end = rec.now()
        rec.span(source, min(self._step0_start, end), end)
        rec.before_step(rec.steps.next_index)
        rec.steps.open(source, rec.now())

    def micro_batches(self) -> int | None:
        """Backward passes per optimizer update (the median over the steps: a first or last
        partial accumulation does not change it); None when no backward() was seen."""
        counts = sorted(c for c in self.backwards_per_step if c > 0)
        return counts[len(counts) // 2] if counts else None

    def uneven_note(self) -> str | None:
        """The updates whose micro-batches differ from the usual (`micro_batches()`), where it is
        more than 1: `step % accum == 0` loops update after 1 micro-batch at step 0 and after what
        is left at the end. None when every update ran the usual number."""
        usual = self.micro_batches()
        if not usual or usual < 2:
            return None
        odd = [(i, c) for i, c in enumerate(self.backwards_per_step) if c > 0 and c != usual]
        if not odd:
            return None
        counts = ", ".join(str(c) for _, c in odd[:8]) + (", ..." if len(odd) > 8 else "")
        where = ", ".join(str(i) for i, _ in odd[:8]) + (", ..." if len(odd) > 8 else "")
        return (f"uneven accumulation: {len(odd)} of {len(self.backwards_per_step)} updates ran {counts} micro-batches instead of {usual} "
                f"(updates {where}); their step times and FLOPs differ from the others'")

    def close(self) -> None:
        """End of the script: the time after the last optimizer step belongs to no step."""
        if self.rec.steps.source in (SOURCE, BACKWARD):
            self.rec.steps.discard_open()


def _optimizer_made(torch: Any) -> bool:
    """Whether any torch.optim optimizer was made in this process, before the recording too: the
    first instance of each class patches its class's `step` (`hooked`, torch/optim/optimizer.py)."""
    todo, seen = [torch.optim.Optimizer], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if getattr(vars(cls).get("step"), "hooked", False):
            return True
        todo.extend(cls.__subclasses__())
    return False


def patch_profiler(rec: Recorder, torch: Any, script: ScriptProfilers) -> Callable[[], None]:
    """`prof.start()` opens step 0 and each `prof.step()` (called at the end of an iteration, as
    torch documents) ends one and opens the next; the step the last `prof.step()` opened is empty
    and is dropped at `prof.stop()`, so N iterations make N steps.

    Profilers tpu-perf starts itself (its trace window) carry `_tpu_perf_own` and are not steps, nor
    are the script's profilers opened after optimizer steps were seen (they cover part of the loop).
    The script's own profilers take over from tpu-perf's window (`script_profiler.py`).
    """
    cls = torch.profiler.profile
    original = {name: getattr(cls, name) for name in ("start", "step", "stop", "export_chrome_trace")}
    defined = {name for name in original if name in vars(cls)}  # export_chrome_trace is inherited

    def marks(prof: Any) -> bool:
        return getattr(prof, "_tpu_perf_marks", False)

    def start(self: Any) -> None:
        own = getattr(self, "_tpu_perf_own", False)
        if not own:
            script.started("torch.profiler.profile")
            # A profiler opened after optimizer steps were seen covers part of the loop: not the steps.
            self._tpu_perf_marks = rec.steps.source in (None, ANNOTATION)
        original["start"](self)
        if marks(self):
            rec.boundary(ANNOTATION, getattr(self, "step_num", None))

    def step(self: Any) -> None:
        if marks(self):
            rec.boundary(ANNOTATION, getattr(self, "step_num", 0) + 1)
        original["step"](self)

    def stop(self: Any) -> None:
        if marks(self) and rec.steps.source == ANNOTATION:
            rec.steps.discard_open()  # opened by the last prof.step(): no iteration ran in it
        original["stop"](self)
        if not getattr(self, "_tpu_perf_own", False):
            script.stopped(self)

    def export_chrome_trace(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        out = original["export_chrome_trace"](self, path, *args, **kwargs)
        if not getattr(self, "_tpu_perf_own", False):
            script.exported(path)  # the script's handler wrote it: Kineto saves a trace only once
        return out

    for name, fn in (("start", start), ("step", step), ("stop", stop), ("export_chrome_trace", export_chrome_trace)):
        fn.__wrapped__ = original[name]  # type: ignore[attr-defined]
        fn.__doc__ = original[name].__doc__
        setattr(cls, name, fn)

    def undo() -> None:
        for name, fn in original.items():
            if name in defined:
                setattr(cls, name, fn)
            else:
                delattr(cls, name)

    return undo
