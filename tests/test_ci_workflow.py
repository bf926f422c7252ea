"""The GitHub Actions workflow of docs/ci.md, run step by step as Actions would (each `run:` under
`bash -e`, or its own `shell:`; `if: always()` steps after a failure), against a small git
repository whose pull requests change its own JAX package `mymodel` (at the repository's root, as
many are), each side in its own checkout folder and environment, on this shared 2-core machine.

What a CI owner needs from the gate on such a runner (issue "gate-decides"): comment-only pull
requests exit 0 with nothing CHANGED (the program hash ignores the checkouts' paths and line
numbers; the timing, which this runner cannot judge, is not held against them); a PR that changes
the computation (+0.7 % FLOPs) is named CHANGED with the numbers; a 3x slower step exits 1; a
crashing PR exits 4 and is named the PR's; +33 % device memory exits 1. Also: each side imports its
own install (not its checkout), each run records its own commit, and a rerun on the same runner
after a job that never reached its clean-up works. tpu-perf is installed from a wheel of this
checkout (no index: dependencies come from the test's environment on PYTHONPATH).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, user_env

pytestmark = pytest.mark.slow

MODEL = '''import jax
import jax.numpy as jnp

WHO = "main"
WORK = 4
WIDTH = 192


@jax.jit
def step(w, x):
    def body(_, h):
        return jnp.tanh(h @ w)

    h = jax.lax.fori_loop(0, WORK, body, x)
    return w - 1e-3 * (h.T @ x) / WIDTH


def init():
    return jnp.eye(WIDTH) * 0.5, jnp.ones((WIDTH, WIDTH)) * 0.01
'''

TRAIN = '''import argparse
import os

import mymodel

with open(os.path.join(os.environ["GITHUB_WORKSPACE"], "who.txt"), "a") as f:
    f.write(f"{mymodel.WHO} {mymodel.__file__}\\n")
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
steps = parser.parse_args().steps
w, x = mymodel.init()
for i in range(steps):
    w = mymodel.step(w, x)
    w.block_until_ready()
'''

Edit = Callable[[str, str], tuple[str, str]]


def _sub(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)
    return edit


def _pr(model: Callable[[str], str] = str, train: Callable[[str], str] = str) -> Edit:
    return lambda m, t: (model(m), train(t))


PRS: dict[str, Edit] = {
    **{f"comment{i}": _pr(lambda m, i=i: f"# PR {i}: only comments\n" * i + m, lambda t, i=i: t.replace("import argparse", f"# comment {i}\nimport argparse")) for i in range(1, 6)},
    "flops": _pr(_sub("return w - 1e-3 * (h.T @ x) / WIDTH", "return (w - 1e-3 * (h.T @ x) / WIDTH) / (1 + 1e-6 * jnp.sum(w * w)) + 1e-6 * (w + w * w + w * w * w + w * w * w * w + w * w * w * w * w)")),  # +0.7 % FLOPs
    "slow": _pr(_sub("WORK = 4", "WORK = 14")),  # 15 matmuls a step for 5
    "crash": _pr(train=_sub("    w.block_until_ready()", "    w.block_until_ready()\n    if i == 5:\n        raise RuntimeError(\"the PR broke the step\")")),
    # +33 % device memory at the step's peak (XLA's liveness, the report's one peak): a wider
    # temporary live with the others. (An extra output the loop drops raises XLA's
    # peak_memory_in_bytes by a third but not the bytes live at the peak: XLA reuses a freed slot.)
    "memory": _pr(_sub("    return w - 1e-3 * (h.T @ x) / WIDTH", "    g = jnp.concatenate([h, h * 0.5, h[:, :64] * 0.25], axis=1)\n    return w - 1e-3 * (g[:, :WIDTH].T @ x + g[:, WIDTH:2 * WIDTH].T @ x + g[:, 2 * WIDTH:].sum() * x) / WIDTH")),
}
"""Each pull request's edit of (mymodel/__init__.py, train.py), on top of main."""


