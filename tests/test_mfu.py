"""Model FLOPs and MFU reproduce published numbers, with the source's own convention.

Each row: the source's shapes, chip, throughput and convention, and the MFU it published.
A row passes within 1 percentage point.
"""

from __future__ import annotations

import json

import pytest
from conftest import tpu_perf_cli

import tpu_perf
from tpu_perf.errors import UsageError
from tpu_perf.modelflops import conventions as conv
from tpu_perf.modelflops.arch import Architecture
from tpu_perf.modelflops.presets import PRESETS, preset

PALM_540B = dict(layers=118, d_model=18432, heads=48, head_dim=256, d_ff=73728, vocab=256000, seq_len=2048, params=540.35e9)
LLAMA31_8B = dict(layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=14336, mlp_mats=3, vocab=128256, seq_len=8192)
GPT3_175B = dict(layers=96, d_model=12288, heads=96, d_ff=4 * 12288, mlp_mats=2, vocab=51200, seq_len=2048)
MAXTEXT_TIERS = "https://github.com/AI-Hypercomputer/maxtext/blob/main/docs/reference/models/tiering.md"
TITAN = "https://github.com/pytorch/torchtitan/blob/main/docs/performance.md"
FOUNDRY = "https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/benchmarking/README.md"
MPT = {"7b": dict(layers=32, d_model=4096, heads=32), "13b": dict(layers=40, d_model=5120, heads=40), "30b": dict(layers=48, d_model=7168, heads=64), "70b": dict(layers=80, d_model=8192, heads=64)}


def mpt(size: str, seq: int, params: float) -> dict:
    """An MPT config of llm-foundry's benchmarks (expansion 4 GELU MLP, vocab 50368) with its NumParams."""
    shapes = MPT[size]
    return dict(**shapes, d_ff=4 * shapes["d_model"], mlp_mats=2, vocab=50368, seq_len=seq, tied_embeddings=True, params=params)


