"""Predicted vs published kernel throughput for the cost model's curves (pipesim/costs/gemm.py,
flash.py; constants in pipesim/presets/gpus.py), so a reader sees how each curve was made.

    .venv/bin/python benchmarks/kernel_curves.py

1. GEMM, H100 BF16: the OpenXLA default GEMM performance table (tensorflow/tensorflow
   third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h, sm_90, "bf16xbf16->bf16";
   25 of its shapes, batch b of M x N x K) -- the table the tile constants were chosen on.
1b. GEMM, H100 FP8: the DeepGEMM README's first table (deepseek-ai/DeepGEMM commit a6d97a1,
   2025-02-25, "Normal GEMMs for dense models", H800 SXM = H100 SXM compute, M = 4096 rows):
   DeepGEMM's TFLOP/s and its speed-up over DeepSeek's CUTLASS 3.6 kernel (both block-scaled).
   The largest shape is the FP8 anchor; the other five test the shape dependence.
1c. GEMM, H100 FP8, an independent table never used to choose anything: tile-ai/tilelang
   benchmark/matmul_fp8/README.md (H800 SXM, M = N = 8192, K 256 to 16384, autotuned FP8 GEMM
   with a per-tensor scale: the kind of kernel tensorwise/delayed FP8 training runs).
1d. GEMM, B200, BF16 and FP8: the OpenXLA default GEMM performance tables for sm_100 (same file
   as 1, and its later openxla version with FP8 rows): the batch-4 4096^3 rows are the anchors,
   the rest test the shape dependence and the fixed-time pipeline fill (presets/gpus.py fill_rate).
2. GEMM, the MAMF best shapes of every GPU (S. Bekman, ml-engineering, "Maximum Achievable Matmul
   FLOPS comparison table"): the curve is scaled to return the MAMF there.
2b. GEMM under a sustained, power-limited load: the burst curve times the GPU's sustained ratio
   (MSMF / MAMF of one mamf-finder run, presets/gpus.py _SUSTAINED) at the shapes where the MSMF
   was measured, against the published MSMF. The ratio was taken from the two headlines, not from
   these shapes, so this tests the curve's shape dependence at the power limit.
3. Attention, H100: the FlashAttention-3 paper's cuDNN bars (Shah et al. 2024, Fig. 5) are the
   `cudnn-2024` table itself (the Hopper default is cuDNN 9.19's run of February 2026); the FA3
   kernel's own bars (same figure) and pytorch/benchmark PR #2391's FA3 forward runs (batch x seq =
   16k, 16 heads, head dim 128) are independent measurements.
3c. Attention on Blackwell, head dim 128, causal: pipesim's default tables are NVIDIA's cudnn-frontend
   runs of April 2026 (cuDNN 9.22, GB200 / GB300, 2K-32K; B200 = GB200's at the MAMF ratio). The
   same repository's earlier runs are tables of their own (presets/attention_tables.py): `cudnn-9.13`
   (October 2025, B200 / GB300, through the graph API Transformer Engine calls), `cudnn-9.17`
   (December 2025, GB200 / GB300, BF16 and per-tensor FP8; its 512 and 1K rows are the default tables'
   short end) and `sdpa-cudnn` (October 2025, B200, through PyTorch's cuDNN path). Printed as each
   over the default: the drift a run of older software sees.
3f. Attention, forward + backward, A100 and H100: the FlashAttention-2 paper's Fig. 4 / 7 bars (as the
   flash-attention repository ships them) for FlashAttention-2, v1, a Triton FlashAttention and
   xformers (A100). On A100 these bars are pipesim's rates (printed so a reader sees them); on H100
   FA2 is the FA3 paper's table, here against an independent run of the same kernel, and v1 / the
   Triton kernel take their ratio to FA2 in the figure (Triton: the A100 ratio), so their error is
   FA2's.
4. Mamba-2 SSD scan forward, H100 BF16 (pipesim/costs/mamba.py: four GEMMs per chunk on the curve
   plus the sequential state passing at the memory roof), against vllm-project/vllm PR #27299's
   microbenchmark (2025-10-25, one H100, granite-4.0-h-small's mixer: 128 heads of 64, 1 group,
   state 128, chunk 256), its "Original" column = mamba_ssm's Triton kernels, tokens/s. At burst
   rate (a kernel benchmark). Its 1k and 2k rows take the same 0.29 ms, a fixed cost of the
   serving wrapper rather than of the kernels, and are shown but not in the mean.
5. Norm kernels at the memory roof: pipesim costs a fused RMSNorm at its minimal bytes (4 per element
   forward, 6 backward) at 0.85 of the HBM peak (presets/systems.py memory_efficiency); NVIDIA's
   cudnn-frontend norm runs (benchmark/norms/results/{h200,gb200,gb300}/all_models_2026022*.csv,
   RMSNorm at Llama 3 8B / 70B / 405B shapes, BF16) count the same bytes, so their GB/s compare
   directly: cuDNN's kernel and torch.compile's (Inductor's) generated one.
"""
from __future__ import annotations

