"""Renders the report's inference section (`analyzers/inference.py`) for a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType

from tpu_perf.analyzers.report import Report
from tpu_perf.views import format as fmt
from tpu_perf.views.format import PlainTable as Table


def latency(p: dict[str, Any] | None) -> str:
    """`{p50, p90, p99}` of a latency, or n/a."""
    if not p:
        return "n/a"
    return f"p50 {fmt.seconds(p['p50'])}  p90 {fmt.seconds(p['p90'])}  p99 {fmt.seconds(p['p99'])}"


def one_line(report: Report) -> str:
    """An inference run in one line: requests, TTFT and TPOT medians, tokens/s, MBU."""
    i, r = report.inference, report.run
    assert i is not None
    ttft = fmt.seconds(i.ttft_s.p50) if i.ttft_s else "n/a"
    tpot = fmt.seconds(i.tpot_s.p50) if i.tpot_s else "n/a"
    return f"run {r.id} {r.status}: {i.requests} requests, {i.generated_tokens} tokens generated, TTFT p50 {ttft}, TPOT p50 {tpot}, {fmt.number(i.tokens_per_s, 4)} tokens/s, MBU {fmt.percent(i.mbu)}"


def render_inference(doc: dict[str, Any]) -> RenderableType | None:
    i = doc.get("inference")
    if not i:
        return None
    prompt = "n/a" if i["prompt_tokens"] is None else str(i["prompt_tokens"])
    share = "n/a" if i["prefill_share"] is None else f"prefill {fmt.percent(i['prefill_share'])}, decode {fmt.percent(i['decode_share'])} of the requests' time"
    if i["prefill_share"] is not None and i.get("compile_s"):
        share += f" (of the requests that compiled nothing: {fmt.seconds(i['compile_s'])} of compiling left out)"
    if i.get("stalled_gaps"):
        share += f"; {i['stalled_gaps']} token gap(s) held another request's prefill ({fmt.percent(i['stall_share'])} of the wall time beyond a plain gap)"
    if i["decode_bytes_per_step"] is None:
        read = "n/a (the model's arrays were not seen)"
    else:
        read = f"{fmt.bytes_(i['decode_bytes_per_step'])} ({fmt.bytes_(i['weight_bytes'])} weights + {fmt.bytes_(i['kv_cache_bytes'])} KV cache; {i['decode_bytes_source']})"
    peak = f" of {fmt.bytes_(i['peak_bytes_per_s'])}/s ({i['chip']})" if i["peak_bytes_per_s"] else ""
    mbu = fmt.percent(i["mbu"]) + peak if i["mbu"] is not None else f"n/a ({i['mbu_reason']})"
    rows = [
        ("requests", f"{i['requests']} ({i['calls']} calls; source {i['source']}), {prompt} prompt tokens, {i['generated_tokens']} generated"),
        ("time to 1st token", latency(i["ttft_s"])),
        ("per output token", latency(i["tpot_s"])),
        ("inter-token", latency(i["itl_s"])),
        ("end to end", latency(i["e2e_s"])),
        ("throughput", f"{fmt.number(i['tokens_per_s'], 4)} generated tokens/s over {fmt.seconds(i['wall_s'])} (prefill included" + (f"; {fmt.seconds(i['own_s'])} of tpu-perf's own trace start/stop left out" if i.get("own_s") else "") + ")"),
        ("prefill / decode", share),
        ("decode step", f"{fmt.seconds(i['decode_step_s'])} median; reads {read}"),
        ("bandwidth", f"{fmt.bytes_(i['achieved_bytes_per_s'])}/s achieved" if i["achieved_bytes_per_s"] is not None else "n/a"),
        ("MBU", mbu),
    ]
    table = Table(title="Inference", title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    return table
