"""The rule catalogue, read top to bottom, and the one function that runs it.

An explicit tuple (no registration by import): the JSON lists findings in this order before ranking,
and adding a rule means adding it here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tpu_perf.advise import (
    collectives,
    compilation,
    compute,
    decode,
    decode_passes,
    hosts,
    idle,
    input,
    memory,
)
from tpu_perf.advise.finding import Finding
from tpu_perf.advise.signals import Signals

RULES: tuple[Callable[[Signals], Finding], ...] = (
    compilation.recompilation,
    compilation.op_by_op,
    compilation.unrolled_loop,
    compilation.graph_break,
    compilation.no_compile_cache,
    input.host_sync,
    input.input_bound,
    compute.fp32_matmul,
    compute.mxu_padding,
    compute.small_batch,
    memory.no_donation,
    memory.hbm_headroom,
    memory.hbm_pressure,
    collectives.exposed_collectives,
    hosts.straggler,
    decode.decode_small_batch,
    decode.fp32_kv_cache,
    decode.decode_recompiles,
    decode.decode_host_sync,
    decode.decode_no_cache,
    decode_passes.prefill_stall,
    decode_passes.unfused_attention,
)

AFTER_RULES: tuple[Callable[[Signals, list[Finding]], Finding], ...] = (idle.device_idle,)
"""Rules that read the other findings (device-idle fires only when nothing else explains the idle time)."""

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
OUTCOME_ORDER = {"fired": 0, "passed": 1, "not_evaluable": 2}
WORTH_FACTOR = 1.05
"""A fix for step time is proposed as the next step when it promises at least 5 % (the bench's
no-slowdown tolerance; below it, run-to-run noise on a busy machine is as large)."""


@dataclass(frozen=True, kw_only=True)
class Advice:
    findings: list[Finding]
    """Every rule's finding, ranked: fired step-time findings by expected gain (unquantified last),
    then fired findings for compile time, memory, throughput or risk (the "also" list), then passed,
    then not evaluable."""
    target: str | None
    target_from: str | None
    steps: int = 1
    """Steps the run recorded: with none (an inference run, a script that never stepped) no step-time
    verdict is given, not even "nothing left"."""

    @property
    def fired(self) -> list[Finding]:
        return [f for f in self.findings if f.outcome == "fired"]

    @property
    def step_time(self) -> list[Finding]:
        """Fired findings whose fix is meant to shorten the step, largest expected gain first."""
        return [f for f in self.fired if f.benefit == "step_time"]

    @property
    def also(self) -> list[Finding]:
        """Fired findings whose fix saves compile time or memory, or is a risk: not step-time fixes."""
        return [f for f in self.fired if f.benefit != "step_time"]

    @property
    def nothing_left(self) -> bool:
        """No fired finding promises >= 1.05x step time: nothing left that would make the step faster."""
        return self.steps > 0 and not any((f.gain_factor or 0.0) >= WORTH_FACTOR for f in self.step_time)

    @property
    def next_fix(self) -> Finding | None:
        """The step-time fix to apply next: the first that promises >= 1.05x."""
        return next((f for f in self.step_time if (f.gain_factor or 0.0) >= WORTH_FACTOR), None)

    def conclusion(self) -> str:
        """One sentence: the next step-time fix, or that nothing left would make the step faster."""
        where = f" on {self.target}" if self.target else ""
        if self.steps == 0:
            return "no step-time verdict: the run recorded no step (an inference run's requests are judged in its inference section)"
        nxt = self.next_fix
        if nxt is not None:
            return f"next: {nxt.id} ({nxt.gain_factor:.2f}x step time{where}, {nxt.expected_gain.kind.replace('_', ' ') if nxt.expected_gain else 'estimate'})"
        unquantified = [f.id for f in self.step_time if f.gain_factor is None]
        more = f"; {', '.join(unquantified)} fired without a number to promise (see why)" if unquantified else ""
        return f"nothing left would make the step faster{where}: no finding promises {WORTH_FACTOR:.2f}x or more{more}"


def rank_key(f: Finding) -> tuple[int, int, int, float, int]:
    gain = f.gain_factor
    return (OUTCOME_ORDER[f.outcome], f.benefit != "step_time", gain is None, -(gain or 1.0), SEVERITY_ORDER[f.severity])


def advise_signals(signals: Signals) -> Advice:
    findings = [rule(signals) for rule in RULES]
    findings += [rule(signals, findings) for rule in AFTER_RULES]
    return Advice(findings=sorted(findings, key=rank_key), target=signals.target.name if signals.target else None, target_from=signals.target_from, steps=signals.steps)