PUBLISHED = [
    # (label, source, expected MFU %, keyword arguments of tpu_perf.mfu)
    ("PaLM 540B, 6144 TPU v4", "https://arxiv.org/abs/2204.02311 (table 3)", 46.2, dict(PALM_540B, chip="v4", chips=6144, tokens_per_second=238.3e3, convention="palm")),
    ("Llama 3.1 8B, v6e-256", MAXTEXT_TIERS, 45.46, dict(LLAMA31_8B, chip="v6e", chips=256, tokens_per_second_per_chip=7207, convention="maxtext-legacy")),
    ("Llama 2 70B SL4096, v6e-256", MAXTEXT_TIERS, 43.8, dict(model="llama2-70b", chip="trillium", chips=256, tokens_per_second_per_chip=900, convention="maxtext-legacy")),
    ("Llama 3.1 70B, v6e-256", MAXTEXT_TIERS, 50.33, dict(model="llama3-70b", chip="v6e", chips=256, tokens_per_second_per_chip=960, convention="maxtext-legacy")),
    ("Mixtral 8x7B, v6e-256", MAXTEXT_TIERS, 35.23, dict(model="mixtral-8x7b", chip="v6e", chips=256, tokens_per_second_per_chip=3899, convention="maxtext-legacy")),
    ("Mixtral 8x7B, v5p-512 (256 chips)", MAXTEXT_TIERS, 52.56, dict(model="mixtral-8x7b", chip="v5p", chips=256, tokens_per_second_per_chip=2909, convention="maxtext-legacy")),
    ("Llama 3 8B, 64 A100, selective layer AC", TITAN + " (2024 A100 table)", 56.8, dict(model="llama3-8b", chip="a100", chips=64, tokens_per_second_per_chip=2904, convention="torchtitan-2024")),
    ("Llama 3 8B, 64 A100, selective op AC", TITAN + " (2024 A100 table)", 58.2, dict(model="llama3-8b", chip="a100", chips=64, tokens_per_second_per_chip=2973, convention="torchtitan-2024")),
    ("Llama 3 70B, 64 A100, full AC", TITAN + " (2024 A100 table)", 51.7, dict(model="llama3-70b", chip="a100", chips=64, tokens_per_second_per_chip=331, convention="torchtitan-2024")),
    ("Llama 2 13B, 64 A100, no AC", TITAN + " (2024 A100 table)", 61.1, dict(model="llama2-13b", chip="a100", chips=64, tokens_per_second_per_chip=2162, convention="torchtitan-2024")),
    ("Llama 3.1 405B, 128 H100, 2D", TITAN, 29.0, dict(model="llama3.1-405b", chip="h100", chips=128, tokens_per_second_per_chip=109, convention="torchtitan")),
    ("Llama 3.1 8B, 8 H100, FSDP + compile (upper end of '33 % to 39 %')", TITAN, 39.0, dict(model="llama3-8b", chip="NVIDIA H100 80GB HBM3", chips=8, tokens_per_second_per_chip=6667, convention="torchtitan")),
    ("MPT 7B seq 2048, 8 H100", FOUNDRY, 46.44, dict(mpt("7b", 2048, 6658859008), chip="h100", chips=8, tokens_per_second=85144, convention="llm-foundry")),
    ("MPT 30B seq 2048, 32 H100", FOUNDRY, 43.92, dict(mpt("30b", 2048, 29975214080), chip="h100", chips=32, tokens_per_second=73860, convention="llm-foundry")),
    ("MPT 13B seq 2048, 8 A100 80GB", FOUNDRY, 59.57, dict(mpt("13b", 2048, 12853954560), chip="a100-80gb", chips=8, tokens_per_second=18097, convention="llm-foundry")),
    ("MPT 70B seq 2048, 64 A100 80GB", FOUNDRY, 53.33, dict(mpt("70b", 2048, 64862437376), chip="a100", chips=64, tokens_per_second=26274, convention="llm-foundry")),
    # GPT-3 175B on 1024 A100: 300B tokens in ~34 days at 140 TFLOP/s/GPU (Narayanan et al. 2021, section 5.1).
    ("GPT-3 175B, 1024 A100", "https://arxiv.org/abs/2104.04473 (section 5.1)", 140 / 312 * 100, dict(GPT3_175B, chip="a100", chips=1024, tokens_per_second=300e9 / (34 * 86400), convention="megatron-2021")),
]


