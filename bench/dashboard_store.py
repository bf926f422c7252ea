"""The dashboard's 12-run store, as a new user has one, and screenshots of its pages at 1280x800.

    PYTHONPATH=. python bench/dashboard_store.py STORE                  # record the store (once: about 3 min)
    PYTHONPATH=. python bench/dashboard_store.py STORE --shots DIR      # then screenshot compare, run, History

The runs: a JAX language model untuned and tuned (`examples/tuning/jax_lm.py`, `--fix ...`), a
PyTorch MLP, a `--repeat 2` pair of groups 3x apart (`tests/scripts/gate_loop.py`), a traced loop
that sleeps 20 or 30 ms a step (a 1.5x slow/fast pair that differs only by host work), an
imported Kineto GPU trace and an imported 4-chip TPU capture, and a failed run recorded with other
XLA flags. Screenshots: the compare page of four runs (untuned, tuned, fast, slow), the run page of
the untuned run, and the History page, each as a user opens it (`tpu-perf dashboard STORE`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
LM = str(ROOT / "examples" / "tuning" / "jax_lm.py")
SELFTIMED = str(SCRIPTS / "jax_selftimed.py")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
COMPARED = ("untuned", "tuned", "fast", "slow")
"""The runs of the compare page's screenshot."""


def _env() -> dict[str, str]:
    return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cli(*args: str, env: dict[str, str] | None = None, ok: bool = True) -> None:
    proc = subprocess.run([sys.executable, "-m", "tpu_perf", *args], env={**_env(), **(env or {})}, capture_output=True, text=True, timeout=600)
    if ok and proc.returncode:
        raise SystemExit(f"tpu-perf {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")


def build(store: Path) -> None:
    """Record (and import) the 12 runs into `store`, oldest first."""
    s = ("--store", str(store), "-q")
    lm = ("--steps", "12", "--layers", "2")
    _cli("record", *s, "--name", "untuned", "--tokens-per-step", "512", LM, *lm)
    _cli("record", *s, "--name", "tuned", "--tokens-per-step", "512", LM, *lm, "--fix", "shapes,jit,sync,scan,donate")
    _cli("record", *s, "--name", "torchy", "--no-trace", str(ROOT / "examples" / "torch_mlp.py"), "--steps", "16")
    for work in ("50", "150"):
        _cli("record", *s, "--repeat", "2", "--tag", f"work={work}", "--no-trace", str(SCRIPTS / "gate_loop.py"), "--steps", "16", "--work", work)
    for name, sleep in (("fast", "0.02"), ("slow", "0.03")):
        _cli("record", *s, "--name", name, SELFTIMED, str(store.parent / f"{name}.json"), "--steps", "16", "--sleep", sleep)
    _cli("import", str(ROOT / "tests" / "data" / "a100_alexnet.json.gz"), "--store", str(store), "--name", "kineto")
    _cli("import", str(ROOT / "tests" / "data" / "tpu_v6e_x4_inference.xplane.pb"), "--store", str(store), "--name", "tpu4")
    _cli("record", *s, "--name", "failing", SELFTIMED, str(store.parent / "failing.json"), "--steps", "10", "--fail-at", "6", env={"XLA_FLAGS": "--xla_dump_hlo_as_text"}, ok=False)


@contextlib.contextmanager
def serve(store: Path, cache: Path) -> Iterator[str]:
    """`tpu-perf dashboard STORE --port P`, as a user starts it; yields its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "tpu_perf", "dashboard", str(store), "--port", str(port)], env={**_env(), "TPU_PERF_CACHE_DIR": str(cache)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


IDLE_JS = """() => document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') === 'notRunning'
    && !document.querySelector('[data-stale="true"], [data-testid="stStatusWidgetRunningIcon"]')
    && [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].every(c => c.querySelector('.main-svg'))"""


def screenshots(store: Path, out: Path, prefix: str) -> list[Path]:
    """The compare page (its first and its Why tab), the untuned run's page and History, at 1280x800:
    the full page, as PNG."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    ids = {}
    for run_dir in store.iterdir():
        if (run_dir / "run.json").exists():
            import json

            ids[json.loads((run_dir / "run.json").read_text())["name"]] = run_dir.name
    pages = {"compare": f"/compare?runs={','.join(ids[n] for n in COMPARED)}", "run": f"/run?run={ids['untuned']}", "history": "/history"}
    shots = []
    with serve(store, out / ".cache") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        for name, path in pages.items():
            page.goto(url + path)
            page.wait_for_timeout(1500)
            page.wait_for_function(IDLE_JS, polling=200, timeout=120_000)
            height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]')?.scrollHeight || 800")
            page.set_viewport_size({"width": 1280, "height": max(800, min(int(height), 6000))})  # the page scrolls inside the app, not the window
            page.wait_for_timeout(2500)
            page.wait_for_function(IDLE_JS, polling=200, timeout=120_000)
            shot = out / f"{prefix}-{name}.png"
            page.screenshot(path=str(shot))
            _small(shot)
            shots.append(shot)
            page.set_viewport_size({"width": 1280, "height": 800})
        browser.close()
    return shots


def _small(shot: Path) -> None:
    """The PNG in 64 colours: a tenth of the bytes, text still sharp."""
    from PIL import Image

    Image.open(shot).convert("RGB").quantize(64).save(shot, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--shots", type=Path, help="write screenshots here (the store is recorded first if missing)")
    parser.add_argument("--prefix", default="after", help="screenshot file names start with this (before, after)")
    args = parser.parse_args()
    if not args.store.exists():
        t0 = time.perf_counter()
        build(args.store)
        print(f"recorded {sum(1 for d in args.store.iterdir() if (d / 'run.json').exists())} runs in {time.perf_counter() - t0:.0f} s")
    if args.shots:
        for shot in screenshots(args.store, args.shots, args.prefix):
            print(shot)


if __name__ == "__main__":
    main()
