"""Per-GPU kernel curves: what published kernel benchmarks measured, by GPU architecture.

A system preset's GPU names its curve with `gpu.kernel_curve`. The cost model (pipesim/costs/
gemm.py, flash.py) turns these into op times; nothing here was fitted on a validation case
(scenarios/validation/published.yaml): every number is a kernel benchmark or a datasheet figure,
with its source on the line above.

Fields:
  persistent      GEMM kernels are persistent (Hopper/Blackwell, CUTLASS 3 warp-specialized: the
                  pipeline fill is paid once per SM) or launch a CTA per tile (Volta/Ampere: once
                  per wave)
  clc             (Blackwell) the persistent GEMMs take their tiles by cluster launch control, not a
                  static stride: CTAs that start late (SMs held by another kernel) take fewer tiles
                  (NVIDIA CUTLASS docs, "Blackwell Cluster Launch Control": the static scheduler
                  "is susceptible to workload imbalance if the resources of some SMs are
                  unavailable"; CLC schedules dynamically). costs/moe_interference.py
  best_shape      the M x N x K at which the MAMF was measured, per dtype: the GEMM model is scaled
                  so that it returns exactly the MAMF there, unless `anchor` names another point
  anchor          optional, per dtype: (M, N, K, TFLOP/s) of a published kernel table at an LLM
                  training shape that the GEMM model is scaled to instead (the MAMF stays the cap)
  sms             streaming multiprocessors (wave quantisation of GEMM tiles)
  mamf_tflops     Maximum Achievable Matmul FLOPS per dtype: the best large-GEMM throughput a
                  brute-force shape search measured (the asymptote of the GEMM curve)
  attention       FlashAttention/cuDNN fused attention TFLOP/s by sequence length: a table of
                  presets/attention_tables.py (its module docstring gives the layout)
  fa2             (Blackwell) (table, scale) of FlashAttention-2, PyTorch SDPA's flash backend
  sdpa_cudnn      (Blackwell) (table, scale) of cuDNN through PyTorch SDPA's cuDNN backend
  older_attention (Ampere) {name: (table, scale)} of FlashAttention v1, a Triton FlashAttention and
                  xformers' memory-efficient attention
  attention_fp8   cuDNN's FP8 fused attention by scaling kind: {"fp8": (table, scale), "mxfp8": ...}
  attention_window cuDNN's sliding-window attention measured at one window and head dim (flash.py
                  window_tflops), scaled as the attention table
  attention_scale multiplies the attention table when it was measured on another GPU (documented
                  per entry); 1 for a table measured on this GPU
  attention_kernels  the fused-attention kernels with a published table on this GPU, by the name
                  `training.attention_kernel` gives them: {name: (table, scale)}; `attention` is
                  the default ("auto": what Transformer Engine runs, cuDNN on Hopper/Blackwell)
  sustained       per dtype: the tensor-core rate a power-saturated training step sustains, as a
                  fraction of the burst rate the tables above were measured at (_SUSTAINED below)
"""
from __future__ import annotations

from pipesim.presets.attention_tables import (A100_FA2, B200_CUDNN_913, B200_FA2, B200_SDPA_CUDNN, FA1_ON_A100,
                                              FA1_ON_H100, FA_TRITON_ON_A100, FA_TRITON_ON_H100, GB200_CUDNN,
                                              GB200_CUDNN_917, GB200_CUDNN_FP8, GB200_CUDNN_MXFP8,
                                              GB200_CUDNN_WINDOW, GB300_CUDNN, GB300_CUDNN_913,
                                              GB300_CUDNN_917, GB300_CUDNN_FP8, GB300_CUDNN_MXFP8,
                                              GB300_CUDNN_WINDOW, GB300_SDPA_CUDNN, H100_CUDNN,
                                              H100_CUDNN_2026, H100_CUDNN_FP8, H100_FA2, H100_FA3,
                                              XFORMERS_ON_A100)

