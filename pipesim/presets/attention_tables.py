"""Fused-attention kernel tables: TFLOP/s by sequence length (forward, causal forward, backward,
causal backward where measured) and head-dim panels, as published kernel benchmarks measured
them, each with its source beside it. The per-GPU curves (presets/gpus.py) name which table a GPU
runs and at what scale; pipesim/costs/flash.py reads them.

A table is {"fwd": ..., "fwd_causal": ..., "bwd": ..., ["bwd_causal": ...]}, each ((seq, TFLOP/s),
...), with optional "head_dim" panels, "head_dim_from" (the table whose panels one measured at head
dim 128 only borrows), "mla" panels, "bf16_ref" (an FP8 table's BF16 rates of the same run) and
"source" (what the report names). A kernel measured only beside another has "relative_to" (that
table) with "ratio" panels (its rate over the other's) or "fwd_bwd" bars (its forward + backward
rate, flash.relative_rate).
"""
from __future__ import annotations

import math
from datetime import date

# FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608), Fig. 5 (H100 80GB SXM5, head dim
# 128, batch x seq = 16k tokens, hidden 2048): cuDNN fused attention, which Transformer Engine
# uses on Hopper (Megatron-Core / NeMo). Forward non-causal, forward causal (causal FLOPs counted
# as half), backward non-causal; TFLOP/s at seq 512, 1k, 2k, 4k, 8k, 16k.
_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
H100_CUDNN = {
    "fwd": tuple(zip(_SEQ, (497, 574, 617, 609, 600, 595))),
    "fwd_causal": tuple(zip(_SEQ, (315, 410, 484, 518, 529, 539))),
    "bwd": tuple(zip(_SEQ, (305, 408, 465, 499, 518, 516))),
}
# FlashAttention-2 on the same H100 (same figure): the kernel A100-era stacks run.
H100_FA2 = {
    "fwd": tuple(zip(_SEQ, (309, 350, 362, 368, 370, 370))),
    "fwd_causal": tuple(zip(_SEQ, (191, 260, 298, 319, 333, 335))),
    "bwd": tuple(zip(_SEQ, (214, 260, 291, 310, 318, 322))),
}

# The FlashAttention-3 kernel itself on the same H100 (same figure, FA3 bars): what a stack that
# calls FA3 directly runs (`training.attention_kernel: fa3`).
H100_FA3 = {
    "fwd": tuple(zip(_SEQ, (467, 565, 625, 638, 646, 648))),
    "fwd_causal": tuple(zip(_SEQ, (292, 423, 521, 579, 602, 616))),
    "bwd": tuple(zip(_SEQ, (316, 424, 501, 542, 559, 561))),
}

