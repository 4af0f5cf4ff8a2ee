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
"""
from __future__ import annotations


from pipesim.costs.ops import Op

CAST_BYTES = {"delayed": 4.0, "tensorwise": 6.0, "blockwise": 4.0 + 8 / 128, "mxfp8": 4.0 + 2 / 32}
# The weight copy: read BF16 once, write FP8 row- and column-wise (same recipes as above).
FP8_WEIGHT_COPY_BYTES = 2.0      # per parameter held: the FP8 copy and its transpose
BLACKWELL_CURVES = ("b200", "gb200", "gb300")
# per-tensor recipes on Blackwell: no transposed copy (module docstring)
NO_TRANSPOSE = ("delayed", "tensorwise")


def cast_bytes(recipe: str, curve: str | None) -> float:
    """Bytes moved per element cast, by recipe, on the GPU of kernel curve `curve`."""
    if curve in BLACKWELL_CURVES and recipe in NO_TRANSPOSE:
        return CAST_BYTES[recipe] - 1.0
    return CAST_BYTES[recipe]


def weight_copy_bytes(recipe: str, curve: str | None) -> float:
    """FP8 weight bytes held per parameter beside the BF16 weight."""
    return FP8_WEIGHT_COPY_BYTES / 2 if curve in BLACKWELL_CURVES and recipe in NO_TRANSPOSE else FP8_WEIGHT_COPY_BYTES


def cast_ops(ops: list[Op], recipe: str, curve: str | None = None) -> list[Op]:
    """One cast op per FP8 GEMM op: forward casts X (M x K), backward casts dY (M x N)."""
    per = cast_bytes(recipe, curve)
    out = []
    for op in ops:
        if not op.gemms_fwd or op.gemms_fwd[0][4] != "fp8":
            continue
        _, m, n, k, _ = op.gemms_fwd[0]
        out.append(Op(f"{op.name}_fp8_cast", "vector", m * k, m * n, m * k * per, m * n * per))
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
MASTER_TO_FP8_BYTES = 4.0 + 1.0
TRANSPOSE_BYTES = 1.0 + 1.0


def fp8_storage_cast_bytes(gemm_params: float, local_gemm_params: float, recipe: str,
                           curve: str | None = None) -> float:
    """Per step under FP8 parameter storage: the master-shard cast plus the column-wise rebuild."""
    transpose = TRANSPOSE_BYTES if weight_copy_bytes(recipe, curve) > 1 else 0.0
    return local_gemm_params * MASTER_TO_FP8_BYTES + gemm_params * transpose


def gathered_bytes_per_param(elem: float, fp8_share: float) -> float:
    """All-gather bytes per parameter when a share `fp8_share` of them is stored in FP8."""
    return elem * (1 - fp8_share) + 1.0 * fp8_share