# Maximum Achievable Matmul FLOPS (mamf-finder.py, mean of 100 iterations after 50 warm-up, best
# shape of a brute-force search): S. Bekman, "Machine Learning Engineering",
# compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table" (BF16 and FP8
# e4m3 tables; stas00/ml-engineering, 2025). TF32 runs the tensor cores at half the BF16 rate
# (A100/H100/B200 datasheets: TF32 dense = BF16 dense / 2), so its MAMF is taken as BF16 / 2.
# FP32 (CUDA-core SGEMM) has no MAMF row: the generic 0.80 x the datasheet FP32 peak (A100 19.5,
# H100 67, B200/GB200 80, B300 75 TFLOP/s).

# FP8 GEMM at an LLM training shape on Hopper: DeepGEMM README, first release (deepseek-ai/DeepGEMM
# commit a6d97a1, 2025-02-25), "Normal GEMMs for dense models", H800 SXM (the H100 SXM die and
# clocks, NVLink cut) with NVCC 12.8: M=4096, N=7168, K=16384 at 1358 TFLOP/s. The same table's
# other M=4096 shapes (K from 512 to 16384) are printed against the model by
# benchmarks/kernel_curves.py. The MAMF sweep's best FP8 shape (1024 x 9216 x 14336) is an outlier
# of a brute-force search that the tile model cannot reach (288 tiles on 132 SMs); anchoring
# there made every training shape ~20 % too fast against this table.
_HOPPER_FP8_ANCHOR = dict(fp8=(4096, 7168, 16384, 1358.0))
# B200 at the largest shape of the OpenXLA default GEMM performance table for sm_100 (cuBLAS as
# XLA calls it, batch 4 of 4096 x 4096 x 4096 = the tiles of one 16384 x 4096 x 4096 GEMM):
# tensorflow/tensorflow third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h, sm_100,
# "bf16xbf16->bf16" 1690.7 TFLOP/s; openxla xla/backends/gpu/cost_model/matmul_interpolator_data.h
# (the later table with FP8 rows), "f8e4m3fnxf8e4m3fn->bf16" 3279.7 TFLOP/s. The MAMF sweep's best
# shapes are 3-5 % faster than these (a brute-force search keeps its luckiest shape);
# benchmarks/kernel_curves.py prints the tables' other shapes against the model. Caveat: the later
# table's sm_90 FP8 rows exceed the H100's dense FP8 peak (2593 > 1979 TFLOP/s at batch-4
# 4096^3), so they are not used anywhere; its sm_100 FP8 rows stay below B200's 4500 TFLOP/s peak
# at FP8/BF16 = 1.96, the datasheet ratio.
_B200_ANCHOR = dict(bf16=(16384, 4096, 4096, 1690.7), fp8=(16384, 4096, 4096, 3279.7), fp4=(16384, 6144, 4096, 3904.3))
# FP4 GEMMs (NVFP4 / MXFP4 share Blackwell's block-scaled FP4 MMA, tcgen05 kind::mxf4nvf4): the
# MAMF table has no FP4 row. B200's best: cuBLASLt (cublasTest 13.3) at 8192^3, 5239 TFLOP/s, the
# dense table of deepseek-ai/DeepGEMM PR #348 (2026-06-01, B200, CUDA 12.9; the PR's own kernel
# 5702). The curve is anchored at a training shape of the NVFP4 format itself: vLLM PR #20646
# (2025-07, CUTLASS NVFP4 dense GEMM, "nvfp4-noquant"), M=16384 N=6144 K=4096 (a Llama 3 8B QKV
# projection), 3904.3 TFLOP/s on a B200 (the same table's BF16 column, 1.36-1.42 PF/s, is a
# B200's). benchmarks/kernel_curves.py prints both tables' other shapes against the model: the
# tile model is 20-70 % fast on FP4 GEMMs with N or K <= 2048 (unmodelled FP4-specific overheads).
# GB200 and GB300 have no FP4 measurement: B200's, scaled by their FP8 MAMF over B200's and, for
# Blackwell Ultra, by its 1.5x dense FP4 tensor rate (NVIDIA, "Inside NVIDIA Blackwell Ultra").
_B200_FP4 = 5239.0
_FP4_SHAPE = (8192, 8192, 8192)
_FP4_ANCHOR = (16384, 6144, 4096, 3904.3)


