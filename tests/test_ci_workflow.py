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

Two jobs (FULL) run every step for both sides; the other seven share the first one's baseline
install and recordings (`run_job(shared=...)`), which cut the module from over 600 s (the timeout,
8 of 9 jobs done) to 204-381 s at load 6-10; the 3x slower PR's recordings take 40 steps, not 100
(181 s at load 4.5-5 before; 139 s with 4 pairs at load 3-5, 165 s with 5 at load 4-6). The CPU form times steps by CPU time (`--timing cpu`). docs/ci.md's
second form of the job (a TPU runner, `--require-timing`, wall time) is held to differ only where
marked, and its `check` step runs on the FULL jobs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import replace
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


WORKFLOWS = {"cpu": "### On a shared CPU runner", "tpu": "### On a TPU runner"}
"""docs/ci.md's two forms of the job, by the heading above each one's yaml."""


def workflow(kind: str = "cpu") -> dict:
    text = (ROOT / "docs" / "ci.md").read_text()
    section = text[text.index(WORKFLOWS[kind]):]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def step_script(job: dict, name: str) -> str:
    return next(step["run"] for step in job["steps"] if step.get("name") == name)


ONE_SIDE = (('for side in baseline candidate; do', 'for side in candidate; do'), ('order="baseline candidate"; [ $((i % 2)) = 0 ] && order="candidate baseline"', 'order="candidate"'))
"""A job that shares the baseline's recordings (`run_job(shared=...)`) runs every step for the
candidate side alone: these edits of the documented scripts, each asserted to apply."""


DOC_STEPS = "--steps 100"
"""The documented recordings' length; the 3x slower PR's job records 40 steps (`run_job(steps=...)`):
its comparisons need far fewer, and its 8 recordings of a 3x longer step were the module's costliest
step (47 s of 181 s at load 5). It records 5 pairs (the documented PAIRS): the TPU form times it by
wall clock, where a baseline run in the slow mode read 3x as +89 % (interval +25 .. +186 %, 4 pairs,
each side's CV 41 % and 3 %), BAD_DATA with about 5 pairs named as what would decide it."""


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


def run_job(workspace: Path, temp: Path, head: str, wheel: Path, *, pairs: int = 2, steps: int | None = None, stop_before_cleanup: bool = False, shared: Path | None = None, tpu_check: bool = False) -> dict[str, subprocess.CompletedProcess[str]]:
    """The job's `run:` steps in order; {step name: its process}. `steps`: each recording's steps
    instead of the documented 100 (asserted to apply). `shared`: a folder of baseline runs
    recorded by an earlier job of this runner (same base commit), copied in before `check`, and the
    steps run for the candidate side alone (ONE_SIDE). `tpu_check`: the TPU form's `check` step
    (with --require-timing) runs too, on the same runs, just before the CPU form's, as "check:tpu"."""
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
    timings: dict[str, float] = {}
    edited: set[str] = set()

    def run(name: str, script: str, shell: list[str]) -> subprocess.CompletedProcess[str]:
        script = re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values[m.group(1)], script)
        step_env = {k: re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values[m.group(1)], v) for k, v in env.items()}
        t0 = time.perf_counter()
        proc = subprocess.run([*shell, script], cwd=workspace, env=step_env, capture_output=True, text=True, timeout=600)
        timings[name[:20]] = round(time.perf_counter() - t0, 1)
        return proc

    for step in job["steps"]:
        if "run" not in step or (failed and step.get("if") != "always()"):
            continue
        if stop_before_cleanup and step["name"].startswith("clean up"):
            break
        script = step["run"]
        if steps is not None and DOC_STEPS in script:
            edited |= {DOC_STEPS}
            script = script.replace(DOC_STEPS, f"--steps {steps}")
        if shared is not None:
            for old, new in ONE_SIDE:
                edited |= {old} if old in script else set()
                script = script.replace(old, new)
            if step["name"] == "check":
                for run_dir in shared.iterdir():
                    shutil.copytree(run_dir, workspace / "perf-runs" / run_dir.name)
        shell = ["bash", "-c"] if step.get("shell") == "bash {0}" else ["bash", "-e", "-c"]
        if step["name"] == "check" and tpu_check:
            results["check:tpu"] = run("check:tpu", step_script(workflow("tpu")["jobs"]["perf"], "check"), shell)
        results[step["name"]] = proc = run(step["name"], script, shell)
        failed = failed or proc.returncode != 0
        assert step["name"] == "check" or proc.returncode == 0, f"{step['name']}: {proc.stdout}\n{proc.stderr}"
    assert shared is None or edited >= {old for old, _ in ONE_SIDE}, "docs/ci.md's steps changed: update ONE_SIDE"
    assert steps is None or DOC_STEPS in edited, f"docs/ci.md's record step lost {DOC_STEPS!r}: update DOC_STEPS"
    print(f"job {head[:8]}: {timings}")
    return results


