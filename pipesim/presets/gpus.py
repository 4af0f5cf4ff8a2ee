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
  attention       FlashAttention/cuDNN fused attention TFLOP/s by sequence length (head dim 128; the
                  head-dim 64 / 256 panels under "head_dim"):
                  {"fwd": ..., "fwd_causal": ..., "bwd": ...}, each ((seq, TFLOP/s), ...), plus
                  "bwd_causal" where the causal backward was measured and "head_dim_from" (the
                  table whose head-dim panels a table measured at head dim 128 only borrows)
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

import math

# Maximum Achievable Matmul FLOPS (mamf-finder.py, mean of 100 iterations after 50 warm-up, best
# shape of a brute-force search): S. Bekman, "Machine Learning Engineering",
# compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table" (BF16 and FP8
# e4m3 tables; stas00/ml-engineering, 2025). TF32 runs the tensor cores at half the BF16 rate
# (A100/H100/B200 datasheets: TF32 dense = BF16 dense / 2), so its MAMF is taken as BF16 / 2.
# FP32 (CUDA-core SGEMM) has no MAMF row: the generic 0.80 x the datasheet FP32 peak (A100 19.5,
# H100 67, B200/GB200 80, B300 75 TFLOP/s).

# FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608), Fig. 5 (H100 80GB SXM5, head dim
# 128, batch x seq = 16k tokens, hidden 2048): cuDNN fused attention, which Transformer Engine
# uses on Hopper (Megatron-Core / NeMo). Forward non-causal, forward causal (causal FLOPs counted
# as half), backward non-causal; TFLOP/s at seq 512, 1k, 2k, 4k, 8k, 16k.
_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
_H100_CUDNN = {
    "fwd": tuple(zip(_SEQ, (497, 574, 617, 609, 600, 595))),
    "fwd_causal": tuple(zip(_SEQ, (315, 410, 484, 518, 529, 539))),
    "bwd": tuple(zip(_SEQ, (305, 408, 465, 499, 518, 516))),
}
# FlashAttention-2 on the same H100 (same figure): the kernel A100-era stacks run.
_H100_FA2 = {
    "fwd": tuple(zip(_SEQ, (309, 350, 362, 368, 370, 370))),
    "fwd_causal": tuple(zip(_SEQ, (191, 260, 298, 319, 333, 335))),
    "bwd": tuple(zip(_SEQ, (214, 260, 291, 310, 318, 322))),
}

# The FlashAttention-3 kernel itself on the same H100 (same figure, FA3 bars): what a stack that
# calls FA3 directly runs (`training.attention_kernel: fa3`).
_H100_FA3 = {
    "fwd": tuple(zip(_SEQ, (467, 565, 625, 638, 646, 648))),
    "fwd_causal": tuple(zip(_SEQ, (292, 423, 521, 579, 602, 616))),
    "bwd": tuple(zip(_SEQ, (316, 424, 501, 542, 559, 561))),
}

# The same figure's head-dim-64 and head-dim-256 panels (forward, non-causal and causal; TFLOP/s
# at seq 512 .. 16k as labelled on the bars; H100 80GB SXM5, BF16) and the paper's backward panel at
# head dim 64 (Fig. 6, non-causal; no backward panel at 256: pipesim/costs/flash.py takes the
# forward's factor there).
_H100_CUDNN["head_dim"] = {
    64: {"fwd": tuple(zip(_SEQ, (335, 373, 395, 408, 412, 413))),
         "fwd_causal": tuple(zip(_SEQ, (225, 288, 334, 363, 379, 388))),
         "bwd": tuple(zip(_SEQ, (266, 348, 395, 417, 432, 433)))},
    256: {"fwd": tuple(zip(_SEQ, (470, 546, 580, 581, 580, 581))),
          "fwd_causal": tuple(zip(_SEQ, (308, 391, 450, 483, 497, 509)))},
}
_H100_FA2["head_dim"] = {
    64: {"fwd": tuple(zip(_SEQ, (282, 306, 318, 321, 322, 324))),
         "fwd_causal": tuple(zip(_SEQ, (180, 229, 262, 284, 295, 299))),
         "bwd": tuple(zip(_SEQ, (198, 238, 264, 279, 287, 291)))},
    256: {"fwd": tuple(zip(_SEQ, (275, 313, 321, 323, 324, 326))),
          "fwd_causal": tuple(zip(_SEQ, (208, 251, 278, 293, 297, 298)))},
}
_H100_FA3["head_dim"] = {
    64: {"fwd": tuple(zip(_SEQ, (333, 392, 460, 476, 496, 497))),
         "fwd_causal": tuple(zip(_SEQ, (197, 265, 371, 420, 460, 473))),
         "bwd": tuple(zip(_SEQ, (272, 363, 422, 453, 472, 474)))},
    256: {"fwd": tuple(zip(_SEQ, (482, 639, 707, 736, 746, 756))),
          "fwd_causal": tuple(zip(_SEQ, (286, 427, 537, 612, 628, 642)))},
}