def _fp4_anchor(scale: float) -> tuple:
    return _FP4_ANCHOR[:3] + (_FP4_ANCHOR[3] * scale,)

# Sustained vs burst tensor-core rate. Every table above (MAMF, OpenXLA, DeepGEMM, FA3) times
# short bursts, during which the SM clock holds its boost point. A training step is one long
# dense load: the board sits at its power limit and the clock settles lower (a GEMM's rate is
# proportional to its clock). The ratio is measured on the same GPU in the same run by
# mamf-finder's two headlines (S. Bekman, stas00/ml-engineering compute/accelerator/README.md,
# "Maximum Achievable and Sustainable Matmul FLOPS" table, commit 082816f "faster mamf, plus msmf",
# Aug 2026, torch 2.13.0+cu130): MAMF = the boost-clock burst, MSMF = the rate a shape holds over a
# 2 s window at the power limit.
#   H200 SXM (700 W): BF16 MAMF 841.9 @ 1980 MHz, MSMF 708.5 @ 1465 MHz (8192x8448x20480);
#                     FP8 MAMF 1491.9, MSMF 1288.7 @ 1374 MHz (8448x8192x16384)
#   B200 SXM (1000 W): BF16 MAMF 1770.9 @ 1965 MHz, MSMF 1456.3 @ 1339 MHz (9472x8192x20480);
#                      FP8 MAMF 3435.2, MSMF 2795.7 @ 1331 MHz (9472x8192x16384)
# H100 and H800 are the H200's die at the same 700 W. GB200 and B300/GB300 have no MSMF row: the
# B200 ratio is used (their higher power limits may let them sustain more; unmeasured). For B300 a
# check: Transformer Engine's GEMM profiling guide times 100 back-to-back GEMMs of a 5B layer on a
# B300 at 1.50 PF/s BF16, the MAMF (1769) times B200's ratio within 3 % (benchmarks/fp8_recipe_gemms.py).
# A100 has no MSMF row either: its sustained clock under a dense power-limited load is the one
# NVIDIA states its HPL Rpeak at, 1305 MHz against the 1410 MHz boost (G. Lockwood, "Peak FLOPS",
# glennklockwood.com/garden/peak-FLOPS). V100: no measurement, 1.0.
# Other dtypes take the BF16 ratio (the same clock; A100 runs FP8 as BF16).
_HOPPER_SUSTAINED = dict(bf16=708.5 / 841.9, fp8=1288.7 / 1491.9)
# Block-scaled FP8 GEMMs (MXFP8: an E8M0 scale per 32 elements along K, read and applied in the
# GEMM's main loop) against per-tensor FP8 ones of the same shapes. Every FP8 MAMF above is timed
# with per-tensor scales (torch._scaled_mm). Transformer Engine's GEMM profiling guide (NVIDIA/
# TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst, PR #2863, May 2026; B300 SXM6,
# a 5B layer's twelve GEMMs at M = 15,872, pre-quantized operands, "Per-Layer GEMM Time"): FP8
# current scaling 2.158 + 2.329 + 2.325 ms (Fprop, Dgrad, Wgrad) against MXFP8 2.365 + 2.397 +
# 2.400 ms, i.e. MXFP8 at 0.951 x the per-tensor rate (benchmarks/fp8_recipe_gemms.py prints both).
# Measured on B300 only; the other Blackwell parts run the same tcgen05 block-scaled MMA.
_MXFP8_GEMM_RATE = (2.158 + 2.329 + 2.325) / (2.365 + 2.397 + 2.400)
_BLACKWELL_SUSTAINED = dict(bf16=1456.3 / 1770.9, fp8=2795.7 / 3435.2)
_A100_SUSTAINED = dict(bf16=1305 / 1410)

