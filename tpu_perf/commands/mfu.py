"""`tpu-perf mfu`: model FLOPs utilisation from shapes, a chip and a throughput (no run needed)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from tpu_perf.jsonio import dumps
from tpu_perf.modelflops.conventions import CONVENTIONS, DEFAULT_CONVENTION
from tpu_perf.modelflops.presets import PRESETS
from tpu_perf.views.format import PlainTable as Table

Int = Annotated[int | None, typer.Option(show_default=False)]


def register(app: typer.Typer) -> None:
    app.command("mfu", help=f"Model FLOPs utilisation of a training job. Presets: {', '.join(PRESETS)}. Conventions: {', '.join(CONVENTIONS)} (default {DEFAULT_CONVENTION}).")(mfu_command)


def mfu_command(
    layers: Annotated[int | None, typer.Option(help="Transformer layers.", rich_help_panel="Architecture")] = None,
    d_model: Annotated[int | None, typer.Option(help="Model width.", rich_help_panel="Architecture")] = None,
    heads: Annotated[int | None, typer.Option(help="Query heads.", rich_help_panel="Architecture")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="Key/value heads (GQA); default: heads.", rich_help_panel="Architecture")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head width; default d_model / heads.", rich_help_panel="Architecture")] = None,
    d_ff: Annotated[int | None, typer.Option(help="MLP width.", rich_help_panel="Architecture")] = None,
    mlp_mats: Annotated[int | None, typer.Option(help="MLP matrices: 2 (GELU) or 3 (SwiGLU/GeGLU; default).", rich_help_panel="Architecture")] = None,
    vocab: Annotated[int | None, typer.Option(help="Vocabulary size.", rich_help_panel="Architecture")] = None,
    seq_len: Annotated[int | None, typer.Option(help="Training sequence length.", rich_help_panel="Architecture")] = None,
    params: Annotated[float | None, typer.Option(help="Parameter count N (e.g. a paper's); default: counted from the shapes.", rich_help_panel="Architecture")] = None,
    tied_embeddings: Annotated[bool, typer.Option("--tied-embeddings", help="Input embedding shared with the output projection.", rich_help_panel="Architecture")] = False,
    experts: Annotated[int | None, typer.Option(help="MoE experts per layer.", rich_help_panel="Architecture")] = None,
    top_k: Annotated[int | None, typer.Option(help="MoE experts per token.", rich_help_panel="Architecture")] = None,
    moe_d_ff: Annotated[int | None, typer.Option(help="Width of one expert's MLP.", rich_help_panel="Architecture")] = None,
    hf_config: Annotated[str | None, typer.Option(help="Hugging Face config.json of the model.", rich_help_panel="Architecture")] = None,
    model: Annotated[str | None, typer.Option(help="Model preset (flags given beside it override it).", rich_help_panel="Architecture")] = None,
    chip: Annotated[str | None, typer.Option(help="Chip name or alias (`tpu-perf chips`).", rich_help_panel="Hardware")] = None,
    chips: Annotated[float, typer.Option(help="Physical chips in the job (an Ironwood chip is 2 devices).", rich_help_panel="Hardware")] = 1,
    precision: Annotated[str, typer.Option(help="Peak to compare with: bf16, fp8 or int8.", rich_help_panel="Hardware")] = "bf16",
    tokens_per_second: Annotated[float | None, typer.Option(help="Tokens/s of the whole job.", rich_help_panel="Throughput")] = None,
    tokens_per_second_per_chip: Annotated[float | None, typer.Option(help="Tokens/s per chip.", rich_help_panel="Throughput")] = None,
    step_time: Annotated[float | None, typer.Option(help="Seconds per step (with --global-batch-tokens).", rich_help_panel="Throughput")] = None,
    global_batch_tokens: Annotated[float | None, typer.Option(help="Tokens per step, all chips.", rich_help_panel="Throughput")] = None,
    convention: Annotated[str, typer.Option(help=f"FLOPs convention: {', '.join(CONVENTIONS)}.")] = DEFAULT_CONVENTION,
    recompute: Annotated[float | None, typer.Option(help="Fraction of the forward pass rematerialised, for HFU (1 = full).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Model FLOPs utilisation: flops per token by a named convention x tokens/s over the chip's peak."""
    from tpu_perf.errors import UsageError
    from tpu_perf.modelflops.calculator import mfu

    if not chip:
        raise UsageError("--chip: required (e.g. v6e, v5p, tpu7x, h100; `tpu-perf chips` lists them)")
    result = mfu(
        chip=chip, chips=chips, precision=precision, convention=convention,
        tokens_per_second=tokens_per_second, tokens_per_second_per_chip=tokens_per_second_per_chip,
        step_time=step_time, global_batch_tokens=global_batch_tokens, model=model, hf_config=hf_config,
        tied_embeddings=tied_embeddings or None, recompute=recompute,
        layers=layers, d_model=d_model, heads=heads, kv_heads=kv_heads, head_dim=head_dim, d_ff=d_ff,
        mlp_mats=mlp_mats, vocab=vocab, seq_len=seq_len, params=params, experts=experts, top_k=top_k, moe_d_ff=moe_d_ff,
    )
    if as_json:
        sys.stdout.write(dumps(result.to_dict()) + "\n")
        return
    table = Table(title=f"MFU ({result.convention} convention, {result.precision} peak)", title_justify="left", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("MFU", f"{result.mfu * 100:.2f} %" + (f"   HFU {result.hfu * 100:.2f} % (recompute {result.recompute:g})" if result.hfu is not None else "")),
        ("model FLOPs / token", f"{result.flops_per_token:.4g}"),
        ("parameters", f"{result.params / 1e9:.3f} B total, {result.active_params / 1e9:.3f} B active" + (f", N = {result.params_counted / 1e9:.3f} B in the formula" if result.params_counted else "")),
        ("throughput", f"{result.tokens_per_second:.6g} tokens/s, {result.tokens_per_second_per_chip:.6g} per chip"),
        ("achieved", f"{result.tflops_per_chip:.1f} TFLOP/s per chip, {result.tflops_per_device:.1f} per device"),
        ("peak", f"{result.peak_tflops_per_chip:g} TFLOP/s per chip, {result.peak_tflops_per_device:g} per device ({result.chip} x {result.chips:g}, {result.devices_per_chip} device(s)/chip, {result.peak_source})"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    Console().print(table)