@pytest.mark.parametrize(("label", "source", "expected", "kwargs"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_reproduces_published_mfu(label: str, source: str, expected: float, kwargs: dict) -> None:
    result = tpu_perf.mfu(**kwargs)
    assert result.mfu * 100 == pytest.approx(expected, abs=1.0), f"{label} ({source})"


def test_palm_540b_exact_numbers_and_hfu() -> None:
    r = tpu_perf.mfu(**PALM_540B, chip="tpu v4", chips=6144, tokens_per_second=238.3e3, convention="palm", recompute=0.75)
    assert r.flops_per_token == pytest.approx(6 * 540.35e9 + 12 * 118 * 48 * 256 * 2048)
    assert r.mfu == pytest.approx(0.4623, abs=5e-4)
    assert r.hfu == pytest.approx(0.578, abs=0.002)  # the paper's 57.8 % HFU with ~3/4 of the forward rematerialised
    # N counted from the shapes (multi-query attention, shared embeddings) gives the paper's 540.35B too
    counted = Architecture(**{k: v for k, v in PALM_540B.items() if k != "params"}, kv_heads=1, tied_embeddings=True)
    assert counted.counted_params() == pytest.approx(540.35e9, rel=1e-4)


def test_throughput_forms_agree_and_granularity() -> None:
    base = dict(LLAMA31_8B, chip="v6e", chips=256, convention="maxtext-legacy")
    a = tpu_perf.mfu(**base, tokens_per_second_per_chip=7207)
    b = tpu_perf.mfu(**base, tokens_per_second=7207 * 256)
    c = tpu_perf.mfu(**base, step_time=2.0, global_batch_tokens=7207 * 256 * 2.0)
    assert a.mfu == pytest.approx(b.mfu) == pytest.approx(c.mfu)
    assert a.tflops_per_chip == pytest.approx(0.4547 * 918, rel=1e-3)
    iw = tpu_perf.mfu(**dict(base, chip="ironwood"), tokens_per_second_per_chip=7207)
    assert iw.devices_per_chip == 2 and iw.peak_tflops_per_device == pytest.approx(2307 / 2)
    assert iw.tflops_per_device == pytest.approx(iw.tflops_per_chip / 2) and iw.mfu == pytest.approx(iw.tflops_per_chip / 2307)


@pytest.mark.parametrize(("name", "params"), [("llama2-7b", 6_738_415_616), ("llama3-8b", 8_030_261_248), ("llama3.1-405b", 405_853_388_800), ("gemma-7b", 8_537_680_896), ("mixtral-8x7b", 46_702_792_704), ("gpt2", 124_439_808)])
def test_preset_parameter_counts_match_released_weights(name: str, params: int) -> None:
    assert preset(name).counted_params() == params, PRESETS[name][1]


def test_mixtral_active_params_and_conventions_differ_as_documented() -> None:
    m = preset("mixtral-8x7b")
    assert m.active_params == pytest.approx(12.88e9, rel=1e-3)
    llama = preset("llama3-8b")
    values = {name: c.fn(llama).flops_per_token for name, c in conv.CONVENTIONS.items()}
    # maxtext halves causal attention; legacy does not; for Llama 3 8B the legacy matmul sum equals 6N (N without
    # the input embedding) + 12·L·H·Q·T, which is torchtitan's current form
    assert values["maxtext-legacy"] - values["maxtext"] == pytest.approx(3 * 2 * 8192 * 32 * 128 * 32)
    assert values["torchtitan"] == pytest.approx(values["maxtext-legacy"], rel=1e-4)
    assert values["torchtitan-2024"] - values["torchtitan"] == pytest.approx(6 * 128256 * 4096)
    assert values["megatron-2024"] == pytest.approx(values["maxtext-legacy"], rel=1e-9)


def test_megatron_forms_agree_on_gpt3_shapes() -> None:
    gpt3 = Architecture(**GPT3_175B)
    m21, m22, m24 = (conv.CONVENTIONS[n].fn(gpt3).flops_per_token for n in ("megatron-2021", "megatron-2022", "megatron-2024"))
    assert m24 == pytest.approx(m22, rel=1e-12)  # the 2024 code generalises the 2022 paper's formula
    logits = 6 * 12288 * 51200
    assert (m21 - logits) == pytest.approx((m22 - logits) * 4 / 3)  # 2021 adds one full forward recompute
    assert conv.CONVENTIONS["megatron-2021"].includes_recompute


def test_nanogpt_drops_position_embeddings_only() -> None:
    gpt2 = preset("gpt2")
    assert conv.nanogpt(gpt2).params_counted == 124_439_808 - 1024 * 768
    assert conv.palm(gpt2).params_counted == 124_439_808


def test_hf_configs_read_like_presets(tmp_path) -> None:
    configs = {
        "llama3-8b": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": False, "hidden_act": "silu"},
        "mixtral-8x7b": {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2},
        "gemma-7b": {"model_type": "gemma", "num_hidden_layers": 28, "hidden_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576, "vocab_size": 256000, "max_position_embeddings": 8192},
        "qwen3-8b": {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False},
        "gpt2": {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None, "vocab_size": 50257, "n_positions": 1024, "n_ctx": 1024},
    }
    for name, cfg in configs.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cfg))
        from_hf = tpu_perf.mfu(hf_config=str(path), seq_len=preset(name).seq_len, chip="v5p", tokens_per_second=1000)
        from_preset = tpu_perf.mfu(model=name, chip="v5p", tokens_per_second=1000)
        assert from_hf.params == from_preset.params, name
        assert from_hf.flops_per_token == pytest.approx(from_preset.flops_per_token), name


def test_cli_json_matches_python_api() -> None:
    args = ["--layers", "32", "--d-model", "4096", "--heads", "32", "--kv-heads", "8", "--head-dim", "128", "--d-ff", "14336", "--mlp-mats", "3", "--vocab", "128256", "--seq-len", "8192", "--chip", "v6e", "--chips", "256", "--tokens-per-second-per-chip", "7207", "--convention", "maxtext-legacy", "--json"]
    doc = json.loads(tpu_perf_cli("mfu", *args, check=True).stdout)
    for key in ("flops_per_token", "params", "tflops_per_chip", "peak_tflops_per_chip", "mfu", "convention", "precision"):
        assert key in doc
    assert doc["mfu"] == pytest.approx(0.4546, abs=1e-3) and doc["convention"] == "maxtext-legacy" and doc["precision"] == "bf16"
    assert doc == json.loads(json.dumps(tpu_perf.mfu(**LLAMA31_8B, chip="v6e", chips=256, tokens_per_second_per_chip=7207, convention="maxtext-legacy").to_dict()))
    text = tpu_perf_cli("mfu", "--model", "llama3-8b", "--d-ff", "14336", "--chip", "v6e", "--tokens-per-second-per-chip", "7207", "--convention", "maxtext-legacy", check=True, env={"COLUMNS": "200"})
    assert "45.47 %" in text.stdout


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--model", "llama3-8b", "--layers", "0"], "--layers"),
        (["--model", "llama3-8b", "--d-model", "-4096"], "--d-model"),
        (["--layers", "2", "--d-model", "100", "--heads", "3", "--d-ff", "400", "--vocab", "10", "--seq-len", "8"], "--heads"),
        (["--model", "llama3-8b", "--chip", "trilium"], "trillium"),
        (["--model", "llama3-8b", "--convention", "palmm"], "--convention"),
        (["--model", "llama3-9b"], "--model"),
        (["--model", "llama3-8b", "--no-throughput"], ""),
        (["--d-model", "4096", "--heads", "32", "--d-ff", "1", "--vocab", "1"], "--layers"),
        (["--model", "llama3-8b", "--precision", "fp8", "--chip", "v4"], "--precision"),
        (["--model", "llama3-8b", "--mlp-mats", "4"], "--mlp-mats"),
        (["--hf-config", "/nonexistent/config.json"], "--hf-config"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    defaults = [] if any(a == "--chip" for a in args) else ["--chip", "v6e"]
    throughput = [] if "--no-throughput" in args else ["--tokens-per-second", "1000"]
    args = [a for a in args if a != "--no-throughput"]
    proc = tpu_perf_cli("mfu", *args, *defaults, *throughput, env={"COLUMNS": "400"})
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and "error" in lines[0] and flag in lines[0], proc.stderr
    if "--no-throughput" in args or not throughput:
        assert "--tokens-per-second" in lines[0]


def test_heads_need_not_divide_with_an_explicit_head_dim() -> None:
    gemma = Architecture(layers=28, d_model=3072, heads=16, head_dim=256, d_ff=24576, vocab=256000, seq_len=8192)
    assert gemma.q_dim == 256
    with pytest.raises(UsageError, match="--heads 3"):
        Architecture(layers=1, d_model=100, heads=3, d_ff=4, vocab=4)
    with pytest.raises(UsageError, match="--tokens-per-second"):
        tpu_perf.mfu(model="gpt2", chip="a100")
    with pytest.raises(UsageError, match="--chips"):
        tpu_perf.mfu(model="gpt2", chip="a100", chips=0, tokens_per_second=1)
