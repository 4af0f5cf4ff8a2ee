"""FP8 training as real ops: the casts around every FP8 GEMM, memory bound, per recipe.

Transformer Engine runs each Linear's GEMMs in FP8 and everything else in BF16 (NVIDIA TE docs,
"Using FP8 with Transformer Engine"). Per GEMM input it launches a fused cast(+transpose) kernel:
read the BF16 tensor once, write the FP8 copy row-wise (forward GEMM) and column-wise (the
transposed operand the weight-gradient GEMM needs on Hopper, whose FP8 tensor cores take only
the TN layout). Bytes per element of the BF16 tensor cast, by recipe:

  delayed     scale from the amax history: one pass, 2 read + 1 + 1 written            = 4
  tensorwise  current scaling: an amax pass first (2 read), then the cast pass          = 6
  blockwise   128-element block scales computed in the cast pass; row- and column-wise
              copies carry one fp32 scale per 128 elements each (the project's quantize
              kernel, pipesim/kernels/quantize: fp32 absmax scale per group of 128)     = 4 + 8/128
  mxfp8       32-element blocks with 1-byte E8M0 scales, row- and column-wise (OCP
              Microscaling Formats MX v1.0 spec, Sec. 5.3)                              = 4 + 2/32

Forward casts the GEMM input X; backward casts the output gradient dY. Weights are cast once per
step (TE caches the FP8 weight across micro-batches): `weight_cast_bytes` per parameter.

Blackwell's FP8 tensor cores take every layout (nvte_is_non_tn_fp8_gemm_supported()), so
Transformer Engine writes no transposed copy for per-tensor FP8 there (NVIDIA/TransformerEngine
transformer_engine/pytorch/csrc/quantizer.cpp: `with_transpose = columnwise_usage &&
!is_non_tn_fp8_gemm_supported`): delayed 3, tensorwise 5 bytes per element, and one byte per
weight. MXFP8 keeps both copies (its 32-element scales run along K, which differs between the
row- and column-wise uses).

NVFP4 (`fp8_recipe: nvfp4`; NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv
2509.25149, Sec. 2-4; Transformer Engine's NVFP4BlockScaling recipe): the GEMMs (forward, input
and weight gradients) run on FP4 tensor cores, E2M1 values (half a byte) with one E4M3 scale per 16
elements and one FP32 scale per tensor. The per-tensor scale needs the tensor's amax first, so the
cast is two passes like current scaling (read 2, then read 2 and write both copies: the
column-wise one, the weight-gradient operand, through the 16 x 16 random Hadamard transform that
TE fuses into the cast) = 2 + 2 + 2 x (0.5 + 1/16) bytes per element. Its weights keep both
FP4 copies (2 x 0.5625 bytes per parameter). Not modelled: the paper's few layers kept in BF16
(every layer's GEMMs are FP4 here) and the stochastic rounding of gradients (fused in the same
cast).
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.ops import Op

FP4_BYTES = 0.5 + 1 / 16         # an NVFP4 element with its share of the 16-element E4M3 scale
CAST_BYTES = {"delayed": 4.0, "tensorwise": 6.0, "blockwise": 4.0 + 8 / 128, "mxfp8": 4.0 + 2 / 32,
              "nvfp4": 4.0 + 2 * FP4_BYTES}
# GEMM operand dtypes of the low-precision recipes
LOW_PRECISION = ("fp8", "fp4")
# The weight copy: read BF16 once, write FP8 row- and column-wise (same recipes as above).
FP8_WEIGHT_COPY_BYTES = 2.0      # per parameter held: the FP8 copy and its transpose
BLACKWELL_CURVES = ("b200", "gb200", "b300", "gb300")
# per-tensor recipes on Blackwell: no transposed copy (module docstring)
NO_TRANSPOSE = ("delayed", "tensorwise")


def cast_bytes(recipe: str, curve: str | None) -> float:
    """Bytes moved per element cast, by recipe, on the GPU of kernel curve `curve`."""
    if curve in BLACKWELL_CURVES and recipe in NO_TRANSPOSE:
        return CAST_BYTES[recipe] - 1.0
    return CAST_BYTES[recipe]


def weight_copy_bytes(recipe: str, curve: str | None) -> float:
    """FP8 (FP4) weight bytes held per parameter beside the BF16 weight."""
    if recipe == "nvfp4":
        return 2 * FP4_BYTES
    return FP8_WEIGHT_COPY_BYTES / 2 if curve in BLACKWELL_CURVES and recipe in NO_TRANSPOSE else FP8_WEIGHT_COPY_BYTES


def fp8_gathers(fwd: tuple, bwd: tuple, e: int) -> tuple[tuple, tuple]:
    """A sequence-parallel FP8 linear's all-gathers, which move FP8 bytes: Transformer Engine
    quantizes a column-parallel linear's input before gathering it (module/layernorm_linear.py: the
    norm writes FP8 and that is gathered, TE 1.4; "Perform NCCL all-gather" with the input
    quantizer, TE 2.x; the Userbuffers overlap gathers the same FP8 buffer) and a row-parallel
    linear's output gradient before gathering it in the backward (module/base.py
    grad_output_preprocess: "FP8 case with gather"); torchao's Float8ColwiseParallel casts the
    input to float8 before DTensor gathers it. One byte an element (a block recipe's scales, 1/32
    byte or less, are left out); the reduce-scatters stay 16-bit. `e`: the 16-bit element size."""
    def one_byte(comms: tuple) -> tuple:
        return tuple(replace(c, bytes=c.bytes / e) if c.kind == "all_gather" else c for c in comms)
    return one_byte(fwd), one_byte(bwd)


def gemm_dtype(training) -> str:
    """The dtype the layers' GEMMs run in: fp4 under the NVFP4 recipe, else the precision."""
    return "fp4" if training.precision == "fp8" and training.fp8_recipe == "nvfp4" else training.precision