def baseline_runs(store: Path, into: Path) -> Path:
    """The store's baseline runs (tag side=baseline) copied into `into`: what later jobs share."""
    into.mkdir()
    for run_json in store.glob("*/run.json"):
        if json.loads(run_json.read_text()).get("tags", {}).get("side") == "baseline":
            shutil.copytree(run_json.parent, into / run_json.parent.name)
    return into


FULL = ("comment1", "slow")
"""PRs whose job runs every documented step for both sides (comment1 is cancelled before its
clean-up; the next job's clean start is the rerun). The others share comment1's baseline runs."""


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> dict[str, dict[str, object]]:
    """Every PR's job on one runner (one workspace, one $RUNNER_TEMP): {pr: {"exit": check's exit
    code, "stdout", "md": perf.md, "who": who.txt lines, "summary", and for FULL ones "tpu": the TPU
    form's check}}. The baseline side (install and recordings) is made by comment1's job and shared
    by the PRs outside FULL, as each of them records against the same main: a runner that made it
    once; their pairs are then not back to back, which only makes their timing noisier."""
    root = tmp_path_factory.mktemp("ci")
    origin, shas = make_repo(root)
    workspace, temp = root / "workspace", root / "runner-temp"
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
    temp.mkdir()
    out: dict[str, dict[str, object]] = {}
    shared = None
    for i, pr in enumerate(PRS):
        full = pr in FULL
        steps = run_job(workspace, temp, shas[pr], wheel, pairs=5 if pr == "slow" else 2, steps=40 if pr == "slow" else None, stop_before_cleanup=i == 0, shared=None if full else shared, tpu_check=full)
        check = steps["check"]
        out[pr] = {"exit": check.returncode, "stdout": check.stdout + check.stderr, "md": (workspace / "perf.md").read_text(),
                   "who": (workspace / "who.txt").read_text().splitlines(), "summary": (workspace / "summary.md").read_text(), "sha": shas[pr], "main": shas["main"]}
        if "check:tpu" in steps:
            out[pr]["tpu"] = {"exit": steps["check:tpu"].returncode, "stdout": steps["check:tpu"].stdout + steps["check:tpu"].stderr}
        if shared is None:
            shared = baseline_runs(workspace / "perf-runs", root / "baseline-runs")
        if pr.startswith("comment"):
            for run_json in (workspace / "perf-runs").glob("*/run.json"):
                if run_json.parent.name not in {p.name for p in shared.iterdir()}:
                    shutil.copytree(run_json.parent, root / "comment-runs" / run_json.parent.name)
        assert i == 0 or not (temp / "perf").exists(), "the clean-up step removes the checkouts and environments"
    out["_comment_runs"] = {"candidates": root / "comment-runs", "baseline": shared}
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
    job = jobs["comment1"]
    assert sorted(line.split()[0] for line in job["who"]) == ["comment1", "comment1", "main", "main"]
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
    """Timed by the process's CPU time per step (`--timing cpu`: every run ran on this CPU and computed
    through its step), the Markdown saying so; the wall-clock step time shown beside it, not deciding."""
    job = jobs["slow"]
    assert job["exit"] == 1, job["stdout"]
    assert re.search(r"\| cpu_step_time \| ❌ REGRESSION", job["md"]), job["md"]
    assert "Timing: CPU time per step decides (--timing cpu)" in job["md"], job["md"]
    assert re.search(r"\| step_time \|  \(\w+, not deciding\)", job["md"]), job["md"]


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