# Blackwell's GEMM pipeline fill, in the H100-timed K-elements of TILE_FILL_K (below), chosen the
# way TILE_FILL_K was, on Blackwell's own kernel tables: the OpenXLA sm_100 tables of
# benchmarks/kernel_curves.py section 1d (80 BF16 + 18 FP8 cuBLAS shapes; grid 384-704 in steps of
# 32). At 576 their mean |log error| is 3.9 % (BF16 +0.7 %, FP8 -5.0 % mean signed); with the
# H100's 384 it was 8.2 % (BF16 +8.2 %, every mid-size shape too fast). The FP4 rows of section 1e, not used in the choice, move from 23.2 to 18.2 %. Why the
# fill is longer: Blackwell's tcgen05 GEMMs stage more K-slices per tile (deeper TMA pipelines into
# the larger shared memory, the tensor-memory accumulator allocated per tile) before the first MMA.
BLACKWELL_FILL_K = 576

# Hopper's fused attention (H100, H800, H200: one die): cuDNN of 2026 by default, the FlashAttention-3
# paper's cuDNN of 2024, FA2 and FA3 from the same figure, FlashAttention v1 and its Triton port;
# PyTorch SDPA's own cuDNN path has no Hopper measurement: the 2024 table stands in (on Blackwell
# that path ran 20-30 % below Transformer Engine's at one version).
_HOPPER_ATTENTION = dict(attention=H100_CUDNN_2026, attention_scale=1.0, attention_fp8=dict(fp8=H100_CUDNN_FP8),
                         sdpa_cudnn=(H100_CUDNN, 1.0), fa2=(H100_FA2, 1.0),
                         older_attention={"cudnn-2024": (H100_CUDNN, 1.0), "cudnn-9.19": (H100_CUDNN_2026, 1.0),
                                          "fa3": (H100_FA3, 1.0), "fa1": (FA1_ON_H100, 1.0),
                                          "fa-triton": (FA_TRITON_ON_H100, 1.0)})


def _cudnn_of_2025(cudnn_913: tuple, cudnn_917: tuple) -> dict:
    """A Blackwell part's cuDNN of late 2025 (presets/attention_tables.py: 9.13 measured on B200 and
    GB300, 9.17 on GB200 and GB300), each (table, scale): another part's table at the BF16 MAMF ratio,
    as for its current cuDNN table."""
    return {"cudnn-9.13": cudnn_913, "cudnn-9.17": cudnn_917}