def workflow() -> dict:
    text = (ROOT / "docs" / "ci.md").read_text()
    section = text[text.index("## A GitHub Actions workflow"):]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def make_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """main and one branch per PR; {name: head sha}."""
    origin = root / "origin"
    (origin / "mymodel").mkdir(parents=True)
    (origin / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n[project]\nname = "mymodel"\nversion = "0"\n[tool.setuptools]\npackages = ["mymodel"]\n')
    git(origin, "init", "-q", "-b", "main")
    shas = {}
    for name, edit in {"main": _pr(), **PRS}.items():
        git(origin, "checkout", "-q", "-B", name, "main") if name != "main" else None
        model, train = edit(MODEL.replace('WHO = "main"', f'WHO = "{name}"'), TRAIN)
        (origin / "mymodel" / "__init__.py").write_text(model)
        (origin / "train.py").write_text(train)
        git(origin, "add", "-A")
        git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", name)
        shas[name] = git(origin, "rev-parse", "HEAD")
    git(origin, "checkout", "-q", "main")
    return origin, shas


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tpu-perf built once from this checkout: each job's install line (TPU_PERF_PIP)."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"  # a copy: an in-tree build would write build/ and *.egg-info into the checkout
    shutil.copytree(ROOT / "tpu_perf", source / "tpu_perf", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)], check=True, capture_output=True)
    (found,) = out.glob("tpu_perf-*.whl")
    return found


def run_job(workspace: Path, temp: Path, head: str, wheel: Path, *, pairs: int = 2, stop_before_cleanup: bool = False) -> dict[str, subprocess.CompletedProcess[str]]:
    """The job's `run:` steps in order; {step name: its process}."""
    job = workflow()["jobs"]["perf"]
    env = {**user_env(), **{k: str(v) for k, v in job["env"].items()}}
    site = sysconfig.get_paths()["purelib"]
    env.update(PAIRS=str(pairs), RUNNER_TEMP=str(temp), GITHUB_WORKSPACE=str(workspace), GITHUB_STEP_SUMMARY=str(workspace / "summary.md"),
               TPU_PERF_PIP=str(wheel), PYTHONPATH=site, PIP_NO_INDEX="1", PIP_NO_DEPS="1", PIP_NO_BUILD_ISOLATION="0", JAX_PLATFORMS="cpu",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    values = {"runner.temp": str(temp), "github.base_ref": "main", "github.event.pull_request.head.sha": head}
    git(workspace, "fetch", "-q", "origin")  # actions/checkout: fetch, check out, clean (its `clean: true`)
    git(workspace, "checkout", "-q", "--force", "--detach", head)
    git(workspace, "clean", "-q", "-ffdx")
    results, failed = {}, False
    timings = {}
    for step in job["steps"]:
        if "run" not in step or (failed and step.get("if") != "always()"):
            continue
        if stop_before_cleanup and step["name"].startswith("clean up"):
            break
        script = re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values[m.group(1)], step["run"])
        step_env = {k: re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values[m.group(1)], v) for k, v in env.items()}
        shell = ["bash", "-c"] if step.get("shell") == "bash {0}" else ["bash", "-e", "-c"]
        t0 = time.perf_counter()
        proc = subprocess.run([*shell, script], cwd=workspace, env=step_env, capture_output=True, text=True, timeout=600)
        timings[step["name"][:20]] = round(time.perf_counter() - t0, 1)
        results[step["name"]] = proc
        failed = failed or proc.returncode != 0
        assert step["name"] == "check" or proc.returncode == 0, f"{step['name']}: {proc.stdout}\n{proc.stderr}"
    print(f"job {head[:8]}: {timings}")
    return results


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> dict[str, dict[str, object]]:
    """Every PR's job on one runner (one workspace, one $RUNNER_TEMP), the first cancelled before
    its clean-up: {pr: {"exit": check's exit code, "stdout", "md": perf.md, "who": who.txt lines,
    "summary"}}."""
    root = tmp_path_factory.mktemp("ci")
    origin, shas = make_repo(root)
    workspace, temp = root / "workspace", root / "runner-temp"
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
    temp.mkdir()
    out: dict[str, dict[str, object]] = {}
    for i, pr in enumerate(PRS):
        steps = run_job(workspace, temp, shas[pr], wheel, pairs=4 if pr == "slow" else 2, stop_before_cleanup=i == 0)
        check = steps["check"]
        out[pr] = {"exit": check.returncode, "stdout": check.stdout + check.stderr, "md": (workspace / "perf.md").read_text(),
                   "who": (workspace / "who.txt").read_text().splitlines(), "summary": (workspace / "summary.md").read_text(), "sha": shas[pr], "main": shas["main"]}
        assert i == 0 or not (temp / "perf").exists(), "the clean-up step removes the checkouts and environments"
    return out


