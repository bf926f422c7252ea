"""`tpu-perf check` end to end on real recordings of a step with a known cost (`--work`).

Recorded once per module (the CPU is shared). The gate's statistics need no framework: a pure-Python
loop marked with `tpu_perf.step()` that waits (gate_loop.py, about a second a recording) gives 5 baseline runs
and 5 of the identical command, 3 runs with twice the work, 4 runs alternating 0.5x and 2x work
(large run-to-run noise around the baseline's speed: a candidate that alternated 1x and 2x would
really be slower). What needs JAX (the detected chip, FLOPs for MFU) is a JAX step (gate_step.py):
2 runs as detected and 2 declared on another chip. The expected numbers are computed here from the
raw steps tables.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, report_doc, tpu_perf_cli
from scipy import stats

SCRIPT = str(ROOT / "tests" / "scripts" / "gate_loop.py")
JAX_SCRIPT = str(ROOT / "tests" / "scripts" / "gate_step.py")
# One XLA thread: the step's time then depends less on what else the shared machine runs.
ENV = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}

pytestmark = pytest.mark.slow


def record_args(store: str, side: str, *extra: str, work: int = 50, repeat: int = 1, jax: bool = False) -> list[str]:
    script = [JAX_SCRIPT, "--work", str(work), "--width", "64"] if jax else [SCRIPT, "--work", str(work)]
    return ["record", "--store", store, "--repeat", str(repeat), "--tag", f"side={side}", "--name", "gate", "--no-trace", "-q", *extra, *script, "--steps", "40"]


def record_in_two_streams(*streams: list[list[str]]) -> None:
    """Two sequences of `record` commands side by side, each one command after another: on 2 cores
    a loop that waits keeps its step time while the other stream's process starts beside it."""

    def run(stream: list[list[str]]) -> list:
        return [tpu_perf_cli(*args, env=ENV) for args in stream]

    with ThreadPoolExecutor(len(streams)) as pool:
        for proc in [p for done in pool.map(run, streams) for p in done]:
            assert proc.returncode == 0, f"{' '.join(proc.args)} exited {proc.returncode}\n{proc.stderr}"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("check") / "runs")
    record_in_two_streams(
        [record_args(path, "base", repeat=5), record_args(path, "slow", work=100, repeat=3)],
        [record_args(path, "same", repeat=5), *(record_args(path, "noisy", work=work) for work in (25, 100, 25, 100))],  # half and twice the base's work: as fast as it on average, very noisy
    )
    # JAX detects the chip (cpu) and gives the FLOPs; these sides are compared for fields, not times
    record_in_two_streams([record_args(path, "cpu", repeat=2, jax=True)], [record_args(path, "chip", "--chip", "v6e", repeat=2, jax=True)])
    return path


def check(store: str, *args: str, env: dict[str, str] | None = None):
    return tpu_perf_cli("check", "--store", store, *args, env={**ENV, **(env or {})})


