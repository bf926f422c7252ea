"""`tpu-perf record` on real JAX scripts: steps, timing, FLOPs, compiles, trace, exit codes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.conftest import ROOT, report_doc, tpu_perf_cli, user_env
from tests.invariants import check_run
from tpu_perf import load_run
from tpu_perf.analyzers.report import build_report
from tpu_perf.collectors.session import TRACE_EXTRA_STEPS

SCRIPT = ROOT / "tests" / "scripts" / "jax_selftimed.py"
WIDTH = 1536
"""A step of ~10-15 ms on CPU. The script's clock and tpu-perf's differ by what is not device work:
tpu-perf's own work before the dispatch, and the scheduler waking the script's thread after its outputs
are ready. Together 0.25 ms in one CI run, 8 % of a 3 ms step; 2 % of this one."""

pytestmark = pytest.mark.slow  # records real scripts in subprocesses (and serves them)
SERIAL = pytest.mark.serial  # times measured against each other: `make test` runs these alone, after the parallel part


def record(store: Path, out: Path, *script_args: str, record_args: tuple[str, ...] = ()) -> tuple[object, dict]:
    proc = tpu_perf_cli("record", "-q", "--store", str(store), *record_args, str(SCRIPT), str(out), *script_args)
    assert proc.returncode == 0, proc.stderr
    run = load_run(next(store.iterdir()))
    return run, json.loads(out.read_text())


@pytest.fixture(scope="module")  # its tests are SERIAL: one of them times the steps against the script's own clock
def auto_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, dict]:
    tmp = tmp_path_factory.mktemp("auto")
    return record(tmp / "runs", tmp / "self.json", "--steps", "40", "--width", str(WIDTH))


@SERIAL
def test_unmarked_script_steps_equal_steps_run(auto_run) -> None:
    run, selfm = auto_run
    assert run.status == "completed"
    assert len(run.steps) == selfm["steps"] == 40
    assert run.steps["source"].unique().tolist() == ["auto:jit(train_step)"]
    assert run.steps["step"].tolist() == list(range(40))


@SERIAL
def test_the_trace_start_and_stop_are_flagged_instrumented(auto_run) -> None:
    """Starting the profiler costs the step before the window what stopping it costs the one after:
    both iterations hold tpu-perf's own work and are left out of the statistics."""
    run, _ = auto_run
    s = run.steps
    first, last = int(s.loc[s["traced"], "step"].min()), int(s.loc[s["traced"], "step"].max())
    flagged = s.loc[s["instrumented"], "step"].tolist()
    assert first - 1 in flagged and len(flagged) == 2 and max(flagged) > last


@SERIAL
def test_median_step_time_matches_synchronized_measurement(auto_run) -> None:
    """Two clocks, the same steps: the iteration against the script's call-to-call time, the device
    view against its call-to-ready time."""
    run, selfm = auto_run
    doc = check_run(run)
    steps = run.steps.iloc[:-1]  # the last step has no next call in the script's own clock
    # The script's own timer also sees the ends of the trace window (start_trace in step 2's
    # iteration, stop_trace at the start of step 6, in its iteration; both marked instrumented):
    # leave the steps around them out of the comparison.
    keep = ~(steps["traced"] | steps["compiled"]) & (steps["step"] >= doc["steps"]["warmup"]) & ~steps["step"].isin([2, 5, 6])
    ours = steps.loc[keep, "duration_s"]
    theirs = [t for t, k in zip(selfm["iteration_s"], keep, strict=True) if k]
    assert ours.median() == pytest.approx(statistics.median(theirs), rel=0.05)
    per_step = [abs(o - t) / t for o, t in zip(ours, theirs, strict=True)]
    assert statistics.median(per_step) < 0.05
    device = steps.loc[keep, "device_s"]
    their_device = [t for t, k in zip(selfm["step_times_s"][:-1], keep, strict=True) if k]
    # the script's clock stops when its own thread wakes from block_until_ready, the watcher's when
    # the outputs are ready: 0.1-0.6 ms apart on a loaded 2-core machine (10.20 against 10.78 ms)
    assert device.median() == pytest.approx(statistics.median(their_device), rel=0.05, abs=1e-3)
    steady = run.steps.loc[~(run.steps["traced"] | run.steps["compiled"] | run.steps["tail"] | run.steps["instrumented"]) & (run.steps["step"] >= doc["steps"]["warmup"])]
    assert doc["steps"]["iteration_median_s"] == pytest.approx(steady["duration_s"].median())
    assert doc["steps"]["device_median_s"] == pytest.approx(steady["device_s"].median())


