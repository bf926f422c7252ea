"""The real-framework corpus (tests/corpus) and the advisor's planted scripts, each recorded once per
session, when a test first asks for it, and shared by tests/test_corpus.py (the recording matches the
script's own truth) and tests/test_advice_corpus.py (the advisor on the same runs).

Recorded with the default trace window (steps 3:6): the advisor's op-by-op, device-idle and
input-bound rules read it; the truth checks read the same steps as the script's own clock."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT, made_once, tpu_perf_cli

CORPUS = ROOT / "tests" / "corpus"
ADVICE = ROOT / "tests" / "scripts" / "advice_corpus"
TORCH = ROOT / "tests" / "torch_scripts"
PLANTED = {
    "keras_fit": (ADVICE / "keras_fit.py",),
    "flax_multisteps_mlp": (ADVICE / "flax_multisteps.py",),
    "eval_midway": (ADVICE / "jit_eval_midway.py",),
    "flax_cnn": (ADVICE / "flax_cnn.py",),
    "augment": (ADVICE / "numpy_augment.py",),
    "jax_mesh": (ADVICE / "jax_mesh.py",),
    "torch_sync": (TORCH / "advice_item_sync.py", "--mode", "defective"),
    "torch_nosync": (TORCH / "advice_item_sync.py", "--mode", "fixed"),
    "torch_evalsync": (TORCH / "advice_item_sync.py", "--mode", "eval"),
    "lightning_prog_bar": (TORCH / "lightning_prog_bar.py",),
    "torch_augment": (TORCH / "input_loop.py", "--mode", "numpy"),
    "jax_torch_loader": (ADVICE / "jax_torch_loader.py",),
    "jax_static_step": (ADVICE / "jax_static_step.py",),
    "jax_decode_grow": (ADVICE / "jax_decode_grow.py", "--mode", "grow"),
    "jax_decode_fixed": (ADVICE / "jax_decode_grow.py", "--mode", "fixed"),
    "jax_long_prompt": (ADVICE / "jax_long_prompt.py", "--mode", "long"),
    "jax_short_prompt": (ADVICE / "jax_long_prompt.py", "--mode", "short"),
    "two_slot_server": (ADVICE / "two_slot_server.py",),
    "jax_decode_derived": (ADVICE / "jax_decode_grow.py", "--mode", "derived"),
}
"""The advisor's own scripts (a defect planted, or a shape the corpus lacks): name -> script, args.
keras_fit and flax_multisteps_mlp overlap tests/corpus's keras_jax and flax_multisteps but
assert what those cannot: Keras's test_step first compiled midway (validation after epoch 1), and
MultiSteps on a 3-layer MLP with a 10-way head (the corpus MLP's two square 256x256 layers give 5
dots of one shape, told apart by role in signals.layer_repeats)."""


def env() -> dict[str, str]:
    """Two CPU devices (pmap, the mesh), Keras on JAX."""
    flags = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    return {"XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "KERAS_BACKEND": "jax"}


@dataclass(frozen=True)
class CorpusRun:
    name: str
    store: Path
    dir: Path
    """The run folder (read only)."""
    truth: dict | None
    """What a tests/corpus script printed of itself (tests/corpus/truth.py), or a planted one wrote to
    $CORPUS_TRUTH; None for a planted one that writes none."""

    @property
    def manifest(self) -> dict:
        return json.loads((self.dir / "run.json").read_text())


class CorpusRuns:
    """`tpu-perf record` of each script once per session per environment, each alone in a store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._runs: dict[tuple[str, tuple[tuple[str, str], ...]], CorpusRun] = {}

    def __call__(self, name: str, extra_env: dict[str, str] | None = None) -> CorpusRun:
        key = (name, tuple(sorted((extra_env or {}).items())))
        if key not in self._runs:
            folder = name + ("-" + hashlib.sha1(repr(key[1]).encode()).hexdigest()[:8] if key[1] else "")
            with made_once(self.root / folder) as missing:  # pytest-xdist workers share one recording
                if missing:
                    self._record(name, folder, extra_env or {})
            self._runs[key] = self._load(name, folder)
        return self._runs[key]

    @property
    def recorded(self) -> list[CorpusRun]:
        return list(self._runs.values())

    def _record(self, name: str, folder: str, extra_env: dict[str, str]) -> None:
        store, truth = self.root / folder, self.root / f"{folder}.truth.json"
        script, *args = PLANTED.get(name) or (CORPUS / f"{name}.py",)
        proc = tpu_perf_cli("record", "-q", "--store", str(store), "--name", name, str(script), *args, cwd=script.parent, timeout=570,
                            env={**env(), "CORPUS_TRUTH": str(truth), **extra_env})
        assert proc.returncode == 0, proc.stderr[-3000:]

    def _load(self, name: str, folder: str) -> CorpusRun:
        store, truth = self.root / folder, self.root / f"{folder}.truth.json"
        (run_dir,) = [p for p in store.iterdir() if (p / "run.json").exists()]
        return CorpusRun(name, store, run_dir, json.loads(truth.read_text()) if truth.exists() else None)