def interp_by_seq(table, seq: float) -> float:
    """A kernel table's rate at `seq`: log-linear in the sequence length between its points, held
    at its ends."""
    pts = sorted(table)
    if seq <= pts[0][0]:
        return float(pts[0][1])
    if seq >= pts[-1][0]:
        return float(pts[-1][1])
    for (s0, v0), (s1, v1) in zip(pts, pts[1:]):
        if s0 <= seq <= s1:
            return v0 + (math.log(seq / s0) / math.log(s1 / s0)) * (v1 - v0)
    raise AssertionError("unreachable")


def _with_non_causal(table: dict, ref: dict) -> dict:
    """Non-causal rows where only causal ones were measured (every length, or those below the
    first measured non-causal one): the causal rate times `ref`'s non-causal / causal forward
    ratio at that length (for the backward too, as flash.py derives the other way)."""
    def ratio(s):
        return interp_by_seq(ref["fwd"], s) / interp_by_seq(ref["fwd_causal"], s)
    out = dict(table)
    for plain, causal in (("fwd", "fwd_causal"), ("bwd", "bwd_causal")):
        measured = table.get(plain, ())
        first = min((s for s, _ in measured), default=math.inf)
        out[plain] = tuple(sorted(((s, v * ratio(s)) for s, v in table[causal] if s < first))) + tuple(measured)
    return out


# Fused attention on Blackwell, measured by NVIDIA with the cuDNN graph API that Transformer Engine
# calls (cudnn_fe backend): NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/
# llama3.1/{gb200,gb300}/llama3.1_20260424_*.csv (cuDNN 9.22.0, frontend 1.21.1, April 2026; BF16,
# Llama 3.1 70B heads: 64 query / 8 KV, head dim 128, batch 2, non-deterministic backward, free
# clocks). TFLOP/s by the FlashAttention convention (causal counted as half, backward 2.5x the
# forward), so the tables read like the H100 ones above; the backward is measured causal too.
# That run starts at 2K; the causal 512 and 1K points are the same repository's December 2025
# cudnn_fe run (commit b372d39, batch 1 x 128 query heads, the same work per kernel; within 3 % of
# the April forward at 2K-16K), and the non-causal ones there take the H100 cuDNN table's
# non-causal / causal ratio (_with_non_causal).
_SEQ_BW = (2048, 4096, 8192, 16384, 32768)


def _seq_panel(fwd, fwd_causal, bwd, bwd_causal, **extra) -> dict:
    """A kernel table measured at _SEQ_BW: TFLOP/s per phase, in that order of lengths."""
    return {k: tuple(zip(_SEQ_BW, v)) for k, v in
            (("fwd", fwd), ("fwd_causal", fwd_causal), ("bwd", bwd), ("bwd_causal", bwd_causal))} | extra

_GB200_CUDNN = _with_non_causal({
    "fwd": tuple(zip(_SEQ_BW, (1433, 1599, 1771, 1697, 1634))),
    "fwd_causal": ((512, 408), (1024, 733)) + tuple(zip(_SEQ_BW, (1097, 1408, 1574, 1708, 1622))),
    "bwd": tuple(zip(_SEQ_BW, (1124, 1350, 1404, 1374, 1262))),
    "bwd_causal": ((512, 329), (1024, 527)) + tuple(zip(_SEQ_BW, (885, 1148, 1332, 1328, 1226))),
    "head_dim_from": _H100_CUDNN,
}, _H100_CUDNN)
# Head-dim panels of the same April 2026 runs (results/qwen35, results/dsv3): Qwen3.5's attention
# (32 query / 2 KV heads of 256, batch 1, causal forward only) and, for MLA attention only
# (flash.py head_dim_factor), DeepSeek-V3's (128 heads, q/k 192, v 128, batch 2). On Blackwell a
# larger head dim is faster per FLOP (the exponentials per score are fixed: FlashAttention-4, arXiv
# 2603.05451, Sec. 1), where Hopper's panels (FA3 paper) run the other way; head dims below 128
# take Hopper's panel.
_GB200_CUDNN["head_dim"] = {256: {"fwd_causal": tuple(zip(_SEQ_BW, (1126, 1441, 1708, 1804, 1734)))}}
_GB200_CUDNN["mla"] = _seq_panel((1492, 1666, 1759, 1812, 1584), (1072, 1406, 1585, 1678, 1743),
                                 (1048, 1175, 1125, 1088, 1086), (846, 1057, 1193, 1134, 1076))
# GB300 (Blackwell Ultra: twice the exponential (SFU) rate of Blackwell, which the softmax needs):
# 1.06-1.25x GB200's rates in the same run.
_GB300_CUDNN = _with_non_causal({
    "fwd": tuple(zip(_SEQ_BW, (1805, 1900, 2017, 2014, 1836))),
    "fwd_causal": ((512, 461), (1024, 839)) + tuple(zip(_SEQ_BW, (1373, 1703, 1856, 1915, 1953))),
    "bwd": tuple(zip(_SEQ_BW, (1213, 1429, 1531, 1536, 1427))),
    "bwd_causal": ((512, 330), (1024, 522)) + tuple(zip(_SEQ_BW, (967, 1248, 1435, 1507, 1490))),
    "head_dim_from": _H100_CUDNN,
}, _H100_CUDNN)
_GB300_CUDNN["head_dim"] = {256: {"fwd_causal": tuple(zip(_SEQ_BW, (1307, 1743, 1965, 2063, 2096)))}}
_GB300_CUDNN["mla"] = _seq_panel((1770, 1937, 2021, 2032, 1917), (1285, 1590, 1825, 1967, 1991),
                                 (1117, 1267, 1301, 1254, 1246), (914, 1143, 1291, 1302, 1289))