import math
import statistics

from pipesim.costs.flash import attention_tflops
from pipesim.costs.gemm import gemm_bytes, gemm_compute_time
from pipesim.presets.attention_tables import FA2_PAPER_FWD_BWD, FA2_PAPER_SEQ
from pipesim.presets.gpus import KERNEL_CURVES, fill_rate, gemm_anchor, sustained_ratio

XLA = "OpenXLA matmul_interpolator_data.h (sm_90)"
# (batch, M, N, K, published bf16 TFLOP/s)
XLA_H100_BF16 = [
    (1, 1024, 2048, 256, 139.5), (2, 256, 2048, 2048, 332.2), (1, 256, 2048, 256, 41.8), (1, 4096, 512, 512, 238.8),
    (4, 4096, 256, 2048, 588.7), (2, 1024, 2048, 1024, 493.4), (1, 256, 2048, 4096, 285.9),
    (4, 1024, 2048, 2048, 712.7), (1, 4096, 1024, 512, 343.7), (1, 2048, 2048, 2048, 632.0),
    (1, 4096, 4096, 256, 392.2), (2, 2048, 4096, 1024, 678.7), (2, 4096, 4096, 2048, 763.0),
    (1, 4096, 4096, 4096, 783.3), (1, 512, 4096, 1024, 373.3), (1, 4096, 2048, 512, 447.0),
    (1, 2048, 1024, 2048, 523.3), (1, 1024, 1024, 2048, 350.0), (1, 256, 4096, 2048, 324.6),
    (2, 4096, 2048, 4096, 783.2), (1, 4096, 512, 1024, 370.8), (1, 1024, 2048, 2048, 524.3),
    (1, 256, 1024, 4096, 172.3), (1, 256, 512, 4096, 91.7), (1, 512, 256, 512, 21.8),
]
H100_HBM, MEMORY_EFFICIENCY, LAUNCH = 3.35e12, 0.85, 5e-6     # dgx-h100 preset values
DEEPGEMM = "DeepGEMM README a6d97a1 (H800)"
TILELANG = "tile-ai/tilelang benchmark/matmul_fp8/README.md (H800)"
# (K, TFLOP/s) at M = N = 8192; the README's latency column is in ms
TILELANG_H800_FP8 = [(256, 376), (512, 622), (1024, 927), (2048, 1174), (4096, 1378), (8192, 1461), (16384, 1523)]
# (M, N, K, DeepGEMM TFLOP/s, speed-up over CUTLASS 3.6)
DEEPGEMM_H800_FP8 = [(4096, 2112, 7168, 1058, 1.1), (4096, 24576, 1536, 990, 1.0), (4096, 32768, 512, 590, 1.0),
                     (4096, 7168, 16384, 1358, 1.2), (4096, 4096, 7168, 1304, 1.1), (4096, 7168, 2048, 1025, 1.1)]

XLA_SM100 = "OpenXLA matmul_interpolator_data.h (sm_100)"
B200_HBM = 8.0e12                                               # dgx-b200 preset value
H200_HBM = 4.8e12                                               # dgx-h200 preset value
# (GPU, dtype, M, N, K, MSMF TFLOP/s): stas00/ml-engineering compute/accelerator/README.md,
# "Maximum Achievable and Sustainable Matmul FLOPS" table (commit 082816f, Aug 2026)
MSMF = [("h200", "bf16", 8192, 8448, 20480, 708.5, H200_HBM), ("h200", "fp8", 8448, 8192, 16384, 1288.7, H200_HBM),
        ("b200", "bf16", 9472, 8192, 20480, 1456.3, B200_HBM), ("b200", "fp8", 9472, 8192, 16384, 2795.7, B200_HBM)]