def as_nvfp4(ops: list[Op], keep=()) -> list[Op]:
    """The FP8 GEMM ops as NVFP4 runs them: FP4 operands, and the input kept for the weight
    gradient as its FP4 column-wise copy (FP4_BYTES per element instead of the FP8 byte). Ops
    named in `keep` stay FP8 GEMMs: MXFP8 inside the NVFP4 run (training.mxfp8_gemms)."""
    def fp4(gemms):
        return tuple(g[:4] + ("fp4",) + g[5:] if g[4] == "fp8" else g for g in gemms)
    return [replace(o, gemms_fwd=fp4(o.gemms_fwd), gemms_bwd=fp4(o.gemms_bwd), saved_bytes=o.saved_bytes * FP4_BYTES)
            if o.gemms_fwd and o.gemms_fwd[0][4] == "fp8" and o.name not in keep else o for o in ops]


def block_scaled_fp8(recipe: str | None) -> bool:
    """Whether a run's FP8-dtype GEMMs are MXFP8 (block-scaled): under mxfp8, and the MXFP8 GEMMs
    of an nvfp4 run (op_recipe)."""
    return recipe in ("mxfp8", "nvfp4")


def op_recipe(op: Op, recipe: str) -> str:
    """The recipe an op's low-precision GEMMs run: an FP8 GEMM inside an NVFP4 run is MXFP8."""
    return "mxfp8" if recipe == "nvfp4" and op.gemms_fwd and op.gemms_fwd[0][4] == "fp8" else recipe


def group_ops(groups) -> set:
    """The op names of GEMM groups (BF16_GEMM_GROUPS)."""
    return {n for g in groups for n in BF16_GEMM_GROUPS[g]}


def fp8_gemm_params(ops: list[Op]) -> float:
    """Parameters of the ops whose GEMMs run in FP8 (not FP4)."""
    return sum(o.params for o in ops if o.gemms_fwd and o.gemms_fwd[0][4] == "fp8")


# GEMM groups an FP8 / FP4 recipe can keep in BF16 (training.bf16_gemms; Transformer Engine
# quantization configs match modules by name, e.g. Megatron-Bridge's Nemotron 3 Super NVFP4 recipe,
# scripts/performance/configs/nemotronh/te_quant.cfg: "*.linear_qkv", "*.linear_proj",
# "*fc[12]_latent_proj" in BF16) -> the ops that carry them (pipesim/costs/layers.py, mla.py,
# moe.py, mamba.py, gated_delta.py).
BF16_GEMM_GROUPS = {
    "attention": ("qkv", "proj", "q_down", "q_up", "kv_down", "kv_up", "q_proj"),
    "mlp": ("fc1", "fc2"),
    "experts": ("expert_fc1", "expert_fc2"),
    "shared_experts": ("shared_fc1", "shared_fc2"),
    "moe_latent": ("moe_latent_down", "moe_latent_up"),
    "ssm_in_proj": ("in_proj",),
    "ssm_out_proj": ("out_proj",),
    "mtp": ("mtp_eh_proj",),
}