# FP8 fused attention (`training.fp8_attention`: Transformer Engine's FP8 DotProductAttention,
# Megatron-Core --fp8-dot-product-attention): Q, K, V and, in the backward, dO in FP8, measured in
# the same runs as the BF16 tables -- GB200 / GB300 with per-tensor ("fp8") and MXFP8 ("mxfp8")
# scaling (cuDNN 9.22; the per-tensor tables' causal 512 / 1K points from the December 2025 run,
# cudnn_fe_fp8), H200 per-tensor (cuDNN 9.19: its causal backward runs slower than BF16's from 8K
# on, as measured). The MXFP8 and Hopper tables start at 2K (held below it). Head dims: the BF16
# table's panels of the same GPU.
_GB200_CUDNN_FP8 = _with_non_causal({
    "fwd": tuple(zip(_SEQ_BW, (1881, 2093, 2241, 2263, 2223))),
    "fwd_causal": ((512, 466), (1024, 870)) + tuple(zip(_SEQ_BW, (1420, 1805, 2047, 2154, 2197))),
    "bwd": tuple(zip(_SEQ_BW, (1214, 1577, 1772, 1836, 1825))),
    "bwd_causal": ((512, 300), (1024, 551)) + tuple(zip(_SEQ_BW, (831, 1178, 1454, 1632, 1687))),
    "head_dim_from": _GB200_CUDNN,
}, _H100_CUDNN)
_GB200_CUDNN_MXFP8 = _seq_panel((1754, 1944, 2080, 2103, 2070), (1330, 1685, 1902, 1999, 2046),
                                (1069, 1344, 1495, 1554, 1480), (745, 1054, 1287, 1436, 1425),
                                head_dim_from=_GB200_CUDNN)
_GB300_CUDNN_FP8 = _with_non_causal({
    "fwd": tuple(zip(_SEQ_BW, (2728, 2988, 3160, 3182, 3050))),
    "fwd_causal": ((512, 564), (1024, 1090)) + tuple(zip(_SEQ_BW, (1954, 2532, 2897, 3054, 3108))),
    "bwd": tuple(zip(_SEQ_BW, (1390, 1839, 2111, 2177, 2178))),
    "bwd_causal": ((512, 310), (1024, 580)) + tuple(zip(_SEQ_BW, (944, 1396, 1781, 2035, 2128))),
    "head_dim_from": _GB300_CUDNN,
}, _H100_CUDNN)
_GB300_CUDNN_MXFP8 = _seq_panel((2443, 2693, 2870, 2889, 2814), (1751, 2272, 2570, 2727, 2785),
                                (1164, 1469, 1636, 1689, 1654), (811, 1143, 1404, 1563, 1590),
                                head_dim_from=_GB300_CUDNN)
_H100_CUDNN_FP8 = _seq_panel((870, 973, 1023, 1055, 1062), (698, 854, 964, 1010, 1042),
                             (531, 602, 636, 659, 674), (393, 471, 430, 374, 370), head_dim_from=_H100_CUDNN)

# Sliding-window attention (`attention_window`: the band op of a model with window layers, flash.py
# window_tflops): NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/gpt_oss/{gb200,
# gb300}/gpt_oss_2026042*.csv (commit fb682ce, cuDNN 9.22, April 2026): gpt-oss's attention shape,
# a causal band of 128 keys ("top_left" with sliding_window_size 128), head dim 64, batch 2 x 128
# heads, non-deterministic backward; TFLOP/s counted on the band, 4·b·h·(s·w - w²/2)·d forward and
# 2.5x that backward (the same count as pipesim's band op; checked against the runs' times). BF16
# runs at 150-200 TFLOP/s, far below the full-attention tables (a 128-key band is too short to keep
# the tensor cores fed). In FP8 and MXFP8 the backward does not skip the blocks outside the band: its
# time grows as s² (1.73 ms at 4K, 6.18 ms at 8K, 90 ms at 32K on GB200, against BF16's 0.47, 0.91
# and 3.69), so its band-counted rate falls as 1 / s. Other windows and head dims keep the full
# table's rate at the window length.
def _window_table(source: str, **rates) -> dict:
    return {"window": 128, "head_dim": 64, "source": source,
            **{kind: {"fwd": tuple(zip(_SEQ_BW, fwd)), "bwd": tuple(zip(_SEQ_BW, bwd))}
               for kind, (fwd, bwd) in rates.items()}}


_GB200_CUDNN_WINDOW = _window_table(
    "cuDNN 9.22, NVIDIA cudnn-frontend gpt_oss benchmark (GB200, 2026-04)",
    bf16=((153, 161, 165, 167, 104), (176, 182, 187, 188, 186)),
    fp8=((165, 173, 177, 179, 179), (78, 49, 28, 15, 8)),
    mxfp8=((153, 161, 164, 166, 168), (65, 41, 23, 12, 6)))
