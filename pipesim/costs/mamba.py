"""A Mamba-2 layer of a hybrid model (Dao & Gu 2024, "Transformers are SSMs", arXiv 2405.21060) as
Megatron-Core's MambaMixer runs it (megatron/core/ssm/mamba_mixer.py), per micro-batch per GPU:

  norm      the layer's pre-norm (RMSNorm)
  in_proj   column-parallel h -> 2·d_inner + 2·G·N + H  (z, x, B, C, dt; heads and groups split
            over the tensor group, `nheads % tp == 0`, `ngroups % tp == 0`)
  conv1d    causal depthwise convolution of width d_conv over x, B, C, then SiLU (memory bound)
  ssd       the chunked state-space scan (mamba_ssm `mamba_chunk_scan_combined`, chunk Q):
            per chunk and group C·Bᵀ (2Q²N), per chunk and head the masked product with x (2Q²P),
            the chunk's state Bᵀx (2QNP) and the states' contribution C·state (2QNP) (the paper's
            Sec. 6 / Listing 1 SSD algorithm). GEMMs on the GPU's curve; the backward runs each
            product's two gradients (2x). The inter-chunk recurrence (N·P per chunk and head) is
            its own memory-bound kernel between them, added to the GEMMs' time (Op.serial_bytes)
  norm_out  the gated RMSNorm y·silu(z) over groups (memory bound)
  out_proj  row-parallel d_inner -> h
  residual

H heads of head dim P (d_inner = H·P), G groups, state N. Saved for the backward: the in_proj and
out_proj inputs, the convolution's input, the scan's x, B, C, z, dt (fp32) and output, the gated
norm's input.

Context parallelism (megatron/core/ssm/mamba_context_parallel.py): all-to-alls over the CP group
turn the sequence-sharded z, x, B, C, dt into head-sharded ones before the conv and the scan, and
the scan's output back before out_proj (the backward the same, reversed); the scan then runs the
whole sequence over heads / CP. The Gated DeltaNet layer does the same with q, k, v, z, beta,
alpha (gated_delta_net/gdn.py). `cp_all_to_all` times them: blocking, on the compute stream.
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.ops import Op

FP32 = 4


def mamba_ops(s, sh, norm, vector, matmul) -> list[Op]:
    """The ops of one Mamba-2 layer; `norm`, `vector`, `matmul` are layers.py's builders."""
    m, dtype = s.model, s.training.precision
    e, tp, T = sh.e, sh.tp, sh.tokens
    t = tp.size
    H, P, N, G = m.mamba_heads, m.mamba_head_dim, m.mamba_state_dim, m.mamba_num_groups
    Q, K = m.mamba_chunk_size, m.mamba_conv_kernel
    d_inner = H * P
    conv_dim = d_inner + 2 * G * N                     # x, B, C
    tok = T / tp.token_div
    ops = [norm("ln1")]
    in_proj = matmul("in_proj", T, sh.h, 2 * d_inner + 2 * G * N + H, sh, "column", saved_input=tok * sh.h * e,
                     dtype=dtype, bias=False)
    ops.append(replace(in_proj, matrices=()))      # Muon leaves it to Adam (MambaMixer: use_muon = False)
    conv_elems = T * conv_dim / t
    conv_params = (conv_dim * K + conv_dim) / t        # depthwise weight and bias
    conv_shape = dict(tokens=int(T), channels=int(conv_dim / t), kernel=K, dtype=dtype)
    ops.append(vector("conv1d", conv_elems, sh, (2 * K + 4, 4 * K + 8), saved_bytes=conv_elems * e,
                      params=conv_params, measure_fwd=(("conv1d_fwd", conv_shape),),
                      measure_bwd=(("conv1d_bwd", conv_shape),)))
    cp = sh.cp
    # context parallelism (Megatron MambaContextParallel): all-to-alls give each rank the whole
    # sequence for heads / cp of its heads (groups / cp, or one group repeated when cp exceeds them)
    ops.append(ssd_op(s, replace(sh, s=sh.s * cp), H / (t * cp), max(G / (t * cp), 1.0), P, N, Q))
    y_elems = T * d_inner / t
    ops.append(vector("norm_out", y_elems, sh, (10, 14), reads=2, saved_bytes=2 * y_elems * e,
                      params=d_inner / t))
    ops.append(matmul("out_proj", T, d_inner, sh.h, sh, "row", saved_input=y_elems * e, dtype=dtype, bias=False))
    ops.append(vector("residual1", tok * sh.h, sh, (1, 0), reads=2, writes=1))
    return ops


