"""The GitHub Actions workflow of docs/ci.md, run step by step as Actions would (each `run:` under
`bash -e`, or its own `shell:`; `if: always()` steps after a failure), against a small git
repository whose pull request changes its own package `mymodel`.

Asserts what the issue found broken: the baseline side imports the baseline's package (installed
non-editable in its own environment), each run records its own commit, a rerun on the same runner
(after a job that never reached its clean-up) works, and a crashing candidate reaches `check`,
which names the crash. tpu-perf is installed from this checkout (no index: TPU_PERF_PIP is the
checkout, dependencies come from the test's environment on PYTHONPATH).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, user_env

pytestmark = pytest.mark.slow

TRAIN = '''import os, time
import mymodel, tpu_perf
with open(os.path.join(os.environ["GITHUB_WORKSPACE"], "who.txt"), "a") as f:
    f.write(f"{mymodel.WHO} {mymodel.__file__}\\n")
for i in range(12):
    tpu_perf.step(i)
    time.sleep(0.002)
if mymodel.WHO == "crash":
    raise RuntimeError("the PR broke the step")
'''


def workflow() -> dict:
    text = (ROOT / "docs" / "ci.md").read_text()
    section = text[text.index("## A GitHub Actions workflow"):]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def make_repo(root: Path) -> tuple[Path, dict[str, str]]:
    origin = root / "origin"
    (origin / "src" / "mymodel").mkdir(parents=True)
    (origin / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n[project]\nname = "mymodel"\nversion = "0"\n')
    (origin / "train.py").write_text(TRAIN)
    shas = {}
    git(origin, "init", "-q", "-b", "main")
    for who in ("main", "pr", "crash"):
        if who != "main":
            git(origin, "checkout", "-q", "-B", "pr")
        (origin / "src" / "mymodel" / "__init__.py").write_text(f'WHO = "{who}"\n')
        git(origin, "add", "-A")
        git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", who)
        shas[who] = git(origin, "rev-parse", "HEAD")
    return origin, shas


def run_job(workspace: Path, temp: Path, head: str, *, stop_before_cleanup: bool = False) -> tuple[list[tuple[str, int]], dict[str, str]]:
    job = workflow()["jobs"]["perf"]
    env = {**user_env(), **{k: str(v) for k, v in job["env"].items()}}
    site = sysconfig.get_paths()["purelib"]
    env.update(PAIRS="2", RUNNER_TEMP=str(temp), GITHUB_WORKSPACE=str(workspace), GITHUB_STEP_SUMMARY=str(workspace / "summary.md"),
               TPU_PERF_PIP=str(ROOT), PYTHONPATH=site, PIP_NO_INDEX="1", PIP_NO_DEPS="1", PIP_NO_BUILD_ISOLATION="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    values = {"runner.temp": str(temp), "github.base_ref": "main", "github.event.pull_request.head.sha": head}
    git(workspace, "fetch", "-q", "origin")
    git(workspace, "checkout", "-q", "--detach", head)
    results, failed = [], False
    for step in job["steps"]:
        if "run" not in step or (failed and step.get("if") != "always()"):
            continue
        if stop_before_cleanup and step["name"].startswith("clean up"):
            break
        script = re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values[m.group(1)], step["run"])
        step_env = {k: re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values[m.group(1)], v) for k, v in env.items()}
        shell = ["bash", "-c"] if step.get("shell") == "bash {0}" else ["bash", "-e", "-c"]
        proc = subprocess.run([*shell, script], cwd=workspace, env=step_env, capture_output=True, text=True, timeout=600)
        results.append((step["name"], proc.returncode))
        failed = failed or proc.returncode != 0
        assert step["name"] == "check" or proc.returncode == 0, f"{step['name']}: {proc.stdout}\n{proc.stderr}"
    return results, env


def test_workflow_measures_each_sides_code_reruns_and_reports_a_crash(tmp_path: Path) -> None:
    origin, shas = make_repo(tmp_path)
    workspace, temp = tmp_path / "workspace", tmp_path / "runner-temp"
    subprocess.run(["git", "clone", "-q", str(origin), str(workspace)], check=True)
    temp.mkdir()
    results, _ = run_job(workspace, temp, shas["pr"], stop_before_cleanup=True)  # a job cancelled before its clean-up
    who = (workspace / "who.txt").read_text().splitlines()
    assert sorted(line.split()[0] for line in who) == ["main", "main", "pr", "pr"]
    for line in who:
        side = "baseline" if line.startswith("main") else "candidate"
        assert f"/perf/venv-{side}/" in line and "site-packages/mymodel" in line, line  # its own environment, not a checkout
    summary = (workspace / "summary.md").read_text()
    assert f"baseline: {shas['main']}" in summary and f"candidate: {shas['pr']}" in summary
    assert (workspace / "perf.xml").exists() and dict(results)["check"] in (0, 1, 3, 4)

    # The rerun on the same runner, leftovers in place; this time the PR's head crashes.
    (workspace / "who.txt").unlink()
    results, _ = run_job(workspace, temp, shas["crash"])
    assert dict(results)["check"] == 4
    markdown = (workspace / "perf.md").read_text()
    assert "failed: RuntimeError: the PR broke the step" in markdown
    assert shas["main"][:12] in markdown and shas["crash"][:12] in markdown
    assert not (temp / "perf").exists(), "the clean-up step removes the checkouts and environments"