# (batch, M, N, K, published TFLOP/s), sm_100 = B200. BF16: tensorflow/tensorflow
# third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h, sm_100 "bf16xbf16->bf16", its
# 80 shapes with M, N, K >= 1024. FP8: the later openxla table
# (xla/backends/gpu/cost_model/matmul_interpolator_data.h), "f8e4m3fnxf8e4m3fn->bf16", its
# M = 4096 shapes with N, K >= 1024 at batch 1 and 4. The anchors of pipesim/presets/gpus.py are
# the batch-4 4096^3 rows; every other row tests the shape dependence.
XLA_B200_BF16 = [
(2,1024,2048,1024,678.6),(4,4096,4096,2048,1544.0),(2,4096,2048,2048,1276.5),(1,4096,2048,2048,1141.6),
(1,1024,2048,1024,465.9),(4,2048,1024,1024,868.7),(2,2048,2048,4096,1324.9),(4,2048,4096,4096,1462.7),
(4,4096,1024,4096,1394.5),(1,2048,2048,4096,1185.8),(4,1024,2048,1024,871.3),(4,4096,2048,2048,1329.2),
(1,2048,1024,1024,466.7),(2,4096,4096,2048,1337.9),(4,1024,4096,1024,1048.0),(2,2048,1024,1024,679.6),
(1,4096,4096,2048,1270.1),(2,4096,1024,4096,1339.6),(4,2048,2048,4096,1411.1),(2,2048,4096,4096,1416.7),
(1,1024,4096,1024,685.5),(2,1024,4096,1024,872.8),(1,4096,1024,4096,1186.9),(4,4096,4096,4096,1690.7),
(1,2048,4096,4096,1338.6),(2,4096,2048,4096,1411.8),(4,2048,1024,4096,1341.5),(1,4096,2048,4096,1339.0),
(2,2048,2048,2048,1131.3),(4,4096,1024,1024,1039.2),(1,2048,2048,2048,959.4),(4,1024,1024,2048,931.9),
(2,2048,1024,4096,1172.6),(2,4096,4096,4096,1455.7),(4,4096,2048,4096,1458.4),(1,2048,1024,4096,961.9),
(1,4096,4096,4096,1416.5),(1,4096,1024,1024,682.0),(2,2048,4096,2048,1272.3),(1,1024,1024,2048,428.1),
(4,2048,2048,2048,1276.2),(2,1024,1024,2048,697.1),(1,2048,4096,2048,1142.7),(1,4096,2048,1024,884.3),
(2,4096,1024,1024,877.8),(1,1024,2048,2048,711.9),(4,2048,1024,2048,1127.2),(2,1024,2048,2048,952.6),
(2,4096,2048,1024,1045.8),(4,1024,2048,2048,1143.5),(4,4096,4096,1024,1350.4),(2,2048,1024,2048,948.3),
(4,1024,1024,4096,1185.5),(1,1024,4096,2048,936.7),(2,1024,4096,2048,1140.3),(4,4096,2048,1024,1148.5),
(1,2048,1024,2048,712.9),(4,1024,4096,2048,1278.2),(2,4096,4096,1024,1153.4),(1,1024,1024,4096,616.3),
(1,4096,4096,1024,1043.9),(4,2048,4096,1024,1142.6),(1,1024,2048,4096,961.9),(2,1024,1024,4096,956.8),
(2,1024,2048,4096,1184.9),(4,4096,1024,2048,1268.9),(1,2048,2048,1024,685.5),(4,1024,2048,4096,1343.0),
(2,2048,2048,1024,885.7),(1,1024,4096,4096,1193.6),(2,2048,4096,1024,1037.7),(2,1024,4096,4096,1344.4),
(4,1024,1024,1024,676.0),(1,2048,4096,1024,888.7),(2,1024,1024,1024,466.0),(4,1024,4096,4096,1411.5),
(2,4096,1024,2048,1131.3),(1,4096,1024,2048,940.0),(1,1024,1024,1024,267.3),(4,2048,2048,1024,1038.2),
]
XLA_B200_FP8 = [
    (1, 4096, 1024, 1024, 850.8), (1, 4096, 2048, 1024, 1332.2), (1, 4096, 4096, 1024, 1895.4),
    (1, 4096, 1024, 2048, 1462.6), (1, 4096, 2048, 2048, 1833.5), (1, 4096, 4096, 2048, 2485.0),
    (1, 4096, 1024, 4096, 1951.8), (1, 4096, 2048, 4096, 2499.4), (1, 4096, 4096, 4096, 2765.0),
    (4, 4096, 1024, 1024, 1868.7), (4, 4096, 2048, 1024, 2400.8), (4, 4096, 4096, 1024, 2651.2),
    (4, 4096, 1024, 2048, 2422.3), (4, 4096, 2048, 2048, 2884.9), (4, 4096, 4096, 2048, 3122.5),
    (4, 4096, 1024, 4096, 2662.0), (4, 4096, 2048, 4096, 3133.3), (4, 4096, 4096, 4096, 3279.7),
]
# FP4 on B200 (M, N, K, published TFLOP/s, source): cuBLASLt's column of the dense table of
# deepseek-ai/DeepGEMM PR #348 (MXFP4, cublasTest 13.3, CUDA 12.9), and vLLM PR #20646's CUTLASS
# NVFP4 "nvfp4-noquant" column for the Llama 3.1 8B N=6144 K=4096 projection (M = batch rows).
# The vLLM 16384-row point is the curve's anchor (pipesim/presets/gpus.py).
FP4_B200 = [(128, 2048, 7168, 338, "DeepGEMM#348"), (128, 24576, 1536, 745, "DeepGEMM#348"),
            (512, 2048, 7168, 1422, "DeepGEMM#348"), (512, 7168, 2048, 1190, "DeepGEMM#348"),
            (1024, 7168, 2048, 1399, "DeepGEMM#348"), (4096, 4096, 7168, 3939, "DeepGEMM#348"),
            (8192, 8192, 8192, 5239, "DeepGEMM#348"),
            (1024, 6144, 4096, 2895, "vLLM#20646"), (2048, 6144, 4096, 3411, "vLLM#20646"),
            (4096, 6144, 4096, 3646, "vLLM#20646"), (8192, 6144, 4096, 3779, "vLLM#20646"),
            (16384, 6144, 4096, 3904, "vLLM#20646")]