KERNEL_CURVES: dict[str, dict] = {
    # V100: 80 SMs (Volta whitepaper Table 1). The MAMF table has no V100 row: the generic
    # MAMF/peak of 0.80 (below) times the 125 TFLOP/s FP16 tensor peak. No BF16/TF32/FP8 tensor
    # cores: those run at the FP32 rate. No published V100 FA2 table: the H100 FA2 curve scaled
    # by the MAMF ratio 100 / 794.5.
    "v100": dict(persistent=False, sms=80, best_shape=dict(bf16=(4096, 4096, 4096)), mamf_tflops=dict(fp16=100.0, bf16=12.5, tf32=12.5, fp32=12.6, fp8=100.0),
                 attention=H100_FA2, attention_scale=100.0 / 794.5),
    # A100 SXM: 108 SMs (A100 whitepaper Table 1); MAMF BF16 271.2 (table above; FP16 runs on
    # the same tensor cores at the same rate). No FP8 tensor cores: FP8 runs as BF16.
    # Attention: the FlashAttention-2 paper's A100 figure (Fig. 4, forward + backward, causal or
    # not, head dim 64 / 128, 512-16K) for FA2, v1, a Triton FlashAttention and xformers, on the H100
    # FA2 table's forward / backward split (_measured_on). Until session 39: the H100 FA2 table x
    # 230 / 370 (FA2's A100 forward plateau, Sec. 4.1), -9 .. +6 % off these bars.
    "a100": dict(persistent=False, sms=108, best_shape=dict(bf16=(1024, 10240, 5120)), mamf_tflops=dict(fp16=271.2, bf16=271.2, tf32=135.6, fp32=19.5 * 0.8, fp8=271.2),
                 attention=A100_FA2, attention_scale=1.0, sustained=_A100_SUSTAINED,
                 older_attention={"fa1": (FA1_ON_A100, 1.0), "fa-triton": (FA_TRITON_ON_A100, 1.0),
                                  "xformers": (XFORMERS_ON_A100, 1.0)}),
    # H100 SXM5: 132 SMs (Hopper whitepaper Table 2). MAMF BF16 794.5, FP8 1402.6.
    "h100": dict(persistent=True, sms=132, best_shape=dict(bf16=(2048, 2048, 13312), fp8=(1024, 9216, 14336)), mamf_tflops=dict(fp16=794.5, bf16=794.5, tf32=397.3, fp32=67 * 0.8, fp8=1402.6),
                 anchor=_HOPPER_FP8_ANCHOR, sustained=_HOPPER_SUSTAINED, **_HOPPER_ATTENTION),
    # H800: the H100 SXM die (132 SMs, same tensor cores) with NVLink cut to 400 GB/s; same curves.
    "h800": dict(persistent=True, sms=132, best_shape=dict(bf16=(2048, 2048, 13312), fp8=(1024, 9216, 14336)), mamf_tflops=dict(fp16=794.5, bf16=794.5, tf32=397.3, fp32=67 * 0.8, fp8=1402.6),
                 anchor=_HOPPER_FP8_ANCHOR, sustained=_HOPPER_SUSTAINED, **_HOPPER_ATTENTION),
    # H200 SXM: the H100 die with HBM3e; MAMF table: BF16 "H200 is the same" as H100, FP8 1453.4.
    "h200": dict(persistent=True, sms=132, best_shape=dict(bf16=(2048, 2048, 13312), fp8=(1280, 4096, 12032)), mamf_tflops=dict(fp16=794.5, bf16=794.5, tf32=397.3, fp32=67 * 0.8, fp8=1453.4),
                 sustained=_HOPPER_SUSTAINED, **_HOPPER_ATTENTION),
    # B200: 148 SMs (NVIDIA Blackwell architecture technical brief); MAMF BF16 1745.0, FP8
    # 3432.5. Attention: GB200's cuDNN table (the same die) scaled by the BF16 MAMF ratio
    # 1745.0 / 1822.0 -- NVIDIA's B200 table was measured through PyTorch's cuDNN path, not the
    # one Transformer Engine calls; FA2 measured on B200 (B200_FA2).
    "b200": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=148, best_shape=dict(bf16=(1792, 16128, 3072), fp8=(15360, 4096, 3072), fp4=_FP4_SHAPE),
                 mamf_tflops=dict(fp16=1745.0, bf16=1745.0, tf32=872.5, fp32=80 * 0.8, fp8=3432.5, fp4=_B200_FP4),
                 anchor=_B200_ANCHOR, attention=GB200_CUDNN, attention_scale=1745.0 / 1822.0,
                 sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(B200_FA2, 1.0),
                 sdpa_cudnn=(B200_SDPA_CUDNN, 1.0),
                 older_attention=_cudnn_of_2025((B200_CUDNN_913, 1.0), (GB200_CUDNN_917, 1745.0 / 1822.0)),
                 attention_fp8=dict(fp8=GB200_CUDNN_FP8, mxfp8=GB200_CUDNN_MXFP8), attention_window=GB200_CUDNN_WINDOW),
    # GB200 (Grace-Blackwell superchip GPU, higher power limit): MAMF BF16 1822.0, FP8 3615.6.
    # Attention: its own cuDNN table; FA2 B200's scaled by the BF16 MAMF ratio.
    "gb200": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=148, best_shape=dict(bf16=(4096, 9728, 2048), fp8=(19456, 5120, 1536), fp4=_FP4_SHAPE),
                  mamf_tflops=dict(fp16=1822.0, bf16=1822.0, tf32=911.0, fp32=80 * 0.8, fp8=3615.6,
                                   fp4=_B200_FP4 * 3615.6 / 3432.5),
                  anchor=dict(fp4=_fp4_anchor(3615.6 / 3432.5)), attention=GB200_CUDNN, attention_scale=1.0,
                  sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(B200_FA2, 1822.0 / 1745.0),
                  sdpa_cudnn=(B200_SDPA_CUDNN, 1822.0 / 1745.0),
                  older_attention=_cudnn_of_2025((B200_CUDNN_913, 1822.0 / 1745.0), (GB200_CUDNN_917, 1.0)),
                  attention_fp8=dict(fp8=GB200_CUDNN_FP8, mxfp8=GB200_CUDNN_MXFP8), attention_window=GB200_CUDNN_WINDOW),
    # B300 (Blackwell Ultra, HGX/DGX, 1.1 kW): 160 SMs (NVIDIA Blackwell Ultra technical blog, 2025);
    # MAMF B300 SXM BF16 1769.0, FP8 3353.3. Attention: GB300's tables (Blackwell Ultra) scaled
    # by the BF16 MAMF ratio 1769.0 / 1822.0 (GB300's MAMF stand-in, below).
    "b300": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=160, best_shape=dict(bf16=(12288, 18432, 1024), fp8=(3072, 6144, 7168), fp4=_FP4_SHAPE),
                 mamf_tflops=dict(fp16=1769.0, bf16=1769.0, tf32=884.5, fp32=75 * 0.8, fp8=3353.3,
                                  fp4=_B200_FP4 * 3353.3 / 3432.5 * 1.5),
                 anchor=dict(fp4=_fp4_anchor(3353.3 / 3432.5 * 1.5)), attention=GB300_CUDNN,
                 attention_scale=1769.0 / 1822.0,
                 sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(B200_FA2, 1769.0 / 1745.0),
                 sdpa_cudnn=(GB300_SDPA_CUDNN, 1769.0 / 1822.0),
                 older_attention=_cudnn_of_2025((GB300_CUDNN_913, 1769.0 / 1822.0), (GB300_CUDNN_917, 1769.0 / 1822.0)),
                 attention_fp8=dict(fp8=GB300_CUDNN_FP8, mxfp8=GB300_CUDNN_MXFP8), attention_window=GB300_CUDNN_WINDOW),
    # GB300 (Blackwell Ultra in NVL72, 1.4 kW): no MAMF row. Its datasheet dense BF16 and FP8 rates are
    # GB200's (NVL72 datasheets: 2.5 / 5 PF per GPU for both), 11 % above the HGX B300's (2.25 / 4.5 PF
    # at 1.1 kW, presets/systems.py), so the measured GB200 MAMF stands in for BF16 and FP8 (and its
    # best shapes), on the B300's 160 SMs; FP4 is GB200's times Blackwell Ultra's 1.5x dense FP4.
    # Attention: its own cuDNN table; FA2 as GB200's.
    "gb300": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=160, best_shape=dict(bf16=(4096, 9728, 2048), fp8=(19456, 5120, 1536), fp4=_FP4_SHAPE),
                  mamf_tflops=dict(fp16=1822.0, bf16=1822.0, tf32=911.0, fp32=75 * 0.8, fp8=3615.6,
                                   fp4=_B200_FP4 * 3615.6 / 3432.5 * 1.5),
                  anchor=dict(fp4=_fp4_anchor(3615.6 / 3432.5 * 1.5)), attention=GB300_CUDNN, attention_scale=1.0,
                  sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(B200_FA2, 1822.0 / 1745.0),
                  sdpa_cudnn=(GB300_SDPA_CUDNN, 1.0),
                  older_attention=_cudnn_of_2025((GB300_CUDNN_913, 1.0), (GB300_CUDNN_917, 1.0)),
                  attention_fp8=dict(fp8=GB300_CUDNN_FP8, mxfp8=GB300_CUDNN_MXFP8), attention_window=GB300_CUDNN_WINDOW),
}

