"""The advisor on real recordings: defective scripts and their fixed twins, the bundled examples,
and the evidence of every fired finding checked against the run's own tables and report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, advice_doc, report_doc, tpu_perf_cli
from tpu_perf import load_run
from tpu_perf.advise.rules import AFTER_RULES, RULES
from tpu_perf.views import format as fmt

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).resolve().parent / "scripts"
TORCH_SCRIPTS = Path(__file__).resolve().parent / "torch_scripts"
CATALOGUE = {"recompilation", "host-sync", "op-by-op", "unrolled-loop", "small-batch", "input-bound", "no-donation", "fp32-matmul", "mxu-padding",
             "graph-break", "exposed-collectives", "hbm-headroom", "hbm-pressure", "no-compile-cache", "straggler", "device-idle",
             "decode-small-batch", "fp32-kv-cache", "decode-recompiles", "decode-host-sync", "decode-no-cache", "prefill-stall", "unfused-attention"}
JAX_DEFECTS = {"recompilation", "host-sync", "no-donation", "unrolled-loop", "input-bound"}


def _record(store: Path, name: str, *args: str) -> Path:
    proc = tpu_perf_cli("record", "-q", "--store", str(store), "--name", name, *args, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return store


def _advise(store: Path, name: str, *extra: str) -> dict:
    """`advise --json [--target T]` computed in this process (conftest `advice_doc`); the command's
    own JSON is checked against it in test_report_shows_the_top_findings."""
    assert extra in ((), ("--target", "v6e")), extra
    return advice_doc(name, store, target=extra[1] if extra else None)


def _outcomes(doc: dict) -> dict[str, str]:
    return {f["id"]: f["outcome"] for f in doc["findings"]}


@pytest.fixture(scope="module")
def jax_runs(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("advise-jax")
    for mode in ("defective", "eager", "fixed"):
        _record(store, mode, str(SCRIPTS / "advise_defects.py"), "--mode", mode)
    return store


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("advise-torch")
    for mode in ("defective", "fixed"):
        _record(store, mode, str(TORCH_SCRIPTS / "advise_compiled.py"), "--mode", mode)
    return store


def test_every_rule_is_listed_once_with_an_outcome(jax_runs) -> None:
    doc = _advise(jax_runs, "fixed", "--target", "v6e")
    ids = [f["id"] for f in doc["findings"]]
    assert sorted(ids) == sorted(CATALOGUE) and len(ids) == len(RULES) + len(AFTER_RULES)
    assert doc["target"] == "tpu-v6e" and doc["target_from"] == "--target"
    for f in doc["findings"]:
        assert f["outcome"] in ("fired", "passed", "not_evaluable") and f["reason"]


def test_jax_defects_fire_and_their_fixed_twin_is_quiet(jax_runs) -> None:
    defective, fixed = _outcomes(_advise(jax_runs, "defective", "--target", "v6e")), _outcomes(_advise(jax_runs, "fixed", "--target", "v6e"))
    assert {i for i in JAX_DEFECTS if defective[i] == "fired"} == JAX_DEFECTS
    assert {i for i in JAX_DEFECTS | {"op-by-op"} if fixed[i] == "fired"} == set()


def test_an_unjitted_step_is_op_by_op(jax_runs) -> None:
    doc = _advise(jax_runs, "eager")
    eager = _outcomes(doc)
    assert eager["op-by-op"] == "fired" and eager["input-bound"] != "fired"  # the host gaps are op dispatch
    top = next(f for f in doc["findings"] if f["id"] == "op-by-op")
    assert top["expected_gain"]["factor"] > 1 and "jax.jit" in top["fix"]["jax"]
    ev = {e["name"]: e["value"] for e in top["evidence"]}  # untraced step / the eager matmuls' time (XLA:CPU ynn_fusion ops of jit_dot_general/jit_matmul)
    assert top["expected_gain"]["kind"] == "upper_bound" and 0 < ev["traced_matmul_s"] < ev["traced_device_ops_s"]
    assert top["expected_gain"]["factor"] == pytest.approx(ev["iteration_median_s"] / ev["traced_matmul_s"], rel=1e-4)


def test_hardware_rules_need_a_target_on_cpu(jax_runs) -> None:
    outcomes = {f["id"]: f for f in _advise(jax_runs, "fixed")["findings"]}
    for rule in ("fp32-matmul", "mxu-padding", "small-batch", "hbm-headroom", "hbm-pressure"):
        assert outcomes[rule]["outcome"] == "not_evaluable" and "--target" in outcomes[rule]["reason"]


def test_torch_graph_breaks_and_recompiles(torch_runs) -> None:
    defective, fixed = _advise(torch_runs, "defective", "--target", "v6e"), _outcomes(_advise(torch_runs, "fixed", "--target", "v6e"))
    got = {f["id"]: f for f in defective["findings"]}
    assert got["graph-break"]["outcome"] == "fired" and "`print`" in got["graph-break"]["reason"]
    assert got["recompilation"]["outcome"] == "fired"
    assert "torch._dynamo.explain" in got["graph-break"]["fix"]["pytorch"]
    assert fixed["graph-break"] == "passed" and fixed["recompilation"] == "passed" and fixed["input-bound"] != "fired"


def _resolve(doc: dict, path: str) -> object:
    """A report value by dotted key; `a + b` sums, `sum(x)` sums a dict, `programs[step].k` reads the step program."""
    path = path.split(" (")[0]
    if " + " in path:
        parts = [_resolve(doc, p) for p in path.split(" + ")]
        return next((p for p in parts if isinstance(p, KeyError)), None) or sum(p or 0 for p in parts)
    if path.startswith("sum(") and path.endswith(")"):
        inner = _resolve(doc, path[4:-1])
        return inner if isinstance(inner, KeyError) else sum(inner.values())
    if path == "programs[].is_step":
        return int(any(p.get("is_step") for p in doc.get("programs") or []))
    node: object = doc
    if path.startswith("programs[step]."):
        node, path = next(p for p in doc["programs"] if p["is_step"]), path.removeprefix("programs[step].")
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return KeyError(path)
        node = node[key]
    return node


def _per_traced_step(report: dict, name: str) -> float | KeyError:
    """Seconds per traced step (medians over the breakdown's step windows, part by part)."""
    rows = report["breakdown_detail"]["steps"]
    parts = {"traced_matmul_s": ("matmul", "collective"), "traced_device_ops_s": ("matmul", "collective", "data_movement", "compute"), "traced_step_s": ("step_s",)}
    if name not in parts:
        return KeyError(name)
    return sum(float(np.median([r[p] for r in rows])) for p in parts[name])


def _steady_times(run, report: dict) -> dict[str, float]:
    """Iteration, device and host medians over the steady steps, recomputed from steps.parquet:
    after warm-up, not compiled, not the tail step, not traced (while any untraced one is left)."""
    steps = run.steps.sort_values("start_time_s").reset_index(drop=True)
    keep = (np.arange(len(steps)) >= report["steps"]["warmup"]) & ~steps["compiled"].astype(bool).to_numpy() & ~steps["tail"].astype(bool).to_numpy()
    keep &= ~steps["instrumented"].astype(bool).to_numpy()  # the step that holds the trace window's stop
    if (keep & ~steps["traced"].astype(bool).to_numpy()).any():
        keep &= ~steps["traced"].astype(bool).to_numpy()
    iteration, device = steps["duration_s"].to_numpy(float)[keep], steps["device_s"].to_numpy(float)[keep]
    known = ~np.isnan(device)
    if not known.any():  # PyTorch: no device time per step
        return {"iteration_median_s": float(np.median(iteration))}
    return {"iteration_median_s": float(np.median(iteration)), "device_median_s": float(np.median(device[known])), "host_median_s": float(np.median(np.maximum(iteration[known] - device[known], 0.0)))}


def _from_hlo(run, report: dict, name: str, tile: int) -> float | KeyError:
    """HLO evidence recomputed from the run's saved step-program HLO with the analyzers."""
    from tpu_perf.analyzers.hlo import parse_hlo
    from tpu_perf.analyzers.hlo_analysis import analyze_hlo

    step = next(p for p in report["programs"] if p["is_step"])
    a = analyze_hlo(parse_hlo(run.read_text(step["hlo_file"])), tile=tile)
    if name == "f32_dot_share":  # the recorded scripts are f32 throughout: no narrower source dtype to see through
        return report["hlo"]["analysis"]["dot_flops_share_by_dtype"].get("f32", 0.0)
    if name == "padding_waste_fraction":
        return a.padding_waste
    if name == "dot_intensity_bf16":
        return sum(d.flops for d in a.dots) / sum(d.flops / (d.m * d.n * d.k) * (d.m * d.k + d.k * d.n + d.m * d.n) for d in a.dots)
    if name == "max_dot_repeats":  # the chain length shared by the most matmul FLOPs, a dot's role (its dimension numbers) part of its kind
        by_chain: dict[int, float] = {}
        for d in a.dots:
            if d.chain > 1:
                by_chain[d.chain] = by_chain.get(d.chain, 0.0) + d.flops
        return max(by_chain, key=by_chain.get)
    return KeyError(name)


def _from_tables(run, name: str, held_steps: float | None = None) -> float | None:
    """Evidence the report has no key for, recomputed here from the run's own tables (programs per
    step over the steps the trace holds, the report's `ops.steps`, else the traced steps)."""
    steps, compiles = run.steps, run.compiles
    jax_counts = run.manifest.get("jax") or {}
    syncs = (run.manifest.get("torch") or {}).get("syncs") or {}
    table = run.table("timeline")
    compiled = steps["compiled"].astype(bool).to_numpy()
    warmup = 1 if compiled.all() else max(1, int(np.argmin(compiled)))  # leading compiled steps; the first when all compiled
    return {
        "after_warmup_wall_s": _unprofiled(run, steps, warmup)[0].sum(),
        "steps_after_warmup_count": len(steps) - warmup,
        "recompile_excess_s": _excess(run, steps, warmup),
        "torch_syncs": syncs.get("count"),
        "torch_steps_with_sync": syncs.get("steps_with_sync"),
        "fetched_step_calls": jax_counts.get("fetched_step_calls"),
        "step_calls": jax_counts.get("step_calls"),
        # the share of steps that fetched: JAX's step calls, PyTorch's steps with a transfer
        "fetches_per_step": jax_counts.get("fetched_step_calls", 0) / jax_counts["step_calls"] if jax_counts.get("step_calls") else syncs["steps_with_sync"] / syncs["steps"] if syncs.get("steps") else None,
        "programs_per_step": (table["kind"] == "program").sum() / (held_steps or steps["traced"].sum()) if not table.empty else None,
        "distinct_compiled": compiles.loc[(compiles["event"] == "backend_compile") & compiles["function"].str.startswith("jit("), "function"].nunique(),
        "jitted_functions": jax_counts.get("jitted_functions"),
        "step_compile_s": compiles.loc[(compiles["event"] == "backend_compile") & (compiles["function"] == f"jit({_step_fn(run)})"), "duration_s"].max(),
    }.get(name, KeyError(name))


def _unprofiled(run, steps, warmup: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Durations of the steps after warm-up, a traced or instrumented one (the profiler slowed it) as
    the untraced ordinary median plus its recompile seconds; which held a recompile; that median."""
    c = run.compiles
    backend = c[c["event"] == "backend_compile"].sort_values("time_s")
    step_fn = _step_fn(run)
    again = backend["function"].duplicated() | (backend["function"] == f"jit({step_fn})")
    times, secs = backend.loc[again, "time_s"].to_numpy(), backend.loc[again, "duration_s"].to_numpy()
    after = steps.iloc[warmup:]
    inside = [(times > a) & (times <= b) for a, b in zip(after["start_time_s"], after["end_time_s"], strict=True)]
    durations, compiled = after["duration_s"].to_numpy(float), after["compiled"].astype(bool).to_numpy()
    profiled = (after["traced"].astype(bool) | after["instrumented"].astype(bool)).to_numpy()
    base = float(np.median(durations[~compiled & ~profiled]))
    durations = np.where(profiled, base + np.array([secs[m].sum() for m in inside]), durations)
    return durations, np.array([m.any() for m in inside]), base


def _excess(run, steps, warmup: int) -> float:
    """Steps after warm-up holding a recompile (a compile of a function compiled before, or of the
    step function), beyond the median untraced step after warm-up that did not compile."""
    durations, holds, base = _unprofiled(run, steps, warmup)
    return float(np.clip(durations[holds] - base, 0, None).sum())


def _step_fn(run) -> str | None:
    programs = run.programs
    return None if programs.empty else str(programs.loc[programs["is_step"].astype(bool), "function"].iloc[0])


def _evidence_checked(store: Path, name: str, *extra: str) -> int:
    run = load_run(str(next(p for p in store.iterdir() if p.is_dir() and json.loads((p / "run.json").read_text())["name"] == name)))
    report = report_doc(name, store)
    checked = 0
    for f in _advise(store, name, *extra)["findings"]:
        if f["outcome"] != "fired":
            continue
        for e in f["evidence"]:
            if not isinstance(e["value"], (int, float)) or e["source"] == "chip":
                continue
            if e["path"].startswith("step program"):
                expected = _from_hlo(run, report, e["name"], 256 if "v6e" in extra else 128)
            elif e["name"] in ("iteration_median_s", "device_median_s", "host_median_s"):
                expected = _steady_times(run, report)[e["name"]]
            elif e["path"].startswith("breakdown_detail.steps"):
                expected = _per_traced_step(report, e["name"])
            elif e["path"].startswith(("steps.parquet", "compiles.parquet", "timeline.parquet", "run.json")):
                expected = _from_tables(run, e["name"], (report.get("ops") or {}).get("steps"))
            else:
                expected = _resolve(report, e["path"])
            if isinstance(expected, KeyError) and e["name"].startswith("compiles_of_"):
                expected = report["compile"]["after_warmup_functions"][e["name"].removeprefix("compiles_of_").removesuffix("_count")]
            if isinstance(expected, KeyError) and e["name"].startswith("recompiles_by_"):
                expected = next(c["count"] for c in report["compile"]["after_warmup_causes"] if f"[{c['function']}, {c['kind']}]" in e["path"])
            assert not isinstance(expected, KeyError), f"{f['id']}: evidence {e['name']} ({e['path']}) found in neither the report nor the tables"
            if isinstance(expected, list | dict) or expected is None:
                continue
            assert e["value"] == pytest.approx(float(expected), rel=1e-5), f"{f['id']}: {e['name']}={e['value']} but {e['path']} gives {expected}"
            checked += 1
    return checked


def test_fired_evidence_is_in_the_runs_own_tables_or_report(jax_runs, torch_runs) -> None:
    checked = _evidence_checked(jax_runs, "defective", "--target", "v6e") + _evidence_checked(jax_runs, "eager") + _evidence_checked(torch_runs, "defective")
    assert checked >= 12


@pytest.mark.parametrize("script,args", [
    ("examples/jax_transformer.py", ["--steps", "12"]),
    ("examples/jax_mlp.py", ["--steps", "20"]),
    ("examples/torch_mlp.py", ["--steps", "20"]),
    ("examples/torch_transformer.py", ["--steps", "10"]),
])
def test_bundled_examples_fire_no_high_finding(tmp_path, script, args) -> None:
    store = _record(tmp_path / "runs", "example", str(ROOT / script), *args)
    doc = _advise(store, "example", "--target", "v6e")
    high = [f["id"] for f in doc["findings"] if f["outcome"] == "fired" and f["severity"] == "high"]
    assert high == [], f"{script}: {high}"
    report = report_doc("example", store)
    own = _advise(store, "example")
    step_time = [f for f in own["findings"] if f["outcome"] == "fired" and f["id"] not in own["also"]]
    assert report["advice"]["top"] == step_time[:3] and [f["id"] for f in report["advice"]["also"]] == own["also"]
    assert report["advice"]["conclusion"] == own["conclusion"]


def test_report_shows_the_top_findings(jax_runs) -> None:
    report = json.loads(tpu_perf_cli("report", "--json", "--store", str(jax_runs), "defective", check=True).stdout)
    assert report == report_doc("defective", jax_runs)  # the command prints what the tests compute in-process
    advice = json.loads(tpu_perf_cli("advise", "--store", str(jax_runs), "defective", "--json", check=True).stdout)
    assert advice == _advise(jax_runs, "defective")
    fired = [f for f in advice["findings"] if f["outcome"] == "fired"]
    top = report["advice"]["top"]
    assert [f["id"] for f in top] == [f["id"] for f in fired[:3]] and len(top) == 3
    gains = [f["expected_gain"]["factor"] for f in top if f["expected_gain"] and f["expected_gain"]["factor"]]
    assert gains == sorted(gains, reverse=True)
    assert {"unrolled-loop", "no-donation"} <= {f["id"] for f in report["advice"]["also"]}  # compile time and memory: not step-time fixes
    assert report["advice"]["conclusion"].startswith("next: ")
    causes = report["compile"]["after_warmup_causes"]  # the batch grows from step 8: a new shape at each of the step's recompiles
    assert [(c["function"], c["kind"], c["count"]) for c in causes] == [("jit(train_step)", "shape", report["compile"]["after_warmup_functions"]["jit(train_step)"])]
    text = tpu_perf_cli("report", "--store", str(jax_runs), "defective", check=True, env={"COLUMNS": "200"}).stdout
    assert f"what changed jit(train_step): shape at {causes[0]['count']} (first: {causes[0]['example']})" in " ".join(text.replace("│", " ").split())
    assert "Advice" in text and fired[0]["id"] in text
    s, flat = report["steps"], " ".join(text.replace("│", " ").split())  # the split input-bound stands on, with its sample
    assert f"median {fmt.seconds(s['call_median_s'])} inside jitted calls, {fmt.seconds(s['loop_median_s'])} the loop's own work outside the step call" in flat
    assert f"{s['call_loop_steps']} of {s['steady']} steady steps" in flat and 2 * s["call_loop_steps"] >= s["steady"] > 0
    terminal = tpu_perf_cli("advise", "--store", str(jax_runs), "defective", "--all", check=True, env={"COLUMNS": "200"}).stdout
    assert all(rule in terminal for rule in CATALOGUE)


def test_bad_target_and_unknown_run_are_one_line_errors(jax_runs) -> None:
    bad = tpu_perf_cli("advise", "--store", str(jax_runs), "fixed", "--target", "v99x")
    assert bad.returncode == 2 and "--target" in bad.stderr and "Traceback" not in bad.stderr
    missing = tpu_perf_cli("advise", "--store", str(jax_runs), "no-such-run")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr


def test_host_sync_counts_match_the_script(jax_runs) -> None:
    """The defective loop fetches `float(loss)` after every step; the fixed one only at the end."""
    counts = {m: load_run(str(p)).manifest["jax"] for m in ("defective", "fixed") for p in jax_runs.iterdir() if p.is_dir() and json.loads((p / "run.json").read_text())["name"] == m}
    assert counts["defective"]["step_calls"] == 16 and counts["defective"]["fetched_step_calls"] == 16
    assert counts["fixed"]["step_calls"] == 16 and counts["fixed"]["fetched_step_calls"] <= 1
    assert np.isfinite(counts["defective"]["fetched_step_calls"])