@SERIAL
def test_flops_per_step_equal_xla_cost_analysis(auto_run) -> None:
    import jax
    import jax.numpy as jnp

    run, _ = auto_run

    def loss_fn(params, x):
        h = jnp.tanh(x @ params["w1"])
        return jnp.mean((h @ params["w2"]) ** 2)

    def train_step(params, x):
        loss, grads = jax.value_and_grad(loss_fn)(params, x)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss

    w = jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32)
    compiled = jax.jit(train_step).lower({"w1": w, "w2": w}, jax.ShapeDtypeStruct((64, WIDTH), jnp.float32)).compile()
    expected = compiled.cost_analysis()["flops"]
    doc = build_report(run).to_dict()
    assert doc["flops"]["per_step"] == expected
    assert doc["flops"]["source"] == "xla_cost_analysis"
    assert doc["hlo"]["fusions"] is not None and doc["hlo"]["fusions"] > 0
    hlo = run.read_text(doc["programs"][0]["hlo_file"])
    assert "ENTRY" in hlo and "fusion" in hlo


@SERIAL
def test_trace_window_loads_with_profile_data(auto_run) -> None:
    from jax.profiler import ProfileData

    run, _ = auto_run
    files = [f for f in run.list_files("trace") if f.endswith(".xplane.pb")]
    assert len(files) == 1 and "/plugins/profile/" in files[0]
    data = ProfileData.from_file(run.file_path(files[0]))
    assert any(plane.name == "/host:CPU" for plane in data.planes)
    traced = run.steps.loc[run.steps["traced"].astype(bool), "step"].tolist()
    assert traced[:3] == [3, 4, 5] and traced == list(range(3, 3 + len(traced))) and len(traced) <= 3 + TRACE_EXTRA_STEPS  # held open while the window's device work runs


@SERIAL
def test_report_json_has_documented_keys(auto_run) -> None:
    run, _ = auto_run
    proc = tpu_perf_cli("report", "--json", run.url, check=True)
    doc = json.loads(proc.stdout)
    for dotted in ("run.id", "run.status", "run.exit_code", "steps.count", "steps.warmup", "steps.iteration_median_s", "steps.iteration_p90_s", "steps.step_s", "steps.step_basis", "program_hash", "compile.count", "compile.total_s", "compile.after_warmup", "flops.per_step", "flops.source", "mfu", "memory.peak_bytes", "memory.capacity_bytes", "hlo.fusions", "trace.files"):
        node = doc
        for part in dotted.split("."):
            assert part in node, dotted
            node = node[part]
    assert doc["steps"]["count"] == 40 and doc["run"]["exit_code"] == 0
    text = tpu_perf_cli("report", run.url, check=True).stdout
    assert "train_step" in text and "median" in text


@SERIAL
def test_host_running_ahead_still_reports_device_time(tmp_path: Path) -> None:
    run, selfm = record(tmp_path / "runs", tmp_path / "self.json", "--steps", "12", "--mode", "nosync", "--width", "768", record_args=("--no-trace",))
    assert len(run.steps) == 12
    # The loop never syncs (only once after it): dispatch alone would give near-zero steps. The
    # recorded steps are the device-bound iterations and tile the loop's wall time. The reference is
    # the loop's mean step or, when one step held a stall of the machine (a 90 ms step among 8 ms
    # ones on a busy CI machine), the script's median iteration (XLA:CPU's dispatch blocks on a full queue).
    per_step = min(selfm["steady_loop_s"] / 10, statistics.median(selfm["iteration_s"][2:]))
    assert run.steps["duration_s"].iloc[2:].median() > 0.5 * per_step
    # Our clock starts a step after the wait for the previous outputs, the script's before it: over
    # the same steps the two sums differ by at most the last step's wait (one device step; twice that for a busy machine).
    assert abs(run.steps["duration_s"].iloc[2:-1].sum() - sum(selfm["iteration_s"][2:])) < 2 * run.steps["device_s"].iloc[2:].max()
    # Device-bound: the step function's device time is most of the iteration (the batch function's
    # device work is the rest), and never more than it.
    steady = run.steps.iloc[2:-1]
    known = steady[steady["device_s"].notna()]  # null where the outputs were ready before the wait
    assert len(known) >= len(steady) // 2
    assert (known["device_s"] <= known["duration_s"] + 1e-9).all()
    assert known["device_s"].median() > 0.5 * known["duration_s"].median()