# vLLM PR #27299, "default" table, Original column: (tokens, tokens/s) for (nh 128, hd 64, ng 1, ds 128)
SSD_VLLM_H100 = [(1024, 3.452741e6), (2048, 7.044192e6), (4096, 1.206409e7), (8192, 1.262327e7),
                 (16384, 1.292440e7), (32768, 1.180002e7), (65536, 1.106830e7), (131072, 1.070444e7),
                 (262144, 1.081547e7)]
SSD_FLOOR_TOKENS = 2048        # rows at or below: the wrapper's fixed cost, not the kernels'

# FA3 paper Fig. 5, FlashAttention-3 bars (H100, head dim 128): fwd non-causal, fwd causal, bwd
SEQ = (512, 1024, 2048, 4096, 8192, 16384)
FA3_KERNEL = {("fwd", False): (467, 565, 625, 638, 646, 648), ("fwd", True): (292, 423, 521, 579, 602, 616),
              ("bwd", False): (316, 424, 501, 542, 559, 561)}
# pytorch/benchmark PR #2391 (2024), `run_benchmark.py triton --op flash_attention`, flash_v3 column
TORCHBENCH_FA3_FWD = (430.3, 517.1, 565.5, 590.2, 614.2, 620.7)
# 5: RMSNorm (forward, backward) GB/s by backend at (N, C) = (16384, 4096), (8192, 8192), (4096, 16384)
NORMS_HBM = {"H200": 4.8e12, "GB200": 8.0e12, "GB300": 8.0e12}
NORMS = {
    ("H200", "cudnn"): ((3708, 3801), (3771, 3526), (3845, 3420)),
    ("H200", "torch.compile"): ((3523, 1704), (4176, 1703), (4007, 2276)),
    ("GB200", "cudnn"): ((6425, 6187), (5997, 5200), (6120, 4787)),
    ("GB200", "torch.compile"): ((4644, 2597), (6040, 2465), (6201, 3177)),
    ("GB300", "cudnn"): ((6460, 6134), (5963, 5467), (6079, 4897)),
    ("GB300", "torch.compile"): ((4696, 2702), (6097, 2516), (6238, 3227)),
}
# 3d: sliding-window attention, NVIDIA/cudnn-frontend gpt_oss runs (head dim 64, causal band): H200,
# cuDNN 9.19, window 1024, 64 / 8 heads (results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv,
# df73764) -- not used by pipesim, a test of its generic rule (the full table at key length w) --
# and GB200, cuDNN 9.22, window 128 (results/gpt_oss/gb200, fb682ce), which pipesim now uses
# because the generic rule misses it. (seq, forward, backward) TFLOP/s counted on the band.
WINDOW_RUNS = {
    ("h200", 1024): ((2048, 310, 264), (4096, 336, 289), (8192, 349, 300), (16384, 355, 303), (32768, 358, 299)),
    ("gb200", 128): ((2048, 153, 176), (4096, 161, 182), (8192, 165, 187), (16384, 167, 188), (32768, 104, 186)),
}
# 3e: NVIDIA/cudnn-frontend benchmark/benchmark_results.csv @ b740542 (2024-05-07): H200 with clocks
# locked at 1980 MHz and 700 W, cuDNN 9.1.0, 16 heads of 128, batch x seq = 16K tokens up to 16K,
# then batch 1; "cudnn" = cuDNN's fused attention, "pytorch" = torch's SDPA flash backend
# (FlashAttention-2). (seq, causal): ((cuDNN fwd, bwd), (FA2 fwd, bwd)) TFLOP/s, rounded. An
# independent check of the Hopper tables pipesim takes from the FA3 paper (not used by pipesim).
HOPPER_MAY2024 = {
    (4096, False): ((654, 517), (354, 287)), (8192, False): ((669, 530), (355, 303)),
    (16384, False): ((642, 538), (357, 309)), (32768, False): ((613, 536), (349, 312)),
    (65536, False): ((602, 535), (353, 322)),
    (4096, True): ((542, 444), (314, 249)), (8192, True): ((573, 464), (325, 277)),
    (16384, True): ((587, 498), (325, 305)), (32768, True): ((577, 500), (345, 317)),
    (65536, True): ((567, 504), (343, 323)),
}
# 3f: the same figures' "Pytorch" bars (flash-attention benchmarks/benchmark_flash_attention.py
# attention_pytorch: baddbmm scores, a causal mask added as its own pass, softmax, einsum), forward
# + backward TFLOP/s at 512 .. 8k (16k out of memory), causal FLOPs counted as half: not a pipesim
# table, a check of its unfused eager core (attention eager, kernel_fusion eager).
PYTORCH_ATTENTION = {
    "a100": {(False, 64): (36, 40, 43, 45, 46), (False, 128): (53, 67, 76, 79, 86),
             (True, 64): (15, 16, 17, 18, 18), (True, 128): (23, 28, 32, 32, 34)},
    "h100": {(False, 64): (62, 72, 81, 86, 87), (False, 128): (93, 120, 145, 160, 167),
             (True, 64): (26, 29, 31, 32, 32), (True, 128): (40, 50, 57, 61, 63)},
}