def ssd_op(s, sh, heads: float, groups: float, P: int, N: int, Q: int) -> Op:
    """The chunked SSD scan over the local `heads` (and `groups`) of one micro-batch."""
    e, T = sh.e, sh.tokens
    chunks = sh.b * -(-sh.s // Q)
    adt = "bf16" if s.training.precision == "fp8" else s.training.precision   # the scan stays 16-bit
    gemms = ((chunks * groups, Q, Q, N, adt),         # C Bᵀ per group
             (chunks * heads, Q, P, Q, adt),          # (L ∘ C Bᵀ) x per head
             (chunks * heads, N, P, Q, adt),          # chunk state Bᵀ x
             (chunks * heads, Q, P, N, adt))          # C · state
    flops = sum(2 * b * m * n * k for b, m, n, k, _ in gemms)
    x = T * heads * P                                  # elements of x (and y, z)
    bc = 2 * T * groups * N
    dt = T * heads
    states = chunks * heads * P * N                    # elements of the per-chunk states
    scan_e = FP32 if s.training.precision in ("fp32", "tf32") else 2    # C's dtype (bf16 / fp16)
    # in the GEMM kernels: chunk_state writes the fp32 states, chunk_scan reads the passed ones
    fwd_bytes = (2 * x + bc) * e + dt * FP32 + states * (FP32 + scan_e) + x * e
    # between them the sequential state passing (mamba_ssm ssd_state_passing.py), its own memory-
    # bound kernel: the forward reads the fp32 states and writes the passed ones in C's dtype; the
    # backward re-runs it in fp32 (read + write), then reads states and dstates (fp32) and writes
    # both in x's dtype (ssd_combined.py _mamba_chunk_scan_combined_fwd / _bwd)
    serial_fwd = states * (FP32 + scan_e)
    serial_bwd = states * 2 * FP32 + states * 2 * (FP32 + scan_e)
    saved = (3 * x + bc) * e + dt * FP32
    # the scan's A_log, D and dt_bias (one each per head)
    # a CPU profile's measurement of the emulator's chunked scan replaces the curve (profile key ssd_*)
    shape = dict(batch=sh.b, seq=sh.s, heads=int(heads), head_dim=P, state=N, groups=int(groups), chunk=Q,
                 dtype=s.training.precision)
    return Op("ssd", "matmul", flops, 2 * flops, fwd_bytes, 2 * fwd_bytes, saved_bytes=saved, params=3 * heads,
              gemms_fwd=gemms, gemms_bwd=gemms + gemms, measure_fwd=(("ssd_fwd", shape),),
              measure_bwd=(("ssd_bwd", shape),), serial_bytes_fwd=serial_fwd, serial_bytes_bwd=serial_bwd)


def cp_all_to_all(s, sh, kind: str) -> tuple[float, float]:
    """(seconds per layer forward (= backward), bytes each way) of a Mamba-2 or Gated DeltaNet
    layer's context-parallel all-to-alls: the in_proj outputs in, the mixer's output back."""
    from pipesim.costs.collectives import collective_time
    from pipesim.costs.topology import placement
    m, t, e = s.model, sh.tp.size, sh.e
    if sh.cp <= 1:
        return 0.0, 0.0
    if kind == "mamba":
        d_out = m.mamba_heads * m.mamba_head_dim
        d_in = 2 * d_out + 2 * m.mamba_num_groups * m.mamba_state_dim + m.mamba_heads
    else:
        d_out = m.gdn_num_value_heads * m.gdn_value_head_dim
        d_in = 2 * m.gdn_num_key_heads * m.gdn_key_head_dim + 2 * d_out + 2 * m.gdn_num_value_heads
    group, algo = placement(s, "cp"), s.parallel.collective
    # after the column-parallel in_proj every tensor rank holds all of its CP rank's tokens
    sizes = [sh.tokens * d / t * e for d in (d_in, d_out)]
    seconds = sum(collective_time("all_to_all", n, group, algo) for n in sizes)
    return seconds, sum(sizes) * (sh.cp - 1) / sh.cp

