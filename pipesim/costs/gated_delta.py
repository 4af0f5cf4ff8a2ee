"""A Gated DeltaNet layer of a hybrid model (Yang, Kautz & Hatamizadeh, "Gated Delta Networks",
ICLR 2025; Qwen3-Next's linear attention) as Megatron-Core runs it
(megatron/core/ssm/gated_delta_net/common.py, gdn.py), per micro-batch per GPU:

  norm      the layer's pre-norm
  in_proj   column-parallel h -> 2·Hk·dk + 2·Hv·dv + 2·Hv  (q, k, v, z, beta, alpha)
  conv1d    causal depthwise convolution (width 4, no bias) over q, k, v, then SiLU (memory bound)
  gdn       the chunked gated delta rule (FLA `chunk_gated_delta_rule`, chunk C = 64), per chunk
            and value head (q, k shared over Hv/Hk value heads), in the chunkwise WY form of Yang
            et al. 2024 ("Parallelizing Linear Transformers with the Delta Rule over Sequence
            Length", Sec. 3): A = βK Kᵀ (2C²dk), its triangular inverse (2C³/3), W = A βK and
            U = A βV (2C²dk + 2C²dv), the intra-chunk Q Kᵀ (2C²dk) and its product with the new
            values (2C²dv), and the state pass over the chunks, one after another: new values
            U − W S (2C·dk·dv), output Q S (2C·dk·dv), update S += Kᵀ·values (2C·dk·dv).
            The state pass is sequential over chunks (each needs the previous state), parallel
            over the batch x heads only; the rest is parallel over chunks.
            The backward runs each product's two gradients (2x).
  norm_out  the gated RMSNorm over each value head
  out_proj  row-parallel Hv·dv -> h
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.ops import Op

CHUNK = 64          # megatron/core/ssm/gated_delta_net/gdn.py: self.chunk_size = 64
FP32 = 4


def gdn_ops(s, sh, norm, vector, matmul) -> list[Op]:
    m, dtype = s.model, s.training.precision
    e, tp, T = sh.e, sh.tp, sh.tokens
    t = tp.size
    Hk, Hv, dk, dv = m.gdn_num_key_heads, m.gdn_num_value_heads, m.gdn_key_head_dim, m.gdn_value_head_dim
    K = m.mamba_conv_kernel
    tok = T / tp.token_div
    ops = [norm("ln1")]
    in_proj = matmul("in_proj", T, sh.h, 2 * Hk * dk + 2 * Hv * dv + 2 * Hv, sh, "column",
                     saved_input=tok * sh.h * e, dtype=dtype, bias=False)
    ops.append(in_proj)
    conv_elems = T * (2 * Hk * dk + Hv * dv) / t
    conv_shape = dict(tokens=int(T), channels=int((2 * Hk * dk + Hv * dv) / t), kernel=K, dtype=dtype)
    ops.append(vector("conv1d", conv_elems, sh, (2 * K + 4, 4 * K + 8), saved_bytes=conv_elems * e,
                      params=(2 * Hk * dk + Hv * dv) * K / t, measure_fwd=(("conv1d_fwd", conv_shape),),
                      measure_bwd=(("conv1d_bwd", conv_shape),)))
    cp = sh.cp       # under context parallelism: the whole sequence, heads / cp (mamba.py)
    ops.append(delta_rule_op(s, replace(sh, s=sh.s * cp), Hv / (t * cp), Hk / (t * cp), dk, dv))
    y_elems = T * Hv * dv / t
    ops.append(vector("norm_out", y_elems, sh, (10, 14), reads=2, saved_bytes=2 * y_elems * e, params=dv))
    ops.append(matmul("out_proj", T, Hv * dv, sh.h, sh, "row", saved_input=y_elems * e, dtype=dtype, bias=False))
    ops.append(vector("residual1", tok * sh.h, sh, (1, 0), reads=2, writes=1))
    return ops


def delta_rule_op(s, sh, heads: float, key_heads: float, dk: int, dv: int) -> Op:
    """The chunked gated delta rule over the local value `heads` of one micro-batch."""
    e, T, C = sh.e, sh.tokens, CHUNK
    chunks = -(-sh.s // C)
    adt = "bf16" if s.training.precision == "fp8" else s.training.precision   # the kernel stays 16-bit
    par = sh.b * chunks * heads                       # chunk x head blocks that run side by side
    parallel = ((par, C, C, dk, adt),                 # A = βK Kᵀ
                (par, C, dk, C, adt), (par, C, dv, C, adt),   # W = A βK, U = A βV
                (par, C, C, dk, adt), (par, C, dv, C, adt))   # Q Kᵀ, (Q Kᵀ ∘ M) · values
    # the state pass (FLA chunk_gated_delta_rule_fwd_h): one program per head keeps its dk x dv
    # state on chip and loops over the chunks, three C-deep products per chunk; timed as one GEMM
    # per head whose K runs over all of them (one pipeline fill, each SM busy with its heads)
    state = ((sh.b * heads, dk, dv, 3 * C * chunks, adt),)
    gemm_flops = sum(2 * b * mm * n * k for b, mm, n, k, _ in parallel + state)
    flops = gemm_flops + par * 2 * C ** 3 / 3         # + the triangular inverse
    qk = T * key_heads * dk * 2                       # elements of q and k
    v = T * heads * dv
    gates = 2 * T * heads                             # beta and the decay, fp32
    wu = 2 * T * heads * (dk + dv)                    # W and U written, then read by the state pass
    fwd_bytes = (qk + 2 * v + wu) * e + gates * FP32 + sh.b * heads * dk * dv * FP32 * 2
    saved = (qk + 2 * v) * e + gates * FP32
    # a CPU profile's measurement of the emulator's delta rule replaces the curve (profile key gdn_*)
    shape = dict(batch=sh.b, seq=sh.s, heads=int(heads), key_dim=dk, value_dim=dv, dtype=s.training.precision)
    # params: A_log and dt_bias per value head
    return Op("gdn", "matmul", flops, 2 * flops, fwd_bytes, 2 * fwd_bytes, saved_bytes=saved, params=2 * heads,
              gemms_fwd=parallel + state, gemms_bwd=parallel + state + parallel + state,
              measure_fwd=(("gdn_fwd", shape),), measure_bwd=(("gdn_bwd", shape),))