_GB300_CUDNN_WINDOW = _window_table(
    "cuDNN 9.22, NVIDIA cudnn-frontend gpt_oss benchmark (GB300, 2026-04)",
    bf16=((160, 167, 172, 173, 108), (184, 191, 198, 200, 199)),
    fp8=((193, 203, 208, 211, 212), (89, 57, 33, 18, 9)),
    mxfp8=((182, 194, 200, 203, 204), (72, 45, 26, 14, 7)))

# cuDNN of 2026 on Hopper (`training.attention_kernel: cudnn-9.19`): NVIDIA/cudnn-frontend
# benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv
# (cuDNN 9.19.1, H200 -- the H100 die and clocks at the same 700 W --, BF16, 64 query / 8 KV heads,
# head dim 128, batch 1). 8-22 % faster than the 2024 cuDNN of the FlashAttention-3 paper's Fig. 5
# (the default `cudnn` table, the software of the Hopper runs pipesim validates against), most in
# the causal forward.
_H100_CUDNN_2026 = _seq_panel((633, 671, 691, 702, 693), (484, 591, 644, 673, 688),
                              (504, 560, 594, 612, 572), (370, 474, 541, 579, 581), head_dim_from=_H100_CUDNN)
# MLA on Hopper, the same run (results/h200_919_only_cudnn/dsv3_20260227_034744.csv: DeepSeek-V3's
# 128 heads, q/k 192, v 128; causal, 2K-8K; the longer rows failed): forward at the head-dim-128
# rate, backward 0.82-0.95 of it. The 2024 default table borrows this panel, as a factor against
# this run's head-dim-128 rates.
_H100_CUDNN_2026["mla"] = {"fwd_causal": ((2048, 522), (4096, 599), (8192, 643)),
                           "bwd_causal": ((2048, 352), (4096, 404), (8192, 442))}
_H100_CUDNN["head_dim_from"] = _H100_CUDNN_2026
# MLA in FP8 (the same April 2026 runs, results/dsv3/{gb200,gb300}: DeepSeek-V3's 128 heads, q/k
# 192, v 128, batch 2, non-deterministic backward): FP8 gains more on MLA than at head dim 128 (GB200
# causal backward at 4K: per-tensor 1.60x, MXFP8 1.29x BF16's, against 1.03x and 0.92x for Llama's
# heads), so an MLA op takes the FP8 / BF16 ratio of these panels (flash.attention_tflops).
_GB200_CUDNN_FP8["mla"] = _seq_panel((2175, 2518, 2582, 2590, 2340), (1659, 2095, 2397, 2486, 2447),
                                     (1807, 2071, 2122, 1989, 1932), (1312, 1692, 1959, 1968, 1857))
_GB200_CUDNN_MXFP8["mla"] = _seq_panel((2018, 2316, 2408, 2492, 2162), (1535, 1925, 2219, 2355, 2329),
                                       (1504, 1675, 1680, 1638, 1561), (1047, 1364, 1494, 1552, 1532))
_GB300_CUDNN_FP8["mla"] = _seq_panel((3058, 3304, 3400, 3438, 3362), (2290, 2788, 3128, 3305, 3364),
                                     (2099, 2406, 2509, 2579, 2466), (1511, 1982, 2310, 2459, 2406))
_GB300_CUDNN_MXFP8["mla"] = _seq_panel((2758, 3015, 3108, 3117, 3063), (2069, 2517, 2829, 2998, 2959),
                                       (1665, 1921, 2027, 2007, 1948), (1158, 1522, 1780, 1844, 1863))
for _fp8, _ref in ((_GB200_CUDNN_FP8, _GB200_CUDNN), (_GB200_CUDNN_MXFP8, _GB200_CUDNN),
                   (_GB300_CUDNN_FP8, _GB300_CUDNN), (_GB300_CUDNN_MXFP8, _GB300_CUDNN),
                   (_H100_CUDNN_FP8, _H100_CUDNN_2026)):
    _fp8["bf16_ref"] = _ref        # the BF16 rates of the same run: FP8 is applied as its speed-up

_SEQ_B200 = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
# cuDNN through PyTorch SDPA's own cuDNN backend (`training.attention_kernel: sdpa-cudnn`, what a
# PyTorch-native stack calls with SDPBackend.CUDNN_ATTENTION): NVIDIA/cudnn-frontend commit bb37575
# (Oct 2025), artifacts/sdpa_bf16_benchmark_results_NVIDIA_{B200,GB300}.csv, backend pyt_cudnn
# (NGC PyTorch 25.09, torch 2.9, cuDNN 9.13.1), BF16, causal, 128 query / 8 KV heads, head dim 128,
# batch 1: 20-30 % below the graph API Transformer Engine calls at 4K-16K, more at shorter
# lengths. Non-causal rows as for FA2 above, from the H100 cuDNN table's ratio. GB200 takes B200's
# at the MAMF ratio, B300 GB300's; Hopper has no measurement of this path (the cudnn table).
_B200_SDPA_CUDNN = _with_non_causal({
    "fwd_causal": tuple(zip(_SEQ_B200, (84.0, 254.5, 478.9, 855.7, 1171.3, 1332.4, 1419.0, 1382.3, 1355.4))),
    "bwd_causal": tuple(zip(_SEQ_B200, (134.2, 308.5, 371.5, 701.3, 942.5, 1074.8, 1108.7, 1073.1, 1047.8))),
    "head_dim_from": _GB200_CUDNN,
}, _H100_CUDNN)
_GB300_SDPA_CUDNN = _with_non_causal({
    "fwd_causal": tuple(zip(_SEQ_B200, (54.9, 224.2, 593.5, 1144.9, 1495.7, 1702.5, 1795.9, 1770.5, 1720.9))),
    "bwd_causal": tuple(zip(_SEQ_B200, (95.3, 277.2, 487.3, 892.6, 1130.1, 1267.8, 1319.2, 1301.7, 1280.0))),
    "head_dim_from": _GB300_CUDNN,
}, _H100_CUDNN)