# Fused-attention kernels with a published table per GPU (`training.attention_kernel`): Hopper has
# the cuDNN of 2026 (its default) and all three bars of the FlashAttention-3 paper's Fig. 5 (cuDNN of
# 2024, FlashAttention-2 -- the kernel PyTorch's SDPA flash backend vendors -- and FlashAttention-3),
# and the older FlashAttention v1 and its Triton port (_HOPPER_ATTENTION); Ampere FA2, v1 and the
# Triton port, Volta FA2 only; Blackwell cuDNN of three releases and FA2 (FA3 has no Blackwell
# kernel).
def _attention_kernels(c: dict) -> dict:
    own = "fa2" if any(t is H100_FA2 for t in (c["attention"], c["attention"].get("relative_to"))) else "cudnn"
    kernels = {own: (c["attention"], c["attention_scale"])}
    kernels.update(c.get("older_attention", {}))
    if "fa2" in c:
        kernels["fa2"] = c["fa2"]
    if kernels.get("cudnn"):                       # PyTorch SDPA's cuDNN path: measured on Blackwell
        kernels["sdpa-cudnn"] = c.get("sdpa_cudnn", kernels["cudnn"])
    return kernels


# Sparse MLA attention, the main kernel of DeepSeek sparse attention (MQA over the latent keys:
# q/k dim kv_lora_rank + rope = 576, v dim 512, top-k keys per query). FlashMLA README
# (deepseek-ai/FlashMLA, HEAD 9241ae3), "sparse MLA prefill": forward up to 640 TFLOP/s on H800
# SXM5 (the H100 SXM die and clocks) and up to 1450 TFLOP/s on B200, FLOPs counted
# 2·queries·topk·heads·(576 + 512) (its tests/lib.py), at 128 query heads. H200 (same die) takes
# H800's; GB200, GB300 and B300 B200's scaled by the BF16 MAMF ratio (no sparse table of their
# own). No backward rate is published (Megatron-Core runs cuDNN's sparse backward): the forward's times
# the dense cuDNN backward / forward ratio at 16K on H100 (Fig. 5 above, 516 / 595). No sparse
# kernel runs before SM90: A100 and V100 have no entry.
_SPARSE_BWD_RATIO = 516.0 / 595.0
_SPARSE_MLA_FWD = {"h100": 640.0, "h800": 640.0, "h200": 640.0, "b200": 1450.0,
                   "gb200": 1450.0 * 1822.0 / 1745.0, "gb300": 1450.0 * 1822.0 / 1745.0,
                   "b300": 1450.0 * 1769.0 / 1745.0}