def verdicts(markdown: str) -> list[str]:
    """The verdict column of the check table (deciding and not)."""
    return [row.split("|")[2].strip() for row in markdown.splitlines() if row.startswith("| ") and not row.startswith("| check")]


@pytest.mark.parametrize("pr", [f"comment{i}" for i in range(1, 6)])
def test_comment_only_prs_exit_0_with_nothing_changed(jobs: dict, pr: str) -> None:
    job = jobs[pr]
    assert job["exit"] == 0, job["stdout"]
    assert not any(re.search(r"\bCHANGED\b", v) for v in verdicts(job["md"])), job["md"]
    assert re.search(r"\| hlo \| ✅ PASS", job["md"]) and re.search(r"\| flops_per_step \| ✅ PASS", job["md"])


def test_each_side_imports_its_own_install_and_records_its_commit(jobs: dict) -> None:
    job = jobs["comment3"]
    assert sorted(line.split()[0] for line in job["who"]) == ["comment3", "comment3", "main", "main"]
    for line in job["who"]:
        side = "baseline" if line.startswith("main") else "candidate"
        assert f"/perf/venv-{side}/" in line and "site-packages/mymodel" in line, line  # not the checkout's mymodel/
    assert re.search(rf"- baseline: {job['main']}, package \S*/venv-baseline/\S*site-packages/mymodel/__init__.py", job["summary"])
    assert re.search(rf"- candidate: {job['sha']}, package \S*/venv-candidate/\S*site-packages/mymodel/__init__.py", job["summary"])
    assert job["main"][:12] in job["md"] and job["sha"][:12] in job["md"]


def test_a_changed_computation_is_named_changed_with_its_numbers(jobs: dict) -> None:
    md = jobs["flops"]["md"]
    assert re.search(r"\*\*What the PR changed:\*\* [^\n]*FLOPs per step: [\d.,]+ MFLOP -> [\d.,]+ MFLOP \(\+0\.[67]\d %\): the step's program changed", md), md
    assert re.search(r"\| hlo \| 🔁 CHANGED", md)


def test_a_3x_slower_step_exits_1(jobs: dict) -> None:
    job = jobs["slow"]
    assert job["exit"] == 1, job["stdout"]
    assert re.search(r"\| step_time \| ❌ REGRESSION", job["md"]), job["md"]


def test_a_crashing_pr_exits_4_and_is_named_the_prs(jobs: dict) -> None:
    job = jobs["crash"]
    assert job["exit"] == 4, job["stdout"]
    assert "**Whose is it:** the PR's" in job["md"] and "failed: RuntimeError: the PR broke the step" in job["md"]
    errors = [line for line in str(job["stdout"]).splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and "check runs" in errors[0], errors  # no second one from timings of the crashed runs


def test_more_device_memory_exits_1(jobs: dict) -> None:
    job = jobs["memory"]
    assert job["exit"] == 1, job["stdout"]
    assert re.search(r"\| peak_memory \| ❌ REGRESSION \| [^|]+ \| [^|]+ \| \+3\d\.\d %", job["md"]), job["md"]