@pytest.mark.parametrize("mode, source", [("annotation", "annotation"), ("explicit", "explicit")])
def test_marked_steps_win_over_automatic_detection(tmp_path: Path, mode: str, source: str) -> None:
    run, selfm = record(tmp_path / "runs", tmp_path / "self.json", "--steps", "8", "--mode", mode, "--sleep", "0.02", record_args=("--no-trace",))
    assert len(run.steps) == 8
    assert run.steps["source"].unique().tolist() == [source]
    if mode == "annotation":
        assert run.steps["step_num"].tolist() == list(range(8))
    # The sleep after each `with` block is in the iteration (steps tile), not in the block.
    theirs = statistics.median(selfm["iteration_s"][1:])
    assert run.steps["duration_s"].iloc[1:-1].median() == pytest.approx(theirs, rel=0.05, abs=0.002)
    assert (run.steps["end_time_s"].iloc[:-1].to_numpy() == run.steps["start_time_s"].iloc[1:].to_numpy()).all()
    device = statistics.median(selfm["step_times_s"][1:])
    assert run.steps["device_s"].iloc[1:].median() == pytest.approx(device, rel=0.25, abs=0.002)
    assert run.steps["device_s"].iloc[1:].median() < 0.02 < run.steps["duration_s"].iloc[1:-1].median()


@SERIAL
def test_recompile_after_warmup_stands_out(tmp_path: Path) -> None:
    run, _ = record(tmp_path / "runs", tmp_path / "self.json", "--steps", "10", "--reshape-at", "6", record_args=("--no-trace",))
    doc = build_report(run).to_dict()
    # Iterations run dispatch to dispatch: the batch function's recompile for the new shape runs
    # before step 6's dispatch, in iteration 5; the step function's own recompile is in step 6.
    assert run.steps["compiled"].tolist() == [i in (0, 5, 6) for i in range(10)]
    assert doc["compile"]["after_warmup"] >= 1
    assert any("train_step" in name for name in doc["compile"]["after_warmup_functions"])
    assert doc["steps"]["compiled_after_warmup"] == 2


def test_module_mode_argv_and_exit_code(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import sys\nif __name__ == '__main__':\n    print('ARGV', sys.argv[1:])\n    sys.exit(int(sys.argv[1]))\n"
    )
    proc = tpu_perf_cli("record", "-q", "--store", str(tmp_path / "runs"), "-m", "mypkg.train", "3", "--flag", cwd=tmp_path)
    assert proc.returncode == 3
    assert "ARGV ['3', '--flag']" in proc.stdout
    run = load_run(next((tmp_path / "runs").iterdir()))
    assert run.status == "failed" and run.manifest["exit_code"] == 3
    assert run.manifest["command"] == ["-m mypkg.train", "3", "--flag"]