def _sparse_mla(name: str) -> dict:
    fwd = _SPARSE_MLA_FWD.get(name)
    return {} if fwd is None else {"sparse_mla": {"fwd": fwd, "bwd": fwd * _SPARSE_BWD_RATIO}}


KERNEL_CURVES = {name: dict(c, attention_kernels=_attention_kernels(c), **_sparse_mla(name))
                 for name, c in KERNEL_CURVES.items()}


# A GPU without a curve (a custom `gpu:` block) gets a flat matmul efficiency: 0.80, the median
# MAMF / dense peak of the NVIDIA rows of the MAMF table above (A100 0.87, H100 0.80, B200 0.78,
# GB200 0.73).
GENERIC_MATMUL_EFFICIENCY = 0.80

# GEMM tile model constants, chosen on the OpenXLA default GEMM performance table for H100
# (sm_90, bf16; tensorflow/tensorflow third_party/xla/xla/service/gpu/model/
# matmul_interpolator_data.h, 25 shapes from 256 to 4096, listed with the model's predictions in
# benchmarks/kernel_curves.py): a kernel benchmark, never a training run. The four constants
# below minimised the mean |log error| over a small grid of values; TILE_FILL_K was chosen again
# (grid 0-1024 in steps of 128) when the tile epilogue of pipesim/costs/gemm.py was added:
# 8.5 %, mean signed -1.2 % (640 before the epilogue).
# TILE_FILL_K: the pipeline fill of a persistent GEMM kernel (first K-slices loaded before the
# tensor cores start; later tiles prefetch during the previous epilogue, so it is paid once per
# SM), in K-elements of BF16 tile work; a fixed count of pipeline stages, so it is timed at the
# BF16 rate for every dtype.
TILE_FILL_K = 384