# FlashAttention-2 on Blackwell -- PyTorch SDPA's flash backend, which has no Blackwell tensor-core
# (tcgen05) path and so runs at a quarter of cuDNN's rate there: NVIDIA/cudnn-frontend commit
# bb37575 (Oct 2025), benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_
# NVIDIA_B200.csv, backend pyt_flash_attention (NGC PyTorch 25.09, torch 2.9), B200, BF16, causal,
# 128 query / 8 KV heads, head dim 128, batch 1. Only causal rows were measured: the non-causal
# rows take the H100 FA2 table's non-causal / causal ratio at each length (the same kernel code).
_B200_FA2 = _with_non_causal({
    "fwd_causal": tuple(zip(_SEQ_B200, (74.6, 165.5, 242.4, 324.9, 373.4, 394.5, 403.7, 408.7, 411.0))),
    "bwd_causal": tuple(zip(_SEQ_B200, (83.0, 107.7, 186.3, 256.4, 298.9, 320.0, 330.8, 335.4, 336.0))),
    "head_dim_from": _H100_FA2,
}, _H100_FA2)

# Older fused kernels, from the FlashAttention-2 paper (Dao 2023, arXiv:2307.08691), Fig. 4 (A100
# 80GB SXM4) and Fig. 7 (H100 80GB SXM5), as the flash-attention repository ships them
# (assets/flash2_a100_fwd_bwd_benchmark.png, flash2_h100_fwd_bwd_benchmark.png): forward + backward
# TFLOP/s at seq 512 .. 16k (batch x seq = 16k tokens, hidden 2048), per panel (causal, head dim), as
# labelled on the bars (two FlashAttention-2 labels of the A100 figure sit under the legend: 153 at
# 1k, head dim 64, and 151 at 512, head dim 128, read from the bars' height). "fa1" is
# FlashAttention (v1), "fa-triton" a Triton FlashAttention (the figure's "FlashAttention Triton"; the
# kernel MPT / llm-foundry run as attn_impl triton is Tri Dao's flash_attn_triton.py, whose header
# puts its forward + backward slightly below v1's; the repository's benchmark script of the same
# month times OpenAI's triton.ops.flash_attention under that label), "xformers" xformers' CUTLASS
# memory-efficient attention. The H100 figure has v1 and FA2 only.
FA2_PAPER_SEQ = _SEQ
FA2_PAPER_FWD_BWD = {
    "a100": {
        "fa2": {(False, 64): (132, 153, 162, 171, 175, 176), (False, 128): (151, 173, 187, 196, 201, 203),
                (True, 64): (88, 119, 140, 156, 165, 171), (True, 128): (99, 133, 155, 173, 182, 189)},
        "fa1": {(False, 64): (91, 92, 104, 108, 110, 110), (False, 128): (76, 72, 76, 80, 82, 83),
                (True, 64): (58, 70, 77, 87, 92, 97), (True, 128): (55, 62, 69, 76, 80, 83)},
        "fa-triton": {(False, 64): (90, 102, 98, 98, 100, 100), (False, 128): (78, 85, 90, 93, 95, 95),
                      (True, 64): (59, 75, 79, 76, 79, 80), (True, 128): (50, 61, 68, 74, 78, 80)},
        "xformers": {(False, 64): (68, 73, 76, 77, 75, 75), (False, 128): (83, 91, 95, 96, 97, 98),
                     (True, 64): (51, 60, 66, 68, 69, 67), (True, 128): (58, 72, 82, 87, 91, 92)},
    },
    "h100": {
        "fa2": {(False, 64): (215, 254, 274, 288, 294, 296), (False, 128): (248, 294, 320, 326, 335, 338),
                (True, 64): (141, 192, 232, 257, 273, 284), (True, 128): (163, 221, 265, 294, 308, 328)},
        "fa1": {(False, 64): (157, 159, 161, 161, 166, 168), (False, 128): (127, 127, 128, 131, 137, 139),
                (True, 64): (104, 123, 136, 138, 149, 156), (True, 128): (98, 109, 108, 126, 135, 137)},
    },
}