def _record_with_libtpu_probed(tmp_path: Path, extra_path: str | None = None) -> tuple[object, object]:
    """Record with JAX_PLATFORMS unset, so jax loads libtpu's plugin as it does on a TPU VM."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in user_env().items() if k != "JAX_PLATFORMS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(ROOT)) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "tpu_perf", "record", "-q", "--store", str(tmp_path / "runs"), str(SCRIPT), str(tmp_path / "o.json"), "--steps", "8"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, load_run(next((tmp_path / "runs").iterdir()))


def test_jax_tpu_pair_without_a_tpu_keeps_the_trace_window(tmp_path: Path) -> None:
    """The `tpu` extra installs jax[tpu]: its own libtpu, which traces fine with no TPU attached."""
    from tpu_perf.pairing import distributions, pairing

    pin = pairing(distributions(), "jax", "libtpu", "tpu")
    assert pin is not None and pin.found is not None and pin.ok, f"this environment must hold jax's own libtpu (make test builds it): {pin}"
    _, run = _record_with_libtpu_probed(tmp_path)
    assert run.status == "completed" and len(run.steps) == 8
    traced = run.steps.loc[run.steps["traced"].astype(bool), "step"].tolist()
    assert traced[:3] == [3, 4, 5] and len(traced) <= 3 + 1  # the default window, steps 3..5 (held open while their device work runs: docs/traces.md)
    assert run.list_files("trace") and any(f.endswith(".xplane.pb") for f in run.list_files("trace"))
    assert not [w for w in run.manifest["warnings"] if "trace" in w]


def test_a_hand_built_mismatched_libtpu_loses_only_the_trace_with_one_line(tmp_path: Path, wrong_libtpu: Path) -> None:
    """libtpu 0.0.52 ahead of jax's own on the path: the profiler would segfault; the run must not."""
    _, run = _record_with_libtpu_probed(tmp_path, str(wrong_libtpu))
    assert run.status == "completed" and len(run.steps) == 8 and not run.list_files("trace")
    from tpu_perf.pairing import distributions, version

    jax_version = version(distributions(), "jax")
    lines = [w for w in run.manifest["warnings"] if w.startswith("no trace window")]
    assert lines == [f"no trace window: jax {jax_version} needs libtpu==0.0.42.* (its tpu extra) but libtpu 0.0.52 is installed, and jax.profiler crashes with that pair; install the pair jax chose: pip install 'jax[tpu]=={jax_version}' (see `tpu-perf doctor`)"]


@SERIAL  # beside the other worker the count once reached 30 against 13 (not seen alone, nor beside a CPU hog)
def test_recording_keeps_no_step_outputs_alive(tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path / "runs"), str(ROOT / "tests" / "scripts" / "jax_live_arrays.py"), str(out))
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(out.read_text())
    # two steps' outputs (11 arrays each) in flight at most, not 200: JAX keeps a running step's inputs
    # alive until it ends, so a loaded machine, running behind, holds the last step's too (26-30 beside
    # the other workers, against 13 first, in 3 full runs; 13-19 alone)
    assert counts["max"] <= counts["first"] + 2 * 11
    assert len(load_run(next((tmp_path / "runs").iterdir())).steps) == 200


@SERIAL
def test_top_ops_carry_fusion_kinds_from_the_step_hlo(auto_run) -> None:
    from tpu_perf.analyzers.hlo import parse_hlo

    run, _ = auto_run
    doc = build_report(run).to_dict()
    module = parse_hlo(run.read_text(doc["programs"][0]["hlo_file"]))
    kinds = {i.name: i.fusion_kind for i in module.instructions() if i.opcode == "fusion"}
    top = doc["ops"]["top"]
    fused = [o for o in top if o["name"] in kinds]
    assert fused, "the CPU trace names ops after HLO fusions"
    assert all(o["fusion_kind"] == kinds[o["name"]] for o in fused)
    assert all(o["fusion_kind"] is None for o in top if o["name"] not in kinds and o["name"].split(".")[0] in {"dot", "copy"})


def test_a_loop_with_no_detectable_step_says_how_to_mark_steps(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "-q", "--store", str(tmp_path / "runs"), str(ROOT / "tests" / "scripts" / "jax_eager.py"))
    assert proc.returncode == 0, proc.stderr
    run = load_run(next((tmp_path / "runs").iterdir()))
    assert run.status == "completed" and run.steps.empty
    assert any("no training steps found" in w and "tpu_perf.step()" in w for w in run.manifest["warnings"])
    assert "no training steps found" in proc.stderr
    assert report_doc(run.url)["steps"]["count"] == 0