# The same figure's head-dim-64 and head-dim-256 panels (forward, non-causal and causal; TFLOP/s
# at seq 512 .. 16k as labelled on the bars; H100 80GB SXM5, BF16) and the paper's backward panel at
# head dim 64 (Fig. 6, non-causal; no backward panel at 256: pipesim/costs/flash.py takes the
# forward's factor there).
H100_CUDNN["head_dim"] = {
    64: {"fwd": tuple(zip(_SEQ, (335, 373, 395, 408, 412, 413))),
         "fwd_causal": tuple(zip(_SEQ, (225, 288, 334, 363, 379, 388))),
         "bwd": tuple(zip(_SEQ, (266, 348, 395, 417, 432, 433)))},
    256: {"fwd": tuple(zip(_SEQ, (470, 546, 580, 581, 580, 581))),
          "fwd_causal": tuple(zip(_SEQ, (308, 391, 450, 483, 497, 509)))},
}
H100_FA2["head_dim"] = {
    64: {"fwd": tuple(zip(_SEQ, (282, 306, 318, 321, 322, 324))),
         "fwd_causal": tuple(zip(_SEQ, (180, 229, 262, 284, 295, 299))),
         "bwd": tuple(zip(_SEQ, (198, 238, 264, 279, 287, 291)))},
    256: {"fwd": tuple(zip(_SEQ, (275, 313, 321, 323, 324, 326))),
          "fwd_causal": tuple(zip(_SEQ, (208, 251, 278, 293, 297, 298)))},
}
H100_FA3["head_dim"] = {
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


def _april_run(fwd, fwd_causal, bwd, bwd_causal, short_causal, head_dim_from) -> dict:
    """An April 2026 table (_seq_panel's rates) with the December 2025 run's causal 512 and 1K
    points ahead of it (`short_causal`: (forward, backward) rates at 512 and 1K), and non-causal
    rows below 2K from the H100 cuDNN table's ratio (_with_non_causal)."""
    table = _seq_panel(fwd, fwd_causal, bwd, bwd_causal, head_dim_from=head_dim_from)
    for key, (at_512, at_1k) in zip(("fwd_causal", "bwd_causal"), short_causal):
        table[key] = ((512, at_512), (1024, at_1k)) + table[key]
    return _with_non_causal(table, H100_CUDNN)


GB200_CUDNN = _april_run((1433, 1599, 1771, 1697, 1634), (1097, 1408, 1574, 1708, 1622),
                         (1124, 1350, 1404, 1374, 1262), (885, 1148, 1332, 1328, 1226),
                         ((408, 733), (329, 527)), H100_CUDNN)
# Head-dim panels of the same April 2026 runs (results/qwen35, results/dsv3): Qwen3.5's attention
# (32 query / 2 KV heads of 256, batch 1, causal forward only) and, for MLA attention only
# (flash.py head_dim_factor), DeepSeek-V3's (128 heads, q/k 192, v 128, batch 2). On Blackwell a
# larger head dim is faster per FLOP (the exponentials per score are fixed: FlashAttention-4, arXiv
# 2603.05451, Sec. 1), where Hopper's panels (FA3 paper) run the other way; head dims below 128
# take Hopper's panel.
GB200_CUDNN["head_dim"] = {256: {"fwd_causal": tuple(zip(_SEQ_BW, (1126, 1441, 1708, 1804, 1734)))}}
GB200_CUDNN["mla"] = _seq_panel((1492, 1666, 1759, 1812, 1584), (1072, 1406, 1585, 1678, 1743),
                                 (1048, 1175, 1125, 1088, 1086), (846, 1057, 1193, 1134, 1076))
# GB300 (Blackwell Ultra: twice the exponential (SFU) rate of Blackwell, which the softmax needs):
# 1.06-1.25x GB200's rates in the same run.
GB300_CUDNN = _april_run((1805, 1900, 2017, 2014, 1836), (1373, 1703, 1856, 1915, 1953),
                         (1213, 1429, 1531, 1536, 1427), (967, 1248, 1435, 1507, 1490),
                         ((461, 839), (330, 522)), H100_CUDNN)
GB300_CUDNN["head_dim"] = {256: {"fwd_causal": tuple(zip(_SEQ_BW, (1307, 1743, 1965, 2063, 2096)))}}
GB300_CUDNN["mla"] = _seq_panel((1770, 1937, 2021, 2032, 1917), (1285, 1590, 1825, 1967, 1991),
                                 (1117, 1267, 1301, 1254, 1246), (914, 1143, 1291, 1302, 1289))

# FP8 fused attention (`training.fp8_attention`: Transformer Engine's FP8 DotProductAttention,
# Megatron-Core --fp8-dot-product-attention): Q, K, V and, in the backward, dO in FP8, measured in
# the same runs as the BF16 tables -- GB200 / GB300 with per-tensor ("fp8") and MXFP8 ("mxfp8")
# scaling (cuDNN 9.22; the per-tensor tables' causal 512 / 1K points from the December 2025 run,
# cudnn_fe_fp8), H200 per-tensor (cuDNN 9.19: its causal backward runs slower than BF16's from 8K
# on, as measured). The MXFP8 and Hopper tables start at 2K (held below it). Head dims: the BF16
# table's panels of the same GPU.
GB200_CUDNN_FP8 = _april_run((1881, 2093, 2241, 2263, 2223), (1420, 1805, 2047, 2154, 2197),
                             (1214, 1577, 1772, 1836, 1825), (831, 1178, 1454, 1632, 1687),
                             ((466, 870), (300, 551)), GB200_CUDNN)
GB200_CUDNN_MXFP8 = _seq_panel((1754, 1944, 2080, 2103, 2070), (1330, 1685, 1902, 1999, 2046),
                                (1069, 1344, 1495, 1554, 1480), (745, 1054, 1287, 1436, 1425),
                                head_dim_from=GB200_CUDNN)
GB300_CUDNN_FP8 = _april_run((2728, 2988, 3160, 3182, 3050), (1954, 2532, 2897, 3054, 3108),
                             (1390, 1839, 2111, 2177, 2178), (944, 1396, 1781, 2035, 2128),
                             ((564, 1090), (310, 580)), GB300_CUDNN)
GB300_CUDNN_MXFP8 = _seq_panel((2443, 2693, 2870, 2889, 2814), (1751, 2272, 2570, 2727, 2785),
                                (1164, 1469, 1636, 1689, 1654), (811, 1143, 1404, 1563, 1590),
                                head_dim_from=GB300_CUDNN)
H100_CUDNN_FP8 = _seq_panel((870, 973, 1023, 1055, 1062), (698, 854, 964, 1010, 1042),
                             (531, 602, 636, 659, 674), (393, 471, 430, 374, 370), head_dim_from=H100_CUDNN)

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


GB200_CUDNN_WINDOW = _window_table(
    "cuDNN 9.22, NVIDIA cudnn-frontend gpt_oss benchmark (GB200, 2026-04)",
    bf16=((153, 161, 165, 167, 104), (176, 182, 187, 188, 186)),
    fp8=((165, 173, 177, 179, 179), (78, 49, 28, 15, 8)),
    mxfp8=((153, 161, 164, 166, 168), (65, 41, 23, 12, 6)))
GB300_CUDNN_WINDOW = _window_table(
    "cuDNN 9.22, NVIDIA cudnn-frontend gpt_oss benchmark (GB300, 2026-04)",
    bf16=((160, 167, 172, 173, 108), (184, 191, 198, 200, 199)),
    fp8=((193, 203, 208, 211, 212), (89, 57, 33, 18, 9)),
    mxfp8=((182, 194, 200, 203, 204), (72, 45, 26, 14, 7)))

def _with_short_end(table: dict, ref: dict) -> dict:
    """Rows below a table's shortest measured length (512 .. its first): its first rate times
    `ref`'s rate there over `ref`'s at that first length, per phase (a causal backward `ref` lacks:
    its non-causal backward times its causal / non-causal forward, as flash.py reads it)."""
    def ref_rate(key, s):
        if key in ref:
            return interp_by_seq(ref[key], s)
        return interp_by_seq(ref["bwd"], s) * interp_by_seq(ref["fwd_causal"], s) / interp_by_seq(ref["fwd"], s)
    out = dict(table)
    for key in ("fwd", "fwd_causal", "bwd", "bwd_causal"):
        first, rate = table[key][0]
        out[key] = tuple((s, rate * ref_rate(key, s) / ref_rate(key, first)) for s in _SEQ if s < first) + table[key]
    return out


# cuDNN of 2026 on Hopper, the Hopper default (`training.attention_kernel: cudnn`, also named
# `cudnn-9.19`): NVIDIA/cudnn-frontend
# benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv
# (cuDNN 9.19.1, H200 -- the H100 die and clocks at the same 700 W --, BF16, 64 query / 8 KV heads,
# head dim 128, batch 1, 2K-32K). 8-22 % faster than the 2024 cuDNN of the FlashAttention-3 paper's
# Fig. 5 (`cudnn-2024`, which the Hopper runs of 2024-25 take: costs/flash.py dated_cudnn),
# most in the causal forward. The run starts at 2K: 512 and 1K follow the 2024 table's fall from
# its 2K rate (_with_short_end; held at the 2K rate, a 512-token kernel would run 1.5x too fast).
H100_CUDNN_2026 = _with_short_end(_seq_panel((633, 671, 691, 702, 693), (484, 591, 644, 673, 688),
                                             (504, 560, 594, 612, 572), (370, 474, 541, 579, 581),
                                             head_dim_from=H100_CUDNN), H100_CUDNN)
# MLA on Hopper, the same run (results/h200_919_only_cudnn/dsv3_20260227_034744.csv: DeepSeek-V3's
# 128 heads, q/k 192, v 128; causal, 2K-8K; the longer rows failed): forward at the head-dim-128
# rate, backward 0.82-0.95 of it. The 2024 table borrows this panel, as a factor against
# this run's head-dim-128 rates.
H100_CUDNN_2026["mla"] = {"fwd_causal": ((2048, 522), (4096, 599), (8192, 643)),
                           "bwd_causal": ((2048, 352), (4096, 404), (8192, 442))}
H100_CUDNN["head_dim_from"] = H100_CUDNN_2026
# MLA in FP8 (the same April 2026 runs, results/dsv3/{gb200,gb300}: DeepSeek-V3's 128 heads, q/k
# 192, v 128, batch 2, non-deterministic backward): FP8 gains more on MLA than at head dim 128 (GB200
# causal backward at 4K: per-tensor 1.60x, MXFP8 1.29x BF16's, against 1.03x and 0.92x for Llama's
# heads), so an MLA op takes the FP8 / BF16 ratio of these panels (flash.attention_tflops).
GB200_CUDNN_FP8["mla"] = _seq_panel((2175, 2518, 2582, 2590, 2340), (1659, 2095, 2397, 2486, 2447),
                                     (1807, 2071, 2122, 1989, 1932), (1312, 1692, 1959, 1968, 1857))
GB200_CUDNN_MXFP8["mla"] = _seq_panel((2018, 2316, 2408, 2492, 2162), (1535, 1925, 2219, 2355, 2329),
                                       (1504, 1675, 1680, 1638, 1561), (1047, 1364, 1494, 1552, 1532))
GB300_CUDNN_FP8["mla"] = _seq_panel((3058, 3304, 3400, 3438, 3362), (2290, 2788, 3128, 3305, 3364),
                                     (2099, 2406, 2509, 2579, 2466), (1511, 1982, 2310, 2459, 2406))
GB300_CUDNN_MXFP8["mla"] = _seq_panel((2758, 3015, 3108, 3117, 3063), (2069, 2517, 2829, 2998, 2959),
                                       (1665, 1921, 2027, 2007, 1948), (1158, 1522, 1780, 1844, 1863))
for _fp8, _ref in ((GB200_CUDNN_FP8, GB200_CUDNN), (GB200_CUDNN_MXFP8, GB200_CUDNN),
                   (GB300_CUDNN_FP8, GB300_CUDNN), (GB300_CUDNN_MXFP8, GB300_CUDNN),
                   (H100_CUDNN_FP8, H100_CUDNN_2026)):
    _fp8["bf16_ref"] = _ref        # the BF16 rates of the same run: FP8 is applied as its speed-up

_SEQ_B200 = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
# cuDNN through PyTorch SDPA's own cuDNN backend (`training.attention_kernel: sdpa-cudnn`, what a
# PyTorch-native stack calls with SDPBackend.CUDNN_ATTENTION): NVIDIA/cudnn-frontend commit bb37575
# (Oct 2025), artifacts/sdpa_bf16_benchmark_results_NVIDIA_{B200,GB300}.csv, backend pyt_cudnn
# (NGC PyTorch 25.09, torch 2.9, cuDNN 9.13.1), BF16, causal, 128 query / 8 KV heads, head dim 128,
# batch 1: 20-30 % below the graph API Transformer Engine calls at 4K-16K, more at shorter
# lengths. Non-causal rows as for FA2 above, from the H100 cuDNN table's ratio. GB200 takes B200's
# at the MAMF ratio, B300 GB300's; Hopper has no measurement of this path (the cudnn table).
B200_SDPA_CUDNN = _with_non_causal({
    "fwd_causal": tuple(zip(_SEQ_B200, (84.0, 254.5, 478.9, 855.7, 1171.3, 1332.4, 1419.0, 1382.3, 1355.4))),
    "bwd_causal": tuple(zip(_SEQ_B200, (134.2, 308.5, 371.5, 701.3, 942.5, 1074.8, 1108.7, 1073.1, 1047.8))),
    "head_dim_from": GB200_CUDNN,
}, H100_CUDNN)
GB300_SDPA_CUDNN = _with_non_causal({
    "fwd_causal": tuple(zip(_SEQ_B200, (54.9, 224.2, 593.5, 1144.9, 1495.7, 1702.5, 1795.9, 1770.5, 1720.9))),
    "bwd_causal": tuple(zip(_SEQ_B200, (95.3, 277.2, 487.3, 892.6, 1130.1, 1267.8, 1319.2, 1301.7, 1280.0))),
    "head_dim_from": GB300_CUDNN,
}, H100_CUDNN)

# Transformer Engine's cuDNN path as it ran in late 2025 (`training.attention_kernel: cudnn-9.13`,
# `cudnn-9.17`): NVIDIA/cudnn-frontend's training SDPA benchmark through the frontend graph API (the
# call Transformer Engine makes), BF16 and per-tensor FP8 in one run, causal, 128 query / 8 KV heads,
# head dim 128, batch 1, free clocks, TFLOP/s as the tables above count them:
#  - cuDNN 9.13.1 on NGC PyTorch 25.09: commit bb37575 (2025-10-07), benchmark/
#    sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_{B200,GB300}.csv (its
#    bf16 and fp8 rows; sample_*_fp8_run.txt: cudnn.backend_version() = 91301);
#  - cuDNN 9.17.0 on NGC PyTorch 25.11: commit b372d39 (2025-12-19), artifacts/
#    sdpa_bf16_benchmark_results_NVIDIA_{GB200,GB300}.csv (backends cudnn_fe and cudnn_fe_fp8).
# Against the April 2026 cuDNN 9.22 run (GB300, the same work per kernel) the 9.13 causal backward is
# 0.56x at 2K, 0.80x at 8K and 0.91x at 32K, its forward 0.73x / 0.92x / 0.96x: Blackwell's fused
# attention gained most at short lengths and in the backward between these releases. The runs are
# causal only: the non-causal rows take the same GPU's 9.22 table's measured non-causal / causal
# ratio (_with_non_causal; 0.99-1.01 from 8K on, where Hopper's is 1.10), its head-dim and MLA
# panels too; "fp8" is the per-tensor FP8 table of the same run (flash.attention_tflops).
def _dated_cudnn(bf16, fp8, current: dict) -> dict:
    """A dated cuDNN table measured at _SEQ_B200: `bf16` and `fp8` ((forward causal, backward
    causal) rates), with the FP8 run beside it; `current`: the GPU's 9.22 table."""
    def table(rates):
        return _with_non_causal({"fwd_causal": tuple(zip(_SEQ_B200, rates[0])),
                                 "bwd_causal": tuple(zip(_SEQ_B200, rates[1])), "head_dim_from": current},
                                current)
    out = table(bf16)
    out["fp8"] = dict(table(fp8), bf16_ref=out)
    return out


B200_CUDNN_913 = _dated_cudnn(
    ((244.1, 561.3, 907.5, 1141.1, 1384.2, 1475.3, 1514.8, 1493.8, 1421.9),
     (200.6, 376.9, 545.1, 832.9, 994.9, 1151.7, 1180.3, 1235.9, 1127.7)),
    ((196.1, 516.2, 974.2, 1230.7, 1502.1, 1692.4, 1781.4, 1815.2, 1829.6),
     (169.9, 376.8, 556.0, 972.3, 1254.7, 1469.5, 1582.2, 1626.6, 1616.1)), GB200_CUDNN)
GB300_CUDNN_913 = _dated_cudnn(
    ((175.6, 492.2, 999.8, 1445.2, 1716.1, 1835.9, 1883.5, 1831.9, 1739.7),
     (174.5, 365.7, 544.5, 941.9, 1150.5, 1290.8, 1350.1, 1398.7, 1347.2)),
    ((137.0, 425.5, 1030.2, 1675.1, 2073.6, 2266.6, 2351.8, 2386.4, 2376.1),
     (146.2, 368.6, 573.3, 1156.2, 1513.8, 1745.9, 1880.4, 1953.1, 1967.2)), GB300_CUDNN)
GB200_CUDNN_917 = _dated_cudnn(
    ((408, 733, 1069, 1386, 1584, 1668, 1681, 1573, 1467), (329, 527, 655, 1054, 1211, 1304, 1348, 1229, 1188)),
    ((466, 870, 1321, 1661, 1893, 2033, 2124, 2181, 2166), (300, 551, 672, 1088, 1261, 1370, 1429, 1450, 1440)),
    GB200_CUDNN)
GB300_CUDNN_917 = _dated_cudnn(
    ((461, 839, 1312, 1682, 1899, 1978, 2007, 1951, 1821), (330, 522, 633, 1110, 1292, 1399, 1438, 1399, 1360)),
    ((564, 1090, 1707, 2194, 2565, 2809, 2968, 3062, 2991), (310, 580, 693, 1177, 1390, 1534, 1600, 1627, 1606)),
    GB300_CUDNN)

# FlashAttention-2 on Blackwell -- PyTorch SDPA's flash backend, which has no Blackwell tensor-core
# (tcgen05) path and so runs at a quarter of cuDNN's rate there: NVIDIA/cudnn-frontend commit
# bb37575 (Oct 2025), benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_
# NVIDIA_B200.csv, backend pyt_flash_attention (NGC PyTorch 25.09, torch 2.9), B200, BF16, causal,
# 128 query / 8 KV heads, head dim 128, batch 1. Only causal rows were measured: the non-causal
# rows take the H100 FA2 table's non-causal / causal ratio at each length (the same kernel code).
B200_FA2 = _with_non_causal({
    "fwd_causal": tuple(zip(_SEQ_B200, (74.6, 165.5, 242.4, 324.9, 373.4, 394.5, 403.7, 408.7, 411.0))),
    "bwd_causal": tuple(zip(_SEQ_B200, (83.0, 107.7, 186.3, 256.4, 298.9, 320.0, 330.8, 335.4, 336.0))),
    "head_dim_from": H100_FA2,
}, H100_FA2)

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
    """A kernel on a GPU whose FlashAttention-2 is the FA3 paper's H100 table (H100_FA2): that
    table times the kernel's forward + backward rate over FA2's in the same panel of the same
    figure, forward and backward alike (the figure gives only their sum), by sequence length at
    head dims 64 and 128 (flash.relative_rate; none above: FlashAttention v1 and its Triton port
    stop at 128)."""
    panels, fa2 = FA2_PAPER_FWD_BWD[gpu][kernel], FA2_PAPER_FWD_BWD[gpu]["fa2"]
    return {"relative_to": H100_FA2,
            "ratio": {panel: tuple((s, k / f) for s, k, f in zip(_SEQ, rates, fa2[panel]))
                      for panel, rates in panels.items()}}


def _measured_on(gpu: str, kernel: str) -> dict:
    """A kernel at its own forward + backward bars on `gpu` (the A100, which has no other
    attention table): the H100_FA2 table's forward / backward split and head-dim panels, times at
    each bar the bar over that table's own forward + backward rate there (flash.relative_rate)."""
    return {"relative_to": H100_FA2,
            "fwd_bwd": {panel: tuple(zip(_SEQ, rates)) for panel, rates in FA2_PAPER_FWD_BWD[gpu][kernel].items()}}


# The A100's attention, FA2 included, is its own figure's. The Triton kernel has no H100 bar: on
# H100 it takes its A100 rate over FlashAttention-2's (both are Ampere-style mma.sync kernels there:
# FlashAttention v1's own H100 / A100 ratio to FA2 agrees, 0.42-0.60 against 0.44-0.56 causal at
# head dim 128).
A100_FA2, FA1_ON_A100 = _measured_on("a100", "fa2"), _measured_on("a100", "fa1")
FA_TRITON_ON_A100, XFORMERS_ON_A100 = _measured_on("a100", "fa-triton"), _measured_on("a100", "xformers")
FA1_ON_H100, FA_TRITON_ON_H100 = _relative_to_fa2("h100", "fa1"), _relative_to_fa2("a100", "fa-triton")

# What each attention table is, as the report names it beside a prediction ("source").
for _table, _label in ((H100_CUDNN, "cuDNN, FlashAttention-3 paper Fig. 5 (H100, 2024)"),
                       (H100_FA2, "FlashAttention-2, FlashAttention-3 paper Fig. 5 (H100)"),
                       (H100_FA3, "FlashAttention-3, FlashAttention-3 paper Fig. 5 (H100)"),
                       (A100_FA2, "FlashAttention-2, FlashAttention-2 paper Fig. 4 (A100)"),
                       (FA1_ON_A100, "FlashAttention v1, FlashAttention-2 paper Fig. 4 (A100)"),
                       (FA_TRITON_ON_A100, "FlashAttention Triton, FlashAttention-2 paper Fig. 4 (A100)"),
                       (XFORMERS_ON_A100, "xformers, FlashAttention-2 paper Fig. 4 (A100)"),
                       (FA1_ON_H100, "FlashAttention v1, FlashAttention-2 paper Fig. 7 (H100), as its ratio to FA2"),
                       (FA_TRITON_ON_H100, "FlashAttention Triton at its A100 ratio to FA2, FlashAttention-2 "
                                            "paper Fig. 4"),
                       (H100_CUDNN_2026, "cuDNN 9.19, NVIDIA cudnn-frontend benchmark (H200, 2026-02)"),
                       (H100_CUDNN_FP8, "cuDNN 9.19 FP8, NVIDIA cudnn-frontend benchmark (H200, 2026-02)"),
                       (GB200_CUDNN, "cuDNN 9.22, NVIDIA cudnn-frontend benchmark (GB200, 2026-04)"),
                       (GB300_CUDNN, "cuDNN 9.22, NVIDIA cudnn-frontend benchmark (GB300, 2026-04)"),
                       (GB200_CUDNN_FP8, "cuDNN 9.22 FP8, NVIDIA cudnn-frontend benchmark (GB200, 2026-04)"),
                       (GB300_CUDNN_FP8, "cuDNN 9.22 FP8, NVIDIA cudnn-frontend benchmark (GB300, 2026-04)"),
                       (GB200_CUDNN_MXFP8, "cuDNN 9.22 MXFP8, NVIDIA cudnn-frontend benchmark (GB200, 2026-04)"),
                       (GB300_CUDNN_MXFP8, "cuDNN 9.22 MXFP8, NVIDIA cudnn-frontend benchmark (GB300, 2026-04)"),
                       (B200_CUDNN_913, "cuDNN 9.13, NVIDIA cudnn-frontend benchmark (B200, 2025-10)"),
                       (GB300_CUDNN_913, "cuDNN 9.13, NVIDIA cudnn-frontend benchmark (GB300, 2025-10)"),
                       (GB200_CUDNN_917, "cuDNN 9.17, NVIDIA cudnn-frontend benchmark (GB200, 2025-12)"),
                       (GB300_CUDNN_917, "cuDNN 9.17, NVIDIA cudnn-frontend benchmark (GB300, 2025-12)"),
                       (B200_CUDNN_913["fp8"], "cuDNN 9.13 FP8, NVIDIA cudnn-frontend benchmark (B200, 2025-10)"),
                       (GB300_CUDNN_913["fp8"], "cuDNN 9.13 FP8, NVIDIA cudnn-frontend benchmark (GB300, 2025-10)"),
                       (GB200_CUDNN_917["fp8"], "cuDNN 9.17 FP8, NVIDIA cudnn-frontend benchmark (GB200, 2025-12)"),
                       (GB300_CUDNN_917["fp8"], "cuDNN 9.17 FP8, NVIDIA cudnn-frontend benchmark (GB300, 2025-12)"),
                       (B200_FA2, "FlashAttention-2 via PyTorch SDPA, NVIDIA cudnn-frontend benchmark (B200, 2025-10)"),
                       (B200_SDPA_CUDNN, "cuDNN 9.13 via PyTorch SDPA, NVIDIA cudnn-frontend benchmark (B200, 2025-10)"),
                       (GB300_SDPA_CUDNN, "cuDNN 9.13 via PyTorch SDPA, NVIDIA cudnn-frontend benchmark (GB300, "
                                           "2025-10)")):
    _table["source"] = _label

# When each cuDNN table was measured (the runs named beside the tables; "cudnn" is each GPU's default,
# the newest): a stack of a given date (`training.software_date`; a published run's by its source)
# runs the newest one its software could have had (pipesim/costs/flash.py dated_cudnn). Hopper: the FlashAttention-3 paper (arXiv 2407.08608, July 2024)
# and cuDNN 9.19.1 (2026-02-27); Blackwell: cuDNN 9.13.1 (2025-10-07), 9.17.0 (2025-12-19) and 9.22.0
# (2026-04-24).
CUDNN_MEASURED = ((("h100", "h800", "h200"), ((date(2024, 7, 11), "cudnn-2024"), (date(2026, 2, 27), "cudnn"))),
                  (("b200", "gb200", "b300", "gb300"), ((date(2025, 10, 7), "cudnn-9.13"),
                                                        (date(2025, 12, 19), "cudnn-9.17"),
                                                        (date(2026, 4, 24), "cudnn"))))