def _relative_to_fa2(gpu: str, kernel: str) -> dict:
    """A kernel on a GPU whose FlashAttention-2 is the FA3 paper's H100 table (_H100_FA2): that
    table times the kernel's forward + backward rate over FA2's in the same panel of the same
    figure, forward and backward alike (the figure gives only their sum), by sequence length at
    head dims 64 and 128 (flash.relative_rate; none above: FlashAttention v1 and its Triton port
    stop at 128)."""
    panels, fa2 = FA2_PAPER_FWD_BWD[gpu][kernel], FA2_PAPER_FWD_BWD[gpu]["fa2"]
    return {"relative_to": _H100_FA2,
            "ratio": {panel: tuple((s, k / f) for s, k, f in zip(_SEQ, rates, fa2[panel]))
                      for panel, rates in panels.items()}}


def _measured_on(gpu: str, kernel: str) -> dict:
    """A kernel at its own forward + backward bars on `gpu` (the A100, which has no other
    attention table): the _H100_FA2 table's forward / backward split and head-dim panels, times at
    each bar the bar over that table's own forward + backward rate there (flash.relative_rate)."""
    return {"relative_to": _H100_FA2,
            "fwd_bwd": {panel: tuple(zip(_SEQ, rates)) for panel, rates in FA2_PAPER_FWD_BWD[gpu][kernel].items()}}


# The A100's attention, FA2 included, is its own figure's. The Triton kernel has no H100 bar: on
# H100 it takes its A100 rate over FlashAttention-2's (both are Ampere-style mma.sync kernels there:
# FlashAttention v1's own H100 / A100 ratio to FA2 agrees, 0.42-0.60 against 0.44-0.56 causal at
# head dim 128).
_A100_FA2, _FA1_ON_A100 = _measured_on("a100", "fa2"), _measured_on("a100", "fa1")
_FA_TRITON_ON_A100, _XFORMERS_ON_A100 = _measured_on("a100", "fa-triton"), _measured_on("a100", "xformers")
_FA1_ON_H100, _FA_TRITON_ON_H100 = _relative_to_fa2("h100", "fa1"), _relative_to_fa2("a100", "fa-triton")

# What each attention table is, as the report names it beside a prediction ("source").
for _table, _label in ((_H100_CUDNN, "cuDNN, FlashAttention-3 paper Fig. 5 (H100, 2024)"),
                       (_H100_FA2, "FlashAttention-2, FlashAttention-3 paper Fig. 5 (H100)"),
                       (_H100_FA3, "FlashAttention-3, FlashAttention-3 paper Fig. 5 (H100)"),
                       (_A100_FA2, "FlashAttention-2, FlashAttention-2 paper Fig. 4 (A100)"),
                       (_FA1_ON_A100, "FlashAttention v1, FlashAttention-2 paper Fig. 4 (A100)"),
                       (_FA_TRITON_ON_A100, "FlashAttention Triton, FlashAttention-2 paper Fig. 4 (A100)"),
                       (_XFORMERS_ON_A100, "xformers, FlashAttention-2 paper Fig. 4 (A100)"),
                       (_FA1_ON_H100, "FlashAttention v1, FlashAttention-2 paper Fig. 7 (H100), as its ratio to FA2"),
                       (_FA_TRITON_ON_H100, "FlashAttention Triton at its A100 ratio to FA2, FlashAttention-2 "
                                            "paper Fig. 4"),
                       (_H100_CUDNN_2026, "cuDNN 9.19, NVIDIA cudnn-frontend benchmark (H200, 2026-02)"),
                       (_H100_CUDNN_FP8, "cuDNN 9.19 FP8, NVIDIA cudnn-frontend benchmark (H200, 2026-02)"),
                       (_GB200_CUDNN, "cuDNN 9.22, NVIDIA cudnn-frontend benchmark (GB200, 2026-04)"),
                       (_GB300_CUDNN, "cuDNN 9.22, NVIDIA cudnn-frontend benchmark (GB300, 2026-04)"),
                       (_GB200_CUDNN_FP8, "cuDNN 9.22 FP8, NVIDIA cudnn-frontend benchmark (GB200, 2026-04)"),
                       (_GB300_CUDNN_FP8, "cuDNN 9.22 FP8, NVIDIA cudnn-frontend benchmark (GB300, 2026-04)"),
                       (_GB200_CUDNN_MXFP8, "cuDNN 9.22 MXFP8, NVIDIA cudnn-frontend benchmark (GB200, 2026-04)"),
                       (_GB300_CUDNN_MXFP8, "cuDNN 9.22 MXFP8, NVIDIA cudnn-frontend benchmark (GB300, 2026-04)"),
                       (_B200_FA2, "FlashAttention-2 via PyTorch SDPA, NVIDIA cudnn-frontend benchmark (B200, 2025-10)"),
                       (_B200_SDPA_CUDNN, "cuDNN 9.13 via PyTorch SDPA, NVIDIA cudnn-frontend benchmark (B200, 2025-10)"),
                       (_GB300_SDPA_CUDNN, "cuDNN 9.13 via PyTorch SDPA, NVIDIA cudnn-frontend benchmark (GB300, "
                                           "2025-10)")):
    _table["source"] = _label

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