def gemm_tflops(curve: dict, b: int, m: int, n: int, k: int, dtype: str = "bf16", hbm: float = H100_HBM) -> float:
    shape, anchor = gemm_anchor(curve, dtype)
    hbm = hbm * MEMORY_EFFICIENCY
    t = gemm_compute_time(m, n, k, b, curve["sms"], curve["mamf_tflops"][dtype] * 1e12,
                          fill_rate(curve), shape, curve["persistent"], hbm, anchor)
    t = max(t, gemm_bytes(m, n, k, dtype, b) / hbm, LAUNCH)
    return 2 * b * m * n * k / t / 1e12


def eager_attention_tflops(gpu: str, seq: int, causal: bool, head_dim: int) -> float:
    """pipesim's unfused attention core (scores, softmax, attend; attention eager, kernel_fusion
    eager) forward + backward at the FlashAttention-2 paper's shape (batch x seq = 16k tokens,
    hidden 2048, FP16), at burst rate, counted as the paper counts it."""
    from pipesim.costs.layers import layer_ops
    from pipesim.costs.stage import cost_model_for
    from pipesim.scenario.load import load_scenario
    preset = {"a100": "dgx-a100-80gb", "h100": "dgx-h100"}[gpu]
    s = load_scenario({
        "model": {"name": "attention", "num_layers": 1, "hidden_size": 2048, "num_attention_heads": 2048 // head_dim,
                  "seq_length": seq, "vocab_size": 32000, "dropout": False, "causal": causal},
        "system": {"preset": preset, "num_nodes": 1, "gpus_per_node": 1, "gpu": {"sustained_ratio": 1.0}},
        "parallel": {"tensor": 1, "pipeline": 1, "data": 1},
        "training": {"micro_batch_size": 16384 // seq, "global_batch_size": 16384 // seq, "precision": "fp16",
                     "attention": "eager", "kernel_fusion": "eager"}})
    cm = cost_model_for(s)
    seconds = sum(cm.time(o, phase).seconds for o in layer_ops(s) if o.attention_core for phase in ("fwd", "bwd"))
    return 3.5 * 4 * 16384 * seq * 2048 * (0.5 if causal else 1) / seconds / 1e12


def ssd_tokens_per_s(tokens: int) -> float:
    """pipesim's SSD scan forward on one H100 at burst rate, granite-4.0-h-small's mixer."""
    from pipesim.report.estimate import estimate
    from pipesim.scenario.load import load_scenario
    s = load_scenario({
        "model": {"preset": "nemotronh-8b", "seq_length": tokens, "mamba_num_heads": 128, "mamba_head_dim": 64,
                  "mamba_num_groups": 1, "mamba_state_dim": 128, "mamba_chunk_size": 256},
        "system": {"preset": "dgx-h100", "num_nodes": 1, "gpus_per_node": 1, "gpu": {"sustained_ratio": 1.0}},
        "parallel": {"tensor": 1, "pipeline": 1, "data": 1},
        "training": {"micro_batch_size": 1, "global_batch_size": 1, "precision": "bf16"}})
    row = next(r for r in estimate(s)["rows"] if r["op"].endswith("ssd"))
    return tokens / row["t_fwd_s"]


