"""The recorder's cost per generated token: a generation script plain and under `tpu-perf record`.

Runs the same script plain (`python script`) and under `tpu-perf record --no-trace`, interleaved,
several times. The script clocks its own requests (tests/corpus/truth.py: per request the time per
output token after the first); we compare the medians of those self-measured TPOTs, so both arms
are measured the same way, in one invocation.

    python bench/generation_overhead.py [--repeats 5] [--script tests/corpus/jax_decode.py]

The default script is the lm1b-style JAX decode loop (about 1 ms per token here: a jitted prefill,
then a jitted decode step per token); tests/corpus/hf_generate.py is Hugging Face generate() on a
tiny GPT-2 (a forward hook per token). Prints one line per repeat and the ratio record/plain of the
median TPOT; the target is <= 1.03 at about 1 ms per token.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(arm: str, script: Path, tmp: Path) -> float:
    """The median of the script's own per-request TPOTs, the first request (which compiles) left out."""
    out = tmp / f"{arm}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "CORPUS_TRUTH": str(out)}
    if arm == "plain":
        cmd = [sys.executable, str(script)]
    else:
        cmd = [sys.executable, "-m", "tpu_perf", "record", "-q", "--no-trace", "--store", str(tmp / "runs"), str(script)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=script.parent)
    return statistics.median(json.loads(out.read_text())["tpot"][1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--script", type=Path, default=ROOT / "tests" / "corpus" / "jax_decode.py")
    args = parser.parse_args()
    plain, recorded = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for arm in (("plain", "record") if i % 2 == 0 else ("record", "plain")):
                (plain if arm == "plain" else recorded).append(run(arm, args.script.resolve(), Path(tmp)))
            print(f"repeat {i}: plain {plain[-1] * 1e3:.3f} ms/token  record {recorded[-1] * 1e3:.3f} ms/token  ratio {recorded[-1] / plain[-1]:.3f}")
    ratio = statistics.median(recorded) / statistics.median(plain)
    paired = statistics.median(r / p for r, p in zip(recorded, plain, strict=True))
    print(f"median TPOT: plain {statistics.median(plain) * 1e3:.3f} ms, record {statistics.median(recorded) * 1e3:.3f} ms")
    print(f"ratio record/plain per generated token: {ratio:.3f} (median of paired ratios {paired:.3f}; target <= 1.03 at about 1 ms per token)")
    print("Separate processes differ by several percent on a shared 2-core machine: read the ratio over many repeats.")


if __name__ == "__main__":
    main()