KERNEL_CURVES: dict[str, dict] = {
    # V100: 80 SMs (Volta whitepaper Table 1). The MAMF table has no V100 row: the generic
    # MAMF/peak of 0.80 (below) times the 125 TFLOP/s FP16 tensor peak. No BF16/TF32/FP8 tensor
    # cores: those run at the FP32 rate. No published V100 FA2 table: the H100 FA2 curve scaled
    # by the MAMF ratio 100 / 794.5.
    "v100": dict(persistent=False, sms=80, best_shape=dict(bf16=(4096, 4096, 4096)), mamf_tflops=dict(fp16=100.0, bf16=12.5, tf32=12.5, fp32=12.6, fp8=100.0),
                 attention=_H100_FA2, attention_scale=100.0 / 794.5),
    # A100 SXM: 108 SMs (A100 whitepaper Table 1); MAMF BF16 271.2 (table above; FP16 runs on
    # the same tensor cores at the same rate). No FP8 tensor cores: FP8 runs as BF16.
    # Attention: the FlashAttention-2 paper's A100 figure (Fig. 4, forward + backward, causal or
    # not, head dim 64 / 128, 512-16K) for FA2, v1, a Triton FlashAttention and xformers, on the H100
    # FA2 table's forward / backward split (_measured_on). Until session 39: the H100 FA2 table x
    # 230 / 370 (FA2's A100 forward plateau, Sec. 4.1), -9 .. +6 % off these bars.
    "a100": dict(persistent=False, sms=108, best_shape=dict(bf16=(1024, 10240, 5120)), mamf_tflops=dict(fp16=271.2, bf16=271.2, tf32=135.6, fp32=19.5 * 0.8, fp8=271.2),
                 attention=_A100_FA2, attention_scale=1.0, sustained=_A100_SUSTAINED,
                 older_attention={"fa1": (_FA1_ON_A100, 1.0), "fa-triton": (_FA_TRITON_ON_A100, 1.0),
                                  "xformers": (_XFORMERS_ON_A100, 1.0)}),
    # H100 SXM5: 132 SMs (Hopper whitepaper Table 2). MAMF BF16 794.5, FP8 1402.6.
    "h100": dict(persistent=True, sms=132, best_shape=dict(bf16=(2048, 2048, 13312), fp8=(1024, 9216, 14336)), mamf_tflops=dict(fp16=794.5, bf16=794.5, tf32=397.3, fp32=67 * 0.8, fp8=1402.6),
                 anchor=_HOPPER_FP8_ANCHOR, attention=_H100_CUDNN, attention_scale=1.0, sustained=_HOPPER_SUSTAINED,
                 attention_fp8=dict(fp8=_H100_CUDNN_FP8)),
    # H800: the H100 SXM die (132 SMs, same tensor cores) with NVLink cut to 400 GB/s; same curves.
    "h800": dict(persistent=True, sms=132, best_shape=dict(bf16=(2048, 2048, 13312), fp8=(1024, 9216, 14336)), mamf_tflops=dict(fp16=794.5, bf16=794.5, tf32=397.3, fp32=67 * 0.8, fp8=1402.6),
                 anchor=_HOPPER_FP8_ANCHOR, attention=_H100_CUDNN, attention_scale=1.0, sustained=_HOPPER_SUSTAINED,
                 attention_fp8=dict(fp8=_H100_CUDNN_FP8)),
    # H200 SXM: the H100 die with HBM3e; MAMF table: BF16 "H200 is the same" as H100, FP8 1453.4.
    "h200": dict(persistent=True, sms=132, best_shape=dict(bf16=(2048, 2048, 13312), fp8=(1280, 4096, 12032)), mamf_tflops=dict(fp16=794.5, bf16=794.5, tf32=397.3, fp32=67 * 0.8, fp8=1453.4),
                 attention=_H100_CUDNN, attention_scale=1.0, sustained=_HOPPER_SUSTAINED,
                 attention_fp8=dict(fp8=_H100_CUDNN_FP8)),
    # B200: 148 SMs (NVIDIA Blackwell architecture technical brief); MAMF BF16 1745.0, FP8
    # 3432.5. Attention: GB200's cuDNN table (the same die) scaled by the BF16 MAMF ratio
    # 1745.0 / 1822.0 -- NVIDIA's B200 table was measured through PyTorch's cuDNN path, not the
    # one Transformer Engine calls; FA2 measured on B200 (_B200_FA2).
    "b200": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=148, best_shape=dict(bf16=(1792, 16128, 3072), fp8=(15360, 4096, 3072), fp4=_FP4_SHAPE),
                 mamf_tflops=dict(fp16=1745.0, bf16=1745.0, tf32=872.5, fp32=80 * 0.8, fp8=3432.5, fp4=_B200_FP4),
                 anchor=_B200_ANCHOR, attention=_GB200_CUDNN, attention_scale=1745.0 / 1822.0,
                 sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(_B200_FA2, 1.0),
                 sdpa_cudnn=(_B200_SDPA_CUDNN, 1.0),
                 attention_fp8=dict(fp8=_GB200_CUDNN_FP8, mxfp8=_GB200_CUDNN_MXFP8), attention_window=_GB200_CUDNN_WINDOW),
    # GB200 (Grace-Blackwell superchip GPU, higher power limit): MAMF BF16 1822.0, FP8 3615.6.
    # Attention: its own cuDNN table; FA2 B200's scaled by the BF16 MAMF ratio.
    "gb200": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=148, best_shape=dict(bf16=(4096, 9728, 2048), fp8=(19456, 5120, 1536), fp4=_FP4_SHAPE),
                  mamf_tflops=dict(fp16=1822.0, bf16=1822.0, tf32=911.0, fp32=80 * 0.8, fp8=3615.6,
                                   fp4=_B200_FP4 * 3615.6 / 3432.5),
                  anchor=dict(fp4=_fp4_anchor(3615.6 / 3432.5)), attention=_GB200_CUDNN, attention_scale=1.0,
                  sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(_B200_FA2, 1822.0 / 1745.0),
                  sdpa_cudnn=(_B200_SDPA_CUDNN, 1822.0 / 1745.0),
                  attention_fp8=dict(fp8=_GB200_CUDNN_FP8, mxfp8=_GB200_CUDNN_MXFP8), attention_window=_GB200_CUDNN_WINDOW),
    # B300 (Blackwell Ultra, HGX/DGX, 1.1 kW): 160 SMs (NVIDIA Blackwell Ultra technical blog, 2025);
    # MAMF B300 SXM BF16 1769.0, FP8 3353.3. Attention: GB300's tables (Blackwell Ultra) scaled
    # by the BF16 MAMF ratio 1769.0 / 1822.0 (GB300's MAMF stand-in, below).
    "b300": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=160, best_shape=dict(bf16=(12288, 18432, 1024), fp8=(3072, 6144, 7168), fp4=_FP4_SHAPE),
                 mamf_tflops=dict(fp16=1769.0, bf16=1769.0, tf32=884.5, fp32=75 * 0.8, fp8=3353.3,
                                  fp4=_B200_FP4 * 3353.3 / 3432.5 * 1.5),
                 anchor=dict(fp4=_fp4_anchor(3353.3 / 3432.5 * 1.5)), attention=_GB300_CUDNN,
                 attention_scale=1769.0 / 1822.0,
                 sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(_B200_FA2, 1769.0 / 1745.0),
                 sdpa_cudnn=(_GB300_SDPA_CUDNN, 1769.0 / 1822.0),
                 attention_fp8=dict(fp8=_GB300_CUDNN_FP8, mxfp8=_GB300_CUDNN_MXFP8), attention_window=_GB300_CUDNN_WINDOW),
    # GB300 (Blackwell Ultra in NVL72, 1.4 kW): no MAMF row. Its datasheet dense BF16 and FP8 rates are
    # GB200's (NVL72 datasheets: 2.5 / 5 PF per GPU for both), 11 % above the HGX B300's (2.25 / 4.5 PF
    # at 1.1 kW, presets/systems.py), so the measured GB200 MAMF stands in for BF16 and FP8 (and its
    # best shapes), on the B300's 160 SMs; FP4 is GB200's times Blackwell Ultra's 1.5x dense FP4.
    # Attention: its own cuDNN table; FA2 as GB200's.
    "gb300": dict(persistent=True, clc=True, fill_k=BLACKWELL_FILL_K, sms=160, best_shape=dict(bf16=(4096, 9728, 2048), fp8=(19456, 5120, 1536), fp4=_FP4_SHAPE),
                  mamf_tflops=dict(fp16=1822.0, bf16=1822.0, tf32=911.0, fp32=75 * 0.8, fp8=3615.6,
                                   fp4=_B200_FP4 * 3615.6 / 3432.5 * 1.5),
                  anchor=dict(fp4=_fp4_anchor(3615.6 / 3432.5 * 1.5)), attention=_GB300_CUDNN, attention_scale=1.0,
                  sustained=_BLACKWELL_SUSTAINED, mxfp8_gemm_rate=_MXFP8_GEMM_RATE, fa2=(_B200_FA2, 1822.0 / 1745.0),
                  sdpa_cudnn=(_GB300_SDPA_CUDNN, 1.0),
                  attention_fp8=dict(fp8=_GB300_CUDNN_FP8, mxfp8=_GB300_CUDNN_MXFP8), attention_window=_GB300_CUDNN_WINDOW),
}

