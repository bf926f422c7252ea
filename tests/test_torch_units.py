"""Pieces of the torch collector on real torch: analytic attention FLOPs, faults (torch-tpu: test_torch_tpu.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, tpu_perf_cli
from tpu_perf import load_run

SCRIPTS = Path(__file__).resolve().parent / "torch_scripts"


def test_analytic_attention_equals_the_counted_hand_written_attention() -> None:
    """On CPU the counter sees 0 for SDPA; our mapping must give what it counts for the matmuls."""
    from torch.utils.flop_counter import FlopCounterMode

    from tpu_perf.collectors.torch.flops import attention_mapping

    q, k, v = (torch.randn(2, 4, 32, 16, requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False) as plain:
        torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
    analytic: dict[str, int] = {}
    with FlopCounterMode(display=False, custom_mapping=attention_mapping(torch, analytic)) as mapped:
        torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
    with FlopCounterMode(display=False) as manual:
        ((q @ k.transpose(-2, -1)).softmax(-1) @ v).sum().backward()
    assert plain.get_total_flops() == 0  # the gap this fills (torch 2.13, CPU)
    assert mapped.get_total_flops() == analytic["flops"] == manual.get_total_flops() == 3 * 4 * 2 * 4 * 32 * 32 * 16  # 3 x 2 matmuls x 2BHS^2D


def test_analytic_recurrent_flops_equal_a_hand_count() -> None:
    """nn.LSTM on CPU runs oneDNN's fused layer, which the counter counts as 0: the mapping gives
    2 FLOPs per weight per token forward, backward 2x, over layers and directions."""
    from torch.utils.flop_counter import FlopCounterMode

    from tpu_perf.collectors.torch.flops import analytic_mapping, recurrent_mapping

    T, B, IN, H = 7, 3, 10, 6
    lstm = torch.nn.LSTM(IN, H, num_layers=2, bidirectional=True)
    x = torch.randn(T, B, IN, requires_grad=True)
    with FlopCounterMode(display=False) as plain:
        lstm(x)[0].sum().backward()
    analytic: dict[str, int] = {}
    with FlopCounterMode(display=False, custom_mapping=analytic_mapping(torch, analytic)) as mapped:
        lstm(x)[0].sum().backward()
    hand = 3 * 2 * T * B * 2 * (4 * H * (IN + H) + 4 * H * (2 * H + H))  # 2 directions; layer 2 reads both
    assert plain.get_total_flops() == 0  # the gap this fills (torch 2.13, CPU)
    assert mapped.get_total_flops() == analytic["flops"] == hand
    # cuDNN's and MIOpen's fused RNNs take every layer's weights in one flat list (W_ih, W_hh, b_ih,
    # b_hh per layer and direction); a GRU layer's matrices are 3H rows: its CPU decomposition's count
    gru = torch.nn.GRU(IN, H)
    with FlopCounterMode(display=False) as counted:
        gru(x)[0].sum().backward()
    fused = recurrent_mapping(torch, {})[torch.ops.aten._cudnn_rnn]
    shapes = [tuple(w.shape) for w in gru._flat_weights]
    forward = fused((T, B, IN), shapes, 4, out_shape=None)
    assert forward == 2 * T * B * 3 * H * (IN + H)
    assert abs(3 * forward - counted.get_total_flops()) <= 0.05 * counted.get_total_flops()  # the decomposition has no gradient for the initial hidden state


def test_modules_the_counter_gave_zero_are_named() -> None:
    """A module holding a weight matrix whose ops have no formula (nn.Bilinear's _trilinear) is
    named; embeddings (lookups) and modules that counted FLOPs are not."""
    from torch.utils.flop_counter import FlopCounterMode

    from tpu_perf.collectors.torch.flops import ModulesSeen

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 8)
            self.bil = torch.nn.Bilinear(8, 8, 8)
            self.out = torch.nn.Linear(8, 2)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            e = self.emb(ids)
            return self.out(self.bil(e, e))

    seen = ModulesSeen(torch)
    seen.start()
    with FlopCounterMode(display=False) as mode:
        Net()(torch.randint(0, 50, (4,))).sum().backward()
    seen.stop()
    assert seen.uncounted(mode.get_flop_counts()) == ["Bilinear 'Net.bil'"]


def test_importing_tpu_perf_does_not_import_torch() -> None:
    code = "import sys, tpu_perf, tpu_perf.cli, tpu_perf.collectors.record, tpu_perf.analyzers.report; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("mode,status,code", [("raise", "failed", 1), ("sigint", "interrupted", 130)])
def test_script_failures_keep_the_steps(tmp_path, mode, status, code) -> None:
    proc = tpu_perf_cli("record", "-q", "--store", str(tmp_path), str(SCRIPTS / "variants.py"), mode, "8")
    assert proc.returncode == code, proc.stderr[-3000:]
    run = load_run(str(next(tmp_path.iterdir())))
    assert run.status == status and len(run.steps) == 5  # steps 0..4 finished before the fault


@pytest.mark.slow
def test_sigkill_leaves_a_loadable_run(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tpu_perf", "record", "-q", "--store", str(tmp_path), str(SCRIPTS / "variants.py"), "slow", "400"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            runs = list(tmp_path.iterdir()) if tmp_path.exists() else []
            steps_file = runs[0] / "steps.jsonl" if runs else None
            if steps_file is not None and steps_file.exists() and steps_file.read_bytes().count(b"\n") >= 3:
                break  # three step records flushed: they must survive the kill
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    run = load_run(str(next(tmp_path.iterdir())))
    assert run.status == "crashed" and len(run.steps) >= 3 and run.steps["source"].iloc[0] == "auto:optimizer"


def test_bad_script_is_a_usage_error(tmp_path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nfor i in range(:\n")
    proc = tpu_perf_cli("record", "--store", str(tmp_path / "runs"), str(bad))
    assert proc.returncode == 2 and "bad.py" in proc.stderr and not (tmp_path / "runs").exists()


def test_python_reading_a_tensor_as_a_number_is_a_host_sync() -> None:
    """float(t), int(t), bool(t) and `if loss > x:` wait for the device like .item(); torch's own
    calls (a formatted tensor calls .item() inside torch) are not the script's."""
    from tpu_perf.collectors.torch.syncs import HostSyncs

    syncs = HostSyncs(torch)
    uninstall = syncs.install()
    try:
        loss, n = torch.tensor(2.5), torch.tensor(3)
        float(loss)  # not counted: no step has begun
        syncs.on_boundary(0)
        for _ in range(2):
            float(loss), int(n), bool(n)
            if loss > 1.0:
                f"{loss:.2f}"
        loss + n  # stays on the device
    finally:
        uninstall()
    assert float(loss) == 2.5  # uninstalled: not counted
    assert syncs.summary(1) == {"count": 10, "steps": 1, "steps_with_sync": 1, "by_call": {"__float__": 2, "__int__": 2, "__bool__": 4, "__format__": 2}, "by_caller": {"test_torch_units": 10}}


def test_counting_syncs_does_not_recompile_a_compiled_step() -> None:
    """Dynamo inlines the counting wrapper into compiled code: counting there guarded the user's
    function on the recorder's step index (a recompile once the first step began) and broke its
    graph at the frame lookup. While Dynamo traces, the wrapper counts nothing; the compiled
    graph's own device-to-host copies (`.cpu()` run by the graph each step) and eager syncs are
    still counted."""
    import torch._dynamo

    from tpu_perf.collectors.torch.syncs import HostSyncs

    graphs: list[int] = []

    def backend(gm, inputs):  # counts the graphs Dynamo hands over: one per (re)compile
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    syncs = HostSyncs(torch)
    uninstall = syncs.install()
    torch._dynamo.reset()
    try:
        step = torch.compile(lambda x: (x * 2).sum().cpu() + (x * 3).sum().item(), backend=backend)
        step(torch.ones(4))  # compiled before the first step began (the recorder's step index unset)
        with torch._dynamo.config.patch(error_on_recompile=True):
            for i in range(3):
                syncs.on_boundary(i)
                step(torch.ones(4))
        syncs.on_boundary(3)
        torch.ones(2).sum().item()
    finally:
        uninstall()
        torch._dynamo.reset()
    with_syncs, graphs[:] = list(graphs), []
    step = torch.compile(lambda x: (x * 2).sum().cpu() + (x * 3).sum().item(), backend=backend)
    step(torch.ones(4))
    torch._dynamo.reset()
    assert with_syncs == graphs  # the same graphs, broken at the same .item(), as without tpu-perf
    assert syncs.summary(3)["steps_with_sync"] == 3  # a run that wrote 3 steps: the .item() after the last boundary is in the last
    assert syncs.summary(4) == {"count": 7, "steps": 4, "steps_with_sync": 4, "by_call": {"cpu": 3, "item": 4}, "by_caller": {"?": 3, "test_torch_units": 4}}  # "?": code with no module, the compiled graph's copies
