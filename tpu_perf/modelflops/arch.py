"""A decoder-only transformer described by its shapes, with parameter counting.

Model FLOPs depend only on these shapes, so every convention in `conventions.py` reads an
`Architecture`. It comes from flags, a Hugging Face `config.json` (`hf.py`) or a preset
(`presets.py`). Invalid shapes raise `UsageError` naming the flag that set them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from tpu_perf.errors import UsageError

FLAG_NAMES = {
    "layers": "--layers",
    "d_model": "--d-model",
    "heads": "--heads",
    "kv_heads": "--kv-heads",
    "head_dim": "--head-dim",
    "d_ff": "--d-ff",
    "mlp_mats": "--mlp-mats",
    "vocab": "--vocab",
    "seq_len": "--seq-len",
    "params": "--params",
    "experts": "--experts",
    "top_k": "--top-k",
    "moe_d_ff": "--moe-d-ff",
}
"""The CLI flag that sets each field, for error messages."""


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """Shapes of a decoder-only transformer (dense or mixture-of-experts)."""

    layers: int
    d_model: int
    heads: int
    kv_heads: int | None = None
    """Key/value heads (GQA/MQA); None means as many as query heads."""
    head_dim: int | None = None
    """None means d_model / heads (which must then divide)."""
    d_ff: int | None = None
    """Dense MLP width; None for an all-MoE model."""
    mlp_mats: int = 3
    """Matrices per MLP: 2 for GELU (up, down), 3 for SwiGLU/GeGLU (gate, up, down)."""
    vocab: int
    seq_len: int | None = None
    """Training sequence length; the attention terms need it."""
    tied_embeddings: bool = False
    experts: int | None = None
    top_k: int | None = None
    moe_d_ff: int | None = None
    """Width of one expert's MLP (defaults to d_ff)."""
    params: float | None = None
    """Parameter count given by the user (e.g. a paper's N); overrides the count from shapes."""
    bias: bool = False
    """Linear layers and norms carry biases (GPT-2 style)."""
    position_embeddings: int = 0
    """Rows of a learned absolute position embedding (GPT-2: 1024); 0 for RoPE models."""
    name: str | None = None

    def __post_init__(self) -> None:
        for key in ("layers", "d_model", "heads", "vocab", "kv_heads", "head_dim", "d_ff", "seq_len", "experts", "top_k", "moe_d_ff", "params"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise UsageError(f"{FLAG_NAMES[key]} {value}: must be a positive number")
        if self.mlp_mats not in (2, 3):
            raise UsageError(f"--mlp-mats {self.mlp_mats}: must be 2 (GELU MLP) or 3 (SwiGLU/GeGLU MLP)")
        if self.head_dim is None and self.d_model % self.heads:
            raise UsageError(f"--heads {self.heads}: does not divide --d-model {self.d_model}; give --head-dim")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise UsageError(f"--kv-heads {self.kv_heads}: must divide --heads {self.heads}")
        if self.is_moe:
            if not self.top_k or self.top_k > (self.experts or 0):
                raise UsageError(f"--top-k {self.top_k}: a MoE model needs 1 <= --top-k <= --experts {self.experts}")
            if self.expert_d_ff is None:
                raise UsageError("--moe-d-ff: a MoE model needs the expert MLP width (or --d-ff)")
        elif self.d_ff is None:
            raise UsageError("--d-ff: the MLP width is required")

    # -- derived shapes ------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of each head (Q in the PaLM formula)."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.heads

    @property
    def n_kv(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def is_moe(self) -> bool:
        return bool(self.experts and self.experts > 1)

    @property
    def expert_d_ff(self) -> int | None:
        return self.moe_d_ff if self.moe_d_ff is not None else self.d_ff

    def with_overrides(self, **changes: Any) -> Architecture:
        """A copy with the given fields replaced (None values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Architecture:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    # -- parameter counts ----------------------------------------------------------------------
    def attention_params(self) -> int:
        """Q, K, V and output projections of one layer (+ biases)."""
        hq, kv = self.heads * self.q_dim, self.n_kv * self.q_dim
        weights = self.d_model * (hq + 2 * kv) + hq * self.d_model
        return weights + ((hq + 2 * kv + self.d_model) if self.bias else 0)

    def mlp_params(self, d_ff: int) -> int:
        weights = self.mlp_mats * self.d_model * d_ff
        return weights + (((self.mlp_mats - 1) * d_ff + self.d_model) if self.bias else 0)

    def _norm_params(self) -> int:
        return self.d_model * (2 if self.bias else 1)

    def _layer_params(self, experts: int) -> int:
        if self.is_moe:
            mlp = experts * self.mlp_params(self.expert_d_ff or 0) + self.d_model * (self.experts or 0)
        else:
            mlp = self.mlp_params(self.d_ff or 0)
        return self.attention_params() + mlp + 2 * self._norm_params()

    @property
    def embedding_params(self) -> int:
        """Input token embedding (vocab x d_model)."""
        return self.vocab * self.d_model

    @property
    def position_params(self) -> int:
        return self.position_embeddings * self.d_model

    @property
    def unembedding_params(self) -> int:
        """Output projection; 0 when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.d_model

    def counted_params(self, *, active: bool = False) -> int:
        """All parameters from the shapes (active: only top-k experts of a MoE model)."""
        experts = (self.top_k if active else self.experts) if self.is_moe else 1
        body = self.layers * self._layer_params(experts or 1) + self._norm_params()
        return self.embedding_params + self.position_params + body + self.unembedding_params

    @property
    def total_params(self) -> float:
        """The user's `params` when given, else the count from shapes."""
        return float(self.params) if self.params is not None else float(self.counted_params())

    @property
    def active_params(self) -> float:
        """Parameters one token passes through (= total for a dense model)."""
        if not self.is_moe:
            return self.total_params
        if self.params is not None:  # scale the user's N by the counted active share
            return float(self.params) * self.counted_params(active=True) / self.counted_params()
        return float(self.counted_params(active=True))