def fill_rate(c: dict) -> float:
    """FLOP/s at which the TILE_FILL_K pipeline fill is timed. A persistent kernel's fill is the
    latency of its first TMA loads from HBM, which a faster tensor core does not shorten: it
    takes the seconds it takes on the H100 it was chosen on, on every Hopper/Blackwell GPU
    (against the OpenXLA sm_100 table, benchmarks/kernel_curves.py section 1d, timing it at
    B200's own rate left mid-size GEMMs +22 % too fast; at the H100's, +7 %), times the curve's
    own fill depth (`fill_k`: BLACKWELL_FILL_K on Blackwell). Volta/Ampere kernels (one fill per
    wave) keep their own rate: no table to test another choice on."""
    if not c["persistent"]:
        return c["mamf_tflops"]["fp16"] * 1e12
    ref = KERNEL_CURVES["h100"]
    return ref["mamf_tflops"]["fp16"] * 1e12 / ref["sms"] * c["sms"] * TILE_FILL_K / c.get("fill_k", TILE_FILL_K)
# Output tiles cuBLAS/CUTLASS choose between (M x N) and their per-SM throughput relative to the
# largest (smaller tiles reuse each loaded operand less). CUTLASS 3 Hopper tile shapes:
# NVIDIA/cutlass include/cutlass/gemm/collective/builders/sm90_gmma_builder.inl.
TILES = (((128, 256), 1.0), ((256, 128), 1.0), ((128, 128), 0.6), ((64, 128), 0.3))
# split-K factors cuBLAS uses when M x N has too few tiles to fill the SMs (cuBLASLt
# CUBLASLT_ALGO_CONFIG_SPLITK_NUM), with the throughput they keep after the fp32 partial-sum
# reduction.
SPLIT_K = (1, 2, 4, 8)
SPLIT_K_EFFICIENCY = 0.9


def curve(name: str | None) -> dict | None:
    return KERNEL_CURVES.get(name) if name else None


def sustained_ratio(c: dict, dtype: str) -> float:
    """Sustained / burst tensor-core rate of `dtype` on this GPU (1 where none is measured)."""
    table = c.get("sustained", {})
    return table.get(dtype, table.get("bf16", 1.0))


def gemm_anchor(c: dict, dtype: str) -> tuple[tuple, float]:
    """((M, N, K), FLOP/s) the GEMM model of `dtype` is scaled to: the published `anchor` when
    the curve has one, else the MAMF at its best shape."""
    if dtype in c.get("anchor", {}):
        *shape, tflops = c["anchor"][dtype]
        return tuple(shape), tflops * 1e12
    return tuple(c["best_shape"].get(dtype) or c["best_shape"]["bf16"]), c["mamf_tflops"][dtype] * 1e12
