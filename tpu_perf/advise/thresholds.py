"""Every threshold the rules use, in one place, each with where it comes from.

Sources are listed in ../shared/reference/FACTS.md ("Thresholds the established tools use"): XProf's
input-pipeline analysis, PyTorch/XLA's debug analysis (`PT_XLA_DEBUG`), torch-tb-profiler's
recommendations, and the chips' ridge points and MXU tiles. Where a number is tpu-perf's own, the
comment says so and why.
"""

from __future__ import annotations

RECOMPILES_PER_STEP = 0.5
"""PyTorch/XLA debug analysis: more than 0.5 compiles per step after warm-up is a recompilation problem."""
RECOMPILE_MIN_COUNT = 2
"""tpu-perf: one late compile can be a new eval shape; two or more after warm-up is a pattern."""
RECOMPILE_TIME_SHARE = 0.05
"""XProf / torch-tb-profiler flag any cost at >= 5 % of step time ("moderately" input-bound, data loading > 5 %);
the same bar for the share of after-warm-up time spent compiling."""

FETCHES_PER_STEP = 0.5
"""PyTorch/XLA debug analysis: more than 0.5 device-to-host transfers per step. Applied to the share of
steps that transfer at all (a step that waits once or five times waits): an HF Trainer evaluating
every 10 steps made 19 transfers in 6 of 31 steps, not a fetch every step."""

OP_BY_OP_PROGRAMS_PER_STEP = 20.0
"""tpu-perf: a jitted step launches its step program and a few helpers (random keys, data
transfers: 3-5 per step in the bundled examples); 20+ separately launched programs per step
means the step itself is not one compiled program."""
OP_BY_OP_UNJITTED_PROGRAMS = 10
"""tpu-perf: a script that never called `jax.jit` yet compiled this many primitive programs trained
eagerly (a forward and backward pass needs more distinct primitives than that)."""
OP_BY_OP_EAGER_PROGRAMS = 40
"""tpu-perf: distinct programs compiled when no jitted step exists. Parameter init compiles
10-20 small programs (28 compiles, 14 names in examples/jax_transformer.py); an eager
forward+backward compiles one per primitive and shape, dozens more."""

UNROLLED_MIN_REPEATS = 4
"""tpu-perf: the same dot shapes repeated this many times is a Python loop over layers inlined into
the program (a scanned stack keeps one copy in its loop body: 1-3 occurrences with the backward
pass; two layers are too few to tell from a model that just has two similar matmuls)."""

SMALL_BATCH_RIDGE_FRACTION = 0.2
"""tpu-perf: matmul intensity below a fifth of the target's ridge point (FACTS.md: v5e ~240,
v5p ~164, v6e ~575 FLOPs/byte) is far into the memory-bound region; growing the batch raises it."""
SMALL_BATCH_MIN_HEADROOM = 0.3
"""tpu-perf: the batch can at least grow ~1.4x only if a third of HBM is free (memory.py keeps
5 % in reserve)."""

INPUT_BOUND_SHARE = 0.20
"""XProf input-pipeline analysis: input >= 20 % of step time is "highly input-bound"."""
INPUT_BOUND_MODERATE_SHARE = 0.05
"""XProf: >= 5 % "moderately input-bound"; torch-tb-profiler: data loading > 5 % of the step."""

FP32_MATMUL_SHARE = 0.5
"""tpu-perf: more than half of the matmul FLOPs in f32 on a bf16 MXU (TPU MXUs multiply bf16;
f32 operands are emulated in several bf16 passes or converted)."""

MXU_PADDING_SHARE = 0.10
"""tpu-perf: 10 % of the step's matmul time (the target's roofline) removable by trimming the
dimensions the user controls to the MXU tile (128x128, 256x256 on v6e: FACTS.md)."""

EXPOSED_COLLECTIVE_SHARE = 0.10
"""torch-tb-profiler: communication > 10 % of the step; XProf flags collectives at 15 %."""

HBM_HEADROOM_FRACTION = 0.5
"""tpu-perf: half of HBM unused at the peak; memory.py's estimate then allows >= ~1.9x the batch."""
HBM_PRESSURE_FRACTION = 0.90
"""torch-tb-profiler: memory peak > 90 % of capacity."""

STARTUP_COMPILE_S = 10.0
"""tpu-perf: start-up compiles of 10 s or more are worth caching (PyTorch/XLA's debug analysis
flags a single compile > 300 s; every restart of a job pays the start-up compiles again)."""

DEVICE_IDLE_SHARE = 0.30
"""torch-tb-profiler: GPU utilisation < 50 % is low; tpu-perf fires at 30 % idle in the trace
breakdown (or a TPU duty cycle below 70 %) when no other finding explains it."""
DUTY_CYCLE_PCT = 70.0
"""The same bar on libtpu's tensorcore duty cycle."""

DONATION_MIN_BYTES = 64 << 10
"""tpu-perf: a step returning under 64 KiB (counters, a scalar loss) has no train state to donate."""
DONATION_MIN_FRACTION = 0.5
"""tpu-perf: the step returns new state (outputs at least half its arguments' size) with less
than half of it aliased to donated inputs."""

DECODE_SMALL_BATCH = 8
"""tpu-perf: a decode step serving 8 sequences or fewer reads every weight for a handful of tokens
(weights dominate its bytes until the KV cache grows to their size): raising the batch adds tokens
per step at nearly the same bytes. vLLM and JetStream batch continuously for this reason."""
DECODE_KV_MIN_SHARE = 0.01
"""tpu-perf: a KV cache under 1 % of a decode step's bytes is not worth a dtype change."""
PREFILL_SHARE = 0.2
"""tpu-perf: prefill holding a fifth of the requests' time or more (XProf calls an input pipeline
holding 20 % of the step "highly input-bound"): overlapping it with decode (chunked prefill) bounds
a gain of 1/max(prefill, decode share), 1.25x at this share."""
CACHE_PASSES = 2.0
"""tpu-perf: a decode step passing over each KV cache array twice or more (a fused attention kernel
reads it once): the cache's bytes per token at least doubled."""
PREFILL_STALL_SHARE = 0.05
"""tpu-perf: other requests' tokens waiting on a prefill for 5 % of the requests' time or more (the
share at which the recompile rule fires): a stall a user sees as inter-token latency spikes."""
WHOLE_SEQUENCE_GAIN = 1.2
"""tpu-perf: a decode loop that feeds the whole sequence per token (no KV cache) is named when its
own steps' time against length says a step of one position would be 1.2x faster or more: below
that, the fixed cost per step (dispatch, the weights' reads) hides the recomputation."""