def check_json(store: str, *args: str) -> tuple[int, dict]:
    proc = check(store, *args, "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def side_medians(store: str, side: str) -> dict[str, float]:
    """Each run's steady median step time, by hand: drop the first step, every step that compiled,
    and the last (tail) step, which no next step ended."""
    out = {}
    for folder in sorted(Path(store).glob("[!.]*")):  # (.index: the runs index)
        manifest = json.loads((folder / "run.json").read_text())
        if manifest["tags"].get("side") == side:
            steps = pd.read_parquet(folder / "steps.parquet").sort_values("start_time_s").iloc[1:-1]
            out[manifest["id"]] = float(steps.loc[~steps["compiled"].astype(bool), "duration_s"].median())
    return out


def test_repeat_records_fresh_processes_sharing_one_group_tag(store: str) -> None:
    manifests = [json.loads(p.read_text()) for p in Path(store).glob("*/run.json")]
    base = [m for m in manifests if m["tags"].get("side") == "base"]
    assert len(base) == 5 and {m["status"] for m in base} == {"completed"}
    assert len({m["pid"] for m in base}) == 5  # one process each
    assert len({m["tags"]["repeat"] for m in base}) == 1
    assert base[0]["tags"]["repeat"] != next(m for m in manifests if m["tags"].get("side") == "same")["tags"]["repeat"]
    assert all("--repeat" not in m["argv"] for m in base)


def test_identical_code_numbers_match_the_steps_tables(store: str) -> None:
    code, doc = check_json(store, "--baseline", "tag:side=base", "--candidate", "tag:side=same")
    base, same = side_medians(store, "base"), side_medians(store, "same")
    step = next(c for c in doc["checks"] if c["metric"] == "step_time")
    assert doc["baseline_runs"] == list(base) and doc["candidate_runs"] == list(same)
    assert step["baseline"] == pytest.approx(list(base.values()), rel=1e-12)
    x, y = np.log(list(base.values())), np.log(list(same.values()))
    d = y.mean() - x.mean()
    assert step["ratio"] == pytest.approx(math.exp(d), rel=1e-9)
    a, b = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    df = (a + b) ** 2 / (a**2 / (x.size - 1) + b**2 / (y.size - 1))
    half = stats.t.ppf(0.95, df) * math.sqrt(a + b)
    assert step["interval"] == pytest.approx([math.exp(d - half), math.exp(d + half)], rel=1e-9)
    cvs = [np.std(list(v.values()), ddof=1) / np.mean(list(v.values())) for v in (base, same)]
    assert [step["baseline_cv"], step["candidate_cv"]] == pytest.approx(cvs, rel=1e-9)
    # The verdict the rules give these numbers, worked out here:
    limit = math.log(1.03)
    by_rules = "REGRESSION" if d > limit and d - half > 0 else "IMPROVEMENT" if d < -limit and d + half < 0 else "PASS" if d + half <= limit else "INCONCLUSIVE"
    strict = stats.t.ppf(0.99, df) * math.sqrt(a + b)  # above --max-cv only an interval wholly beyond the margin at 99 % a side decides
    expected = by_rules if max(cvs) <= 0.05 or d - strict > limit or d + strict < -limit else "BAD_DATA"
    assert step["verdict"] == expected
    if doc["verdict"] == step["verdict"]:  # the all-in metric (also checked) can only make the verdict stricter
        assert code == {"PASS": 0, "IMPROVEMENT": 0, "REGRESSION": 1, "INCONCLUSIVE": 3, "BAD_DATA": 4}[expected]


def test_identical_code_passes_with_a_margin_above_the_machine_noise(store: str) -> None:
    proc = check(store, "--baseline", "tag:side=base", "--candidate", "tag:side=same", "--margin", "0.5", "--max-cv", "0.5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.lstrip().startswith("PASS")  # the verdict comes first


def test_twice_the_work_is_a_regression_in_every_output(store: str, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step output\n")
    junit, markdown = tmp_path / "check.xml", tmp_path / "check.md"
    proc = check(store, "--baseline", "tag:side=base", "--candidate", "tag:side=slow", "--max-cv", "0.5", "--junit", str(junit), "--markdown", str(markdown), "--github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "::error title=tpu-perf check step_time::REGRESSION: step time +" in proc.stdout
    assert "::error title=tpu-perf check all_in_step_time::REGRESSION: all-in step time +" in proc.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    failures = [(case.get("name"), f.get("type")) for case in suite.iter("testcase") for f in case.iter("failure")]
    assert failures == [("step_time", "REGRESSION"), ("all_in_step_time", "REGRESSION")] and suite.get("failures") == "2"
    text = markdown.read_text()
    assert "tpu-perf check: **REGRESSION** (exit 1)" in text and "| step_time | ❌ REGRESSION |" in text
    assert summary.read_text() == "earlier step output\n" + text + "\n"
    ratio = np.exp(np.mean(np.log(list(side_medians(store, "slow").values()))) - np.mean(np.log(list(side_medians(store, "base").values()))))
    assert 1.25 < ratio < 2.6  # twice the wait: about twice the step (the marks' own cost is not doubled)
    assert f"{(ratio - 1) * 100:+.1f} %" in text


def test_another_chip_is_not_comparable(store: str) -> None:
    code, doc = check_json(store, "--baseline", "tag:side=cpu", "--candidate", "tag:side=chip", "--max-cv", "0.3")
    assert (code, doc["verdict"], doc["differing_fields"]) == (5, "NOT_COMPARABLE", ["chip"])
    assert doc["checks"][0]["message"].startswith("chip: cpu -> tpu-v6e")
    code, doc = check_json(store, "--baseline", "tag:side=cpu", "--candidate", "tag:side=chip", "--max-cv", "0.3", "--ignore-fingerprint", "chip")
    assert doc["verdict"] != "NOT_COMPARABLE" and code != 5


def test_large_run_to_run_noise_is_never_pass_or_regression(store: str) -> None:
    code, doc = check_json(store, "--baseline", "tag:side=base", "--candidate", "tag:side=noisy")
    step = next(c for c in doc["checks"] if c["metric"] == "step_time")
    assert (code, step["verdict"]) == (4, "BAD_DATA") and step["candidate_cv"] > 0.2
    _, loose = check_json(store, "--baseline", "tag:side=base", "--candidate", "tag:side=noisy", "--max-cv", "0.9")
    step = next(c for c in loose["checks"] if c["metric"] == "step_time")
    assert step["verdict"] == "INCONCLUSIVE" and "runs a side would" in step["message"]


def test_saved_baseline_file_gives_the_same_answer(store: str, tmp_path: Path) -> None:
    path = tmp_path / "ci" / "main.json"
    saved = tpu_perf_cli("baseline", "save", "main", "tag:side=base", "--store", store, "--out", str(path))
    assert saved.returncode == 0, saved.stderr
    doc = json.loads(path.read_text())
    assert doc["kind"] == "tpu-perf-baseline" and doc["name"] == "main" and len(doc["runs"]) == 5
    fingerprint = doc["runs"][0]["fingerprint"]
    assert fingerprint["xla_flags"] == ENV["XLA_FLAGS"]
    assert fingerprint["chip"] is None and fingerprint["framework"] is None  # no framework: nothing detected, unknown not 0
    args = ("--candidate", "tag:side=slow", "--max-cv", "0.5")
    _, from_runs = check_json(store, "--baseline", "tag:side=base", *args)
    _, from_file = check_json(store, "--baseline", f"file:{path}", *args)
    assert from_file["checks"] == from_runs["checks"] and from_file["verdict"] == "REGRESSION"


def test_several_selectors_after_one_flag(store: str) -> None:
    ids = list(side_medians(store, "base"))
    _, doc = check_json(store, "--baseline", *ids[:4], "--candidate", "tag:side=same")
    assert doc["baseline_runs"] == ids[:4]


def test_bad_input_is_one_line_with_the_usage_or_data_exit_code(store: str, tmp_path: Path) -> None:
    missing = check(store, "--baseline", "tag:side=nothing", "--candidate", "tag:side=same")
    assert missing.returncode == 2 and "tag:side=nothing: no run in" in missing.stderr and "Traceback" not in missing.stderr
    assert check(store, "--candidate", "tag:side=same").returncode == 2
    assert check(store, "--baseline", "tag:side=base", "--candidate", "tag:side=same", "--margin", "3").returncode == 2
    damaged = tmp_path / "damaged.json"
    damaged.write_text('{"kind": "tpu-perf-baseline", "schema_version": 1, "runs": [{"name": "x"}]}')
    proc = check(store, "--baseline", f"file:{damaged}", "--candidate", "tag:side=same")
    assert proc.returncode == 4 and "malformed" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_repeat_stops_at_the_first_failing_run_with_its_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("raise SystemExit(7)\n")
    store = tmp_path / "runs"
    proc = tpu_perf_cli("record", "--store", str(store), "--repeat", "3", "-q", str(script))
    assert proc.returncode == 7
    assert "repeat 1/3 exited 7; stopping" in proc.stderr
    manifests = [json.loads(p.read_text()) for p in store.glob("*/run.json")]
    assert [(m["status"], m["exit_code"]) for m in manifests] == [("failed", 7)]


def test_mfu_is_the_default_metric_when_every_run_has_it(store: str) -> None:
    ids = [folder.name for folder in sorted(Path(store).glob("[!.]*")) if json.loads((folder / "run.json").read_text())["tags"].get("side") == "chip"]
    reports = [report_doc(run_id, store) for run_id in ids]
    assert all(r["mfu"] for r in reports)  # declared a v6e: utilisation against its peak
    _, doc = check_json(store, "--baseline", *ids, "--candidate", *ids)
    metrics = [c["metric"] for c in doc["checks"]]
    assert metrics[:9] == ["fingerprint", "runs", "mfu", "all_in_step_time", "peak_memory", "compiles", "flops_per_step", "bytes_accessed", "hlo"]
    assert metrics[9:] in ([], ["program"])  # "program": UNCHANGED, when these runs' noise leaves MFU undecided
    mfu = doc["checks"][2]
    assert mfu["baseline"] == [r["mfu"] for r in reports] and mfu["ratio"] == pytest.approx(1.0)
    assert mfu["lower_is_better"] is False