# Fused-attention kernels with a published table per GPU (`training.attention_kernel`): Hopper has
# all three bars of the FlashAttention-3 paper's Fig. 5 (cuDNN, FlashAttention-2 -- the kernel
# PyTorch's SDPA flash backend vendors -- and FlashAttention-3), the cuDNN of 2026 and the older
# FlashAttention v1 and its Triton port; Ampere FA2, v1 and the Triton port, Volta FA2 only (FA3 and
# the cuDNN table are Hopper measurements); Blackwell cuDNN and FA2 (its `fa2` entry; FA3 has no
# Blackwell kernel).
def _attention_kernels(c: dict) -> dict:
    own = "fa2" if any(t is _H100_FA2 for t in (c["attention"], c["attention"].get("relative_to"))) else "cudnn"
    kernels = {own: (c["attention"], c["attention_scale"])}
    if c["attention"] is _H100_CUDNN and c["attention_scale"] == 1.0:     # measured on this GPU: Hopper
        kernels.update(fa2=(_H100_FA2, 1.0), fa3=(_H100_FA3, 1.0), **{"cudnn-9.19": (_H100_CUDNN_2026, 1.0)})
        kernels.update({"fa1": (_FA1_ON_H100, 1.0), "fa-triton": (_FA_TRITON_ON_H100, 1.0)})
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