def as_bf16(ops: list[Op], groups, e: int) -> list[Op]:
    """`ops` with the GEMMs of `groups` back in BF16: their operands, and the input each keeps for
    its weight gradient at `e` bytes per element instead of the FP8 copy's 1 (layers.matmul); a BF16
    out-projection after a fused attention kernel shares the kernel's kept output (held once)."""
    names = group_ops(groups)
    fused = any(o.flash for o in ops)

    def bf16(gemms):
        return tuple(g[:4] + ("bf16",) + g[5:] if g[4] in LOW_PRECISION else g for g in gemms)

    def kept(o: Op) -> float:
        return 0.0 if o.name == "proj" and fused else o.saved_bytes * e
    return [replace(o, gemms_fwd=bf16(o.gemms_fwd), gemms_bwd=bf16(o.gemms_bwd), saved_bytes=kept(o))
            if o.name in names and o.gemms_fwd and o.gemms_fwd[0][4] in LOW_PRECISION else o for o in ops]


def low_precision_params(ops: list[Op]) -> float:
    """Parameters of the ops whose GEMMs run in FP8 / FP4 (their weights get the low-precision
    copies and casts)."""
    return sum(o.params for o in ops if o.gemms_fwd and o.gemms_fwd[0][4] in LOW_PRECISION)


def cast_ops(ops: list[Op], recipe: str, curve: str | None = None) -> list[Op]:
    """One cast op per FP8 GEMM op: forward casts X (M x K), backward casts dY (M x N), of every
    forward GEMM the op runs (batch x M rows each: a grouped expert op casts all its experts' rows,
    as Transformer Engine's GroupedLinear quantizes the whole permuted input in one split-quantize)."""
    out = []
    for op in ops:
        if not op.gemms_fwd or op.gemms_fwd[0][4] not in LOW_PRECISION:
            continue
        per = cast_bytes(op_recipe(op, recipe), curve)
        x = sum(b * m * k for b, m, n, k, *_ in op.gemms_fwd)
        dy = sum(b * m * n for b, m, n, k, *_ in op.gemms_fwd)
        out.append(Op(f"{op.name}_fp8_cast", "vector", x, dy, x * per, dy * per))
    return out


# FP8 attention (training.fp8_attention; Transformer Engine FusedAttnFunc with the FP8 backend,
# transformer_engine/pytorch/attention/dot_product_attention/backends.py): Q, K and V are quantized
# before the kernel (combine_and_quantize) and kept in FP8 for the backward; O is kept in FP8 under
# delayed scaling, in BF16 under current scaling (NVTE_DPA_FP8CS_O_in_F16 defaults to 1) and MXFP8.
# The kernel's FP8 output is a pass over O (quantize or dequantize: read one, write the other);
# the backward quantizes dO and dequantizes dQ, dK, dV. Bytes per element of a quantize pass:
# delayed 3 (read 2, write 1), current scaling 5 (an amax pass first), MXFP8 3 + 1/32 (E8M0 scale
# per 32); of a dequantize pass 3.
ATTENTION_CAST_BYTES = {"delayed": 3.0, "tensorwise": 5.0, "mxfp8": 3.0 + 1 / 32}
ATTENTION_FP8_RECIPES = tuple(ATTENTION_CAST_BYTES)
DEQUANT_BYTES = 3.0


def attention_recipe(training) -> str:
    """The FP8 recipe of the fused attention: its own `fp8_attention_recipe`, else the GEMMs'."""
    return training.fp8_attention_recipe or training.fp8_recipe


def attention_dtype(training) -> str:
    """What the fused attention runs in: "bf16", or under `training.fp8_attention` cuDNN's FP8
    kernel with MXFP8 ("mxfp8") or per-tensor ("fp8") scaling."""
    if not training.fp8_attention:
        return "bf16"
    return "mxfp8" if attention_recipe(training) == "mxfp8" else "fp8"