def test_the_tpu_form_differs_only_where_marked() -> None:
    cpu, tpu = workflow("cpu"), workflow("tpu")
    assert cpu["jobs"]["perf"]["runs-on"] == "ubuntu-latest" and tpu["jobs"]["perf"]["runs-on"] == ["self-hosted", "tpu-v6e"]
    assert "--require-timing" in step_script(tpu["jobs"]["perf"], "check") and "--require-timing" not in step_script(cpu["jobs"]["perf"], "check")
    assert "--timing cpu" in step_script(cpu["jobs"]["perf"], "check") and "--timing" not in step_script(tpu["jobs"]["perf"], "check")
    for job in (cpu, tpu):
        job["jobs"]["perf"].pop("runs-on")
        job["jobs"]["perf"]["env"].pop("TPU_PERF_PIP")
        for step in job["jobs"]["perf"]["steps"]:
            if step.get("name") == "check":
                step["run"] = re.sub(r" --(require-timing|timing cpu)\s+# \[differs\]", "", step["run"])
    assert cpu == tpu  # every other step and setting the same: one job, two deciding rules


def test_the_tpu_form_lets_timing_decide(jobs: dict) -> None:
    """The TPU form's check never passes an unchanged PR for its program (--require-timing: no
    UNCHANGED): its timing decides, on this shared CPU from two noisy pairs, so it exits 0 only where
    that timing passed; and a 3x slower step exits 1 in both forms."""
    tpu = jobs["comment1"]["tpu"]
    assert "UNCHANGED" not in tpu["stdout"]  # timing decides alone: never passed for its program
    # on this shared CPU its two pairs' timing may read anything; exit 0 only where timing passed it
    decided = re.search(r"\b(PASS|IMPROVEMENT)\s+exit 0\b", tpu["stdout"])
    assert tpu["exit"] in (1, 3, 4) or (tpu["exit"] == 0 and decided), tpu["stdout"]
    assert jobs["slow"]["tpu"]["exit"] == 1, jobs["slow"]["tpu"]["stdout"]


def test_the_all_in_guard_never_fails_an_unchanged_program_alone_on_real_runs(jobs: dict) -> None:
    """Every ordered choice of two of the comment-only PRs' real candidate runs (the same program as
    main, recorded from five clones on this loaded runner) against the shared baseline pairs: the
    all-in guard never decides a REGRESSION while the steady step is undecided (the false
    REGRESSION a comment-only PR once got from it alone), and a draw that fails does so on its
    steady step. (Such draws exist: a process keeps one of two speed modes for its life, which
    pairing does not cancel; docs/ci.md, "Timing on a shared CPU", gives the rates.)"""
    import itertools
    from itertools import permutations

    from tpu_perf.analyzers.regression import CheckOptions, Verdict, check_sets
    from tpu_perf.analyzers.run_values import run_values
    from tpu_perf.commands.selectors import select

    where = jobs["_comment_runs"]
    base = sorted(map(run_values, select(["tag:side=baseline"], str(where["baseline"]), flag="--store").runs), key=lambda r: r.tags["pair"])
    cands = list(map(run_values, select(["tag:side=candidate"], str(where["candidates"]), flag="--store").runs))
    assert len(base) == 2 and len(cands) == 10
    counts = {timing: {"guard shown": 0, "REGRESSION": 0} for timing in ("wall", "cpu")}
    for (one, two), timing in itertools.product(permutations(cands, 2), ("wall", "cpu")):
        pair = [replace(one, tags={**one.tags, "pair": base[0].tags["pair"]}), replace(two, tags={**two.tags, "pair": base[1].tags["pair"]})]
        result = check_sets(base, pair, CheckOptions(pair_by="pair", timing=timing))
        by = {c.name: c for c in result.checks}
        guard, step, wall = by["all_in_step_time"], by[result.basis], by["step_time"]
        assert result.basis == ("cpu_step_time" if timing == "cpu" else "step_time"), result.timing_reason
        counts[timing]["guard shown"] += guard.verdict == Verdict.REGRESSION
        if result.verdict == Verdict.REGRESSION:
            counts[timing]["REGRESSION"] += 1
            past_noise = guard.decides and guard.verdict == Verdict.REGRESSION and (guard.low or 0) > 1 + max(step.detectable or 0, wall.detectable or 0)
            assert step.verdict == Verdict.REGRESSION or past_noise, [c.message for c in result.checks]
        else:
            assert result.exit_code == 0, [c.message for c in result.checks]
    print(f"90 draws of real unchanged runs, by clock: {counts}")
