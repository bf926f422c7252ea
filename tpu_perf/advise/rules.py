"""The rule catalogue, read top to bottom, and the one function that runs it.

An explicit tuple (no registration by import): the JSON lists findings in this order before ranking,
and adding a rule means adding it here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tpu_perf.advise import collectives, compilation, compute, hosts, idle, input, memory
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
)

AFTER_RULES: tuple[Callable[[Signals, list[Finding]], Finding], ...] = (idle.device_idle,)
"""Rules that read the other findings (device-idle fires only when nothing else explains the idle time)."""

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
OUTCOME_ORDER = {"fired": 0, "passed": 1, "not_evaluable": 2}


@dataclass(frozen=True, kw_only=True)
class Advice:
    findings: list[Finding]
    """Every rule's finding, ranked: fired first (by expected gain, then severity), then passed, then not evaluable."""
    target: str | None
    target_from: str | None

    @property
    def fired(self) -> list[Finding]:
        return [f for f in self.findings if f.outcome == "fired"]


def rank_key(f: Finding) -> tuple[int, float, int]:
    gain = f.gain_factor
    return (OUTCOME_ORDER[f.outcome], -(gain if gain is not None else 1.0), SEVERITY_ORDER[f.severity])


def advise_signals(signals: Signals) -> Advice:
    findings = [rule(signals) for rule in RULES]
    findings += [rule(signals, findings) for rule in AFTER_RULES]
    return Advice(findings=sorted(findings, key=rank_key), target=signals.target.name if signals.target else None, target_from=signals.target_from)