def fp8_attention(ops: list[Op], training, e: int) -> list[Op]:
    """`ops` with every fused attention kernel run in FP8 (the GPU's FP8 attention table, per-tensor
    or MXFP8 by recipe) and the layer's kept Q, K, V (and O under delayed scaling) stored in FP8;
    the quantize / dequantize passes run serially with the kernel of the op that keeps them."""
    recipe, kind = attention_recipe(training), attention_dtype(training)
    q_pass = ATTENTION_CAST_BYTES[recipe]
    out = []
    for op in ops:
        if not op.flash:
            out.append(op)
            continue
        op = replace(op, flash=op.flash[:4] + (kind,))
        if op.attention_io:
            qkv, o = op.attention_io
            elem = 1.0 + (1 / 32 if recipe == "mxfp8" else 0.0)
            kept_o = 1.0 if recipe == "delayed" else e
            op = replace(op, saved_bytes=op.saved_bytes - (qkv + o) * e + qkv * elem + o * kept_o,
                         serial_bytes_fwd=op.serial_bytes_fwd + qkv * q_pass + o * DEQUANT_BYTES,
                         serial_bytes_bwd=op.serial_bytes_bwd + o * q_pass + qkv * DEQUANT_BYTES)
        out.append(op)
    return out


def weight_cast_bytes(gemm_params: float, recipe: str, curve: str | None = None) -> float:
    """Per step: every FP8 weight re-cast after the optimizer update."""
    return gemm_params * cast_bytes(recipe, curve)


# FP8 parameter storage (training.fp8_param_gather; Megatron-Core --fp8-param-gather, TE
# fp8_model_init): the model holds the FP8-GEMM weights in FP8 only. After the update the
# distributed optimizer casts its fp32 master shard straight to the FP8 parameter shard
# (megatron/core/fp8_utils.py quantize_param_shard: "Cast shard fp32 main params to fp8 model
# params": read 4 bytes, write 1), the all-gather moves 1 byte per parameter, and where the GEMMs
# need a column-wise copy (weight_copy_bytes = 2) it is rebuilt from the gathered weight
# (fp8_utils.post_all_gather_processing: read 1, write 1).


# NVFP4 parameter storage (Megatron-Core "NVFP4 native weights for DDP", #4005, 2026-04:
# --fp4-param-gather, megatron/core/fp4_utils.py quantize_nvfp4_param_shard -> TE
# quantize_master_weights, then post_all_gather_processing): the same steps at FP4_BYTES per
# element - the master shard cast reads 4 and writes the row-wise FP4 copy, the all-gather moves it,
# and the column-wise copy is rebuilt from it.


def stored_bytes(recipe: str) -> float:
    """Bytes per weight stored and gathered under low-precision parameter storage."""
    return FP4_BYTES if recipe == "nvfp4" else 1.0


def fp8_storage_cast_bytes(gemm_params: float, local_gemm_params: float, recipe: str,
                           curve: str | None = None) -> float:
    """Per step under FP8 (FP4) parameter storage: the master-shard cast plus the column-wise
    rebuild."""
    low = stored_bytes(recipe)
    transpose = 2 * low if weight_copy_bytes(recipe, curve) > low else 0.0
    return local_gemm_params * (4.0 + low) + gemm_params * transpose


def gathered_bytes_per_param(elem: float, fp8_share: float, low: float = 1.0) -> float:
    """All-gather bytes per parameter when a share `fp8_share` of them is stored at `low` bytes
    (1 for FP8, stored_bytes for NVFP4)."""
    return elem * (1 - fp8_share) + low * fp8_share


def low_precision(s, ops: list[Op]) -> list[Op]:
    """`ops` under the scenario's FP8 / NVFP4 recipe: FP4 GEMMs for nvfp4, FP8 attention, and the
    casts."""
    tr = s.training
    if tr.precision != "fp8":
        return ops
    if tr.fp8_recipe in ("mxfp8", "nvfp4") and s.system.gpu.kernel_curve not in BLACKWELL_CURVES:
        from pipesim.errors import ScenarioError
        raise ScenarioError(f"{s.source}: training.fp8_recipe: {tr.fp8_recipe} needs Blackwell tensor cores "
                            f"(kernel_curve {', '.join(BLACKWELL_CURVES)}); {s.system.gpu.name} has "
                            f"kernel_curve {s.system.gpu.kernel_curve!r} -- use tensorwise, delayed or blockwise")
    if tr.bf16_gemms:
        ops = as_bf16(ops, tr.bf16_gemms, s.bytes_per_element)
    if tr.fp8_recipe == "nvfp4":
        ops = as_nvfp4(ops, group_ops(tr.mxfp8_gemms))
    if tr.fp8_attention:
        ops = fp8_attention(ops, tr, s.bytes_per_element)
    return ops + cast_ops(ops, tr.fp8_recipe, s.system.gpu.kernel_curve)