def main() -> None:
    h100 = KERNEL_CURVES["h100"]
    print(f"1. GEMM on H100, BF16, vs {XLA} (kernel launch {LAUNCH * 1e6:.0f} us as the floor)")
    print(f"   {'b':>2} {'M':>6} {'N':>6} {'K':>6} {'published':>10} {'pipesim':>8} {'err %':>7}")
    logs = []
    for b, m, n, k, pub in XLA_H100_BF16:
        pred = gemm_tflops(h100, b, m, n, k)
        logs.append(math.log(pred / pub))
        print(f"   {b:>2} {m:>6} {n:>6} {k:>6} {pub:>10.1f} {pred:>8.1f} {100 * (pred / pub - 1):>+7.1f}")
    print(f"   mean |log error| {100 * statistics.mean(abs(x) for x in logs):.1f} %, "
          f"mean log error {100 * statistics.mean(logs):+.1f} %")
    big = [x for x, (b, m, n, k, _) in zip(logs, XLA_H100_BF16) if b * m * n * k >= 2048 ** 3]
    print(f"   shapes >= 2048^3 of work: mean log error {100 * statistics.mean(big):+.1f} % ({len(big)} shapes)\n")

    print(f"1b. GEMM on H100, FP8, vs {DEEPGEMM}")
    print(f"   {'M':>6} {'N':>6} {'K':>6} {'DeepGEMM':>9} {'CUTLASS':>8} {'pipesim':>8} {'err %':>7}")
    logs = []
    for m, n, k, pub, speedup in DEEPGEMM_H800_FP8:
        pred = gemm_tflops(h100, 1, m, n, k, "fp8")
        logs.append(math.log(pred / pub))
        print(f"   {m:>6} {n:>6} {k:>6} {pub:>9.0f} {pub / speedup:>8.0f} {pred:>8.0f} {100 * (pred / pub - 1):>+7.1f}")
    print(f"   mean |log error| {100 * statistics.mean(abs(x) for x in logs):.1f} %, "
          f"mean log error {100 * statistics.mean(logs):+.1f} % (vs DeepGEMM)\n")

    print(f"1c. GEMM on H100, FP8, M = N = 8192, vs {TILELANG}")
    print(f"   {'K':>6} {'published':>10} {'pipesim':>8} {'err %':>7}")
    logs = []
    for k, pub in TILELANG_H800_FP8:
        pred = gemm_tflops(h100, 1, 8192, 8192, k, "fp8")
        logs.append(math.log(pred / pub))
        print(f"   {k:>6} {pub:>10.0f} {pred:>8.0f} {100 * (pred / pub - 1):>+7.1f}")
    print(f"   mean |log error| {100 * statistics.mean(abs(x) for x in logs):.1f} %, "
          f"mean log error {100 * statistics.mean(logs):+.1f} %\n")

    b200 = KERNEL_CURVES["b200"]
    for dtype, rows in (("bf16", XLA_B200_BF16), ("fp8", XLA_B200_FP8)):
        print(f"1d. GEMM on B200, {dtype.upper()}, vs {XLA_SM100} ({len(rows)} shapes; the batch-4 "
              f"4096^3 row is the anchor)")
        print(f"   {'b':>2} {'M':>6} {'N':>6} {'K':>6} {'published':>10} {'pipesim':>8} {'err %':>7}")
        logs = []
        for b, m, n, k, pub in rows:
            pred = gemm_tflops(b200, b, m, n, k, dtype, B200_HBM)
            logs.append(math.log(pred / pub))
            print(f"   {b:>2} {m:>6} {n:>6} {k:>6} {pub:>10.1f} {pred:>8.1f} {100 * (pred / pub - 1):>+7.1f}")
        print(f"   mean |log error| {100 * statistics.mean(abs(x) for x in logs):.1f} %, "
              f"mean log error {100 * statistics.mean(logs):+.1f} %\n")

    print("1e. GEMM on B200, FP4 (NVFP4 / MXFP4 share the FP4 tensor cores), vs DeepGEMM PR #348's cuBLASLt "
          "column and vLLM PR #20646's NVFP4 CUTLASS column (the 16384-row point is the anchor)")
    print(f"   {'M':>6} {'N':>6} {'K':>6} {'published':>10} {'pipesim':>8} {'err %':>7}  source")
    logs = []
    for m, n, k, pub, src in FP4_B200:
        pred = gemm_tflops(b200, 1, m, n, k, "fp4", B200_HBM)
        logs.append(math.log(pred / pub))
        print(f"   {m:>6} {n:>6} {k:>6} {pub:>10.0f} {pred:>8.0f} {100 * (pred / pub - 1):>+7.1f}  {src}")
    print(f"   mean |log error| {100 * statistics.mean(abs(x) for x in logs):.1f} %, "
          f"mean log error {100 * statistics.mean(logs):+.1f} %\n")

    print("2. GEMM at each GPU's MAMF best shape (ml-engineering MAMF table): the curve's anchor "
          "(H100/H800 FP8: anchored on DeepGEMM instead, section 1b)")
    print(f"   {'GPU':>6} {'dtype':>5} {'shape':>20} {'MAMF':>8} {'pipesim':>8}")
    for name, c in KERNEL_CURVES.items():
        for dtype, shape in c["best_shape"].items():
            pred = gemm_tflops(c, 1, *shape, dtype=dtype)
            print(f"   {name:>6} {dtype:>5} {'x'.join(map(str, shape)):>20} {c['mamf_tflops'][dtype]:>8.1f} {pred:>8.1f}")
    print("   (gb300 has no MAMF row: GB200's stands in, the same datasheet dense rates; the fp4 rows are "
          "derived, presets/gpus.py)")
    print()

    print("2b. GEMM at the power limit: burst curve x sustained ratio at the MSMF shapes (ml-engineering "
          "MAMF/MSMF table)")
    print(f"   {'GPU':>6} {'dtype':>5} {'shape':>20} {'ratio':>6} {'burst':>8} {'pipesim':>8} {'MSMF':>8} {'err %':>7}")
    for name, dtype, m, n, k, pub, hbm in MSMF:
        c = KERNEL_CURVES[name]
        burst = gemm_tflops(c, 1, m, n, k, dtype, hbm)
        ratio = sustained_ratio(c, dtype)
        pred = burst * ratio
        print(f"   {name:>6} {dtype:>5} {f'{m}x{n}x{k}':>20} {ratio:>6.3f} {burst:>8.1f} {pred:>8.1f} {pub:>8.1f} "
              f"{100 * (pred / pub - 1):>+7.1f}")
    print()

    print("3. Attention on H100, head dim 128 (pipesim's cudnn-2024 table = the FA3 paper's cuDNN bars)")
    print(f"   {'seq':>6} {'phase':>10} {'pipesim':>8} {'FA3 kernel':>11} {'torchbench FA3':>15}")
    for i, seq in enumerate(SEQ):
        for (phase, causal), fa3 in FA3_KERNEL.items():
            pred = attention_tflops(h100, seq, causal, phase, "cudnn-2024")
            tb = f"{TORCHBENCH_FA3_FWD[i]:>15.1f}" if (phase, causal) == ("fwd", False) else f"{'-':>15}"
            label = phase + (" causal" if causal else "")
            print(f"   {seq:>6} {label:>10} {pred:>8.0f} {fa3[i]:>11} {tb}")
    print()

    print("3b. Attention by head dim on H100 (cuDNN of 2024, forward; the FA3 paper's head-dim 64 / 256 panels are the")
    print("    table at those dims: pipesim interpolates between them, log-linear in the head dim)")
    print(f"   {'seq':>6} {'causal':>6} " + " ".join(f"{'d=' + str(d):>7}" for d in (64, 96, 128, 160, 192, 256)))
    for seq in SEQ:
        for causal in (False, True):
            row = " ".join(f"{attention_tflops(h100, seq, causal, 'fwd', 'cudnn-2024', head_dim=d):>7.0f}"
                           for d in (64, 96, 128, 160, 192, 256))
            print(f"   {seq:>6} {str(causal):>6} {row}")
    print()

    print("3c. Attention on Blackwell, causal, head dim 128: NVIDIA's earlier runs (pipesim's dated tables and")
    print("    PyTorch SDPA's cuDNN path) over the default, April 2026's cuDNN 9.22, forward / backward")
    print(f"   {'GPU':>6} {'table':>10} {'dtype':>5} " + " ".join(f"{s:>11}" for s in SEQ))
    for name, kernel, dtype in (("b200", "cudnn-9.13", "bf16"), ("gb300", "cudnn-9.13", "bf16"),
                                ("gb200", "cudnn-9.17", "bf16"), ("gb300", "cudnn-9.17", "bf16"),
                                ("gb200", "cudnn-9.17", "fp8"), ("gb300", "cudnn-9.17", "fp8"),
                                ("b200", "sdpa-cudnn", "bf16")):
        c = KERNEL_CURVES[name]
        cells = (" {:>4.2f}/{:<4.2f} ".format(*(attention_tflops(c, seq, True, p, kernel, dtype=dtype) /
                                                attention_tflops(c, seq, True, p, dtype=dtype)
                                                for p in ("fwd", "bwd")))
                 for seq in SEQ)
        print(f"   {name:>6} {kernel:>10} {dtype:>5} " + " ".join(cells))
    print()

    print("3e. Attention on Hopper, head dim 128, 4K-64K tokens: pipesim's cuDNN and FlashAttention-2 tables vs")
    print("    NVIDIA's May 2024 run on an H200 (cuDNN 9.1.0, PyTorch's flash backend; clocks locked at boost)")
    print(f"   {'seq':>6} {'causal':>6} {'kernel':>10} {'fwd':>6} {'pub':>6} {'err %':>6} {'bwd':>6} {'pub':>6} {'err %':>6}")
    h200 = KERNEL_CURVES["h200"]
    for (seq, causal), runs in HOPPER_MAY2024.items():
        for kernel, (fwd, bwd) in zip(("cudnn-2024", "fa2"), runs):
            pf, pb = (attention_tflops(h200, seq, causal, p, kernel) for p in ("fwd", "bwd"))
            print(f"   {seq:>6} {str(causal):>6} {kernel:>10} {pf:>6.0f} {fwd:>6.0f} {100 * (pf / fwd - 1):>+6.0f} "
                  f"{pb:>6.0f} {bwd:>6.0f} {100 * (pb / bwd - 1):>+6.0f}")
    print()

    print("3f. Attention forward + backward (FLOPs 3.5x the forward), the FlashAttention-2 paper's Fig. 4 / 7:")
    print("    pipesim / published TFLOP/s at seq 512 .. 16k (H100 Triton: no bar, pipesim only)")
    for gpu in ("a100", "h100"):
        for kernel in ("fa2", "fa1", "fa-triton", "xformers"):
            bars = FA2_PAPER_FWD_BWD[gpu].get(kernel)
            if kernel not in KERNEL_CURVES[gpu]["attention_kernels"]:
                continue
            for (causal, hd), rates in sorted((bars or FA2_PAPER_FWD_BWD["a100"][kernel]).items()):
                pred = [3.5 / (1 / attention_tflops(KERNEL_CURVES[gpu], s, causal, "fwd", kernel, hd)
                               + 2.5 / attention_tflops(KERNEL_CURVES[gpu], s, causal, "bwd", kernel, hd))
                        for s in FA2_PAPER_SEQ]
                cells = (f"{p:>4.0f}/{r:<4}" if bars else f"{p:>4.0f}/-   " for p, r in zip(pred, rates))
                print(f"   {gpu:>5} {kernel:>9} {'causal' if causal else 'plain':>6} d={hd:<3} " + " ".join(cells))
    print("    unfused (attention eager, kernel_fusion eager) against the figures' PyTorch bars, 512 .. 8k: pipesim's")
    print("    core folds the causal mask into the scores GEMM (as Megatron's fused softmax does); the reference")
    print("    adds it in a pass of its own")
    for gpu, panels in PYTORCH_ATTENTION.items():
        for (causal, hd), rates in sorted(panels.items()):
            cells = (f"{eager_attention_tflops(gpu, s, causal, hd):>4.0f}/{r:<4}" for s, r in zip(FA2_PAPER_SEQ, rates))
            print(f"   {gpu:>5} {'eager':>9} {'causal' if causal else 'plain':>6} d={hd:<3} " + " ".join(cells))
    print()

    print("3d. Sliding-window attention, head dim 64: NVIDIA's gpt_oss runs vs pipesim's generic rule (the full")
    print("    table at key length w; on Hopper the 2024 table and the default, cuDNN 9.19, the software of the run)")
    print(f"   {'GPU':>6} {'window':>6} {'seq':>6} {'fwd':>5} {'2024':>5} {'9.19':>5} {'bwd':>5} {'2024':>5} {'9.19':>5}")
    for (name, w), rows in WINDOW_RUNS.items():
        c = KERNEL_CURVES[name]
        hopper = name == "h200"
        rule = [attention_tflops(c, w, True, p, "cudnn-2024" if hopper else "auto", 64) for p in ("fwd", "bwd")]
        named = [attention_tflops(c, w, True, p, "auto", 64) if hopper else float("nan") for p in ("fwd", "bwd")]
        for seq, fwd, bwd in rows:
            print(f"   {name:>6} {w:>6} {seq:>6} {fwd:>5} {rule[0]:>5.0f} {named[0]:>5.0f} {bwd:>5} {rule[1]:>5.0f} "
                  f"{named[1]:>5.0f}")
    print("   (GB200's window-128 rows are pipesim's rates now: presets/attention_tables.py GB200_CUDNN_WINDOW)")
    print()

    print("4. Mamba-2 SSD scan forward on H100 (128 heads of 64, state 128, chunk 256), tokens/s, vs vLLM PR "
          "#27299 (mamba_ssm kernels)")
    print(f"   {'tokens':>7} {'published':>10} {'pipesim':>10} {'err %':>7}")
    errs = []
    for tokens, pub in SSD_VLLM_H100:
        pred = ssd_tokens_per_s(tokens)
        err = 100 * (pred / pub - 1)
        if tokens > SSD_FLOOR_TOKENS:
            errs.append(err)
        print(f"   {tokens:>7} {pub / 1e6:>9.2f}M {pred / 1e6:>9.2f}M {err:>+7.1f}"
              + ("  (wrapper's fixed cost)" if tokens <= SSD_FLOOR_TOKENS else ""))
    print(f"   mean |error| {statistics.mean(abs(e) for e in errs):.1f} %, mean {statistics.mean(errs):+.1f} % "
          f"({len(errs)} rows above {SSD_FLOOR_TOKENS} tokens)")

    print()
    print("5. RMSNorm at the memory roof: measured GB/s as a fraction of the HBM peak, against pipesim's "
          f"{MEMORY_EFFICIENCY:.2f}")
    print(f"   {'GPU':>6} {'kernel':>14} {'N x C':>12} {'fwd':>6} {'bwd':>6}")
    for (gpu, kernel), rows in NORMS.items():
        for shape, (fwd, bwd) in zip(("16384x4096", "8192x8192", "4096x16384"), rows):
            hbm = NORMS_HBM[gpu] / 1e9
            print(f"   {gpu:>6} {kernel:>14} {shape:>12} {fwd / hbm:>6.2f} {bwd / hbm:>6.2f}")

if __name__ == "__main__":
    main()
