"""GEMM time from its shape: tile and wave quantisation over the SMs, split-K, the memory roof.

C[M, N] = A[M, K] @ B[K, N] (times `batch`) is cut into Tm x Tn output tiles; each SM runs one
tile at a time, so the tiles run in waves of `sms` (wave quantisation: NVIDIA Deep Learning
Performance Guide, "Matrix Multiplication Background", sections "Tile quantization" and "Wave
quantization"). A tile costs its share of the achievable peak (the MAMF asymptote of
pipesim/presets/gpus.py) for its K-loop plus a fixed pipeline fill (TILE_FILL_K), and the
epilogue that stores its output tile:

    t      = waves · (2 Tm Tn K/s / (r · eff) + Tm Tn · out_bytes / (B / sms)) + fill
    waves  = ceil(tiles·s / sms),  fill = 2 Tm Tn K_fill / (r · eff)
    t_gemm = max(min over tiles and split-K s of t,  bytes moved / achievable HBM bandwidth)

The epilogue (accumulators -> 16-bit C tile -> HBM, at the SM's share 1/sms of the achievable HBM
bandwidth B) is not hidden behind the next tile's K-loop: the CUTLASS 3 "cooperative" Hopper
schedule runs both math warp groups on one tile and stores it before the next (NVIDIA/cutlass
media/docs/efficient_gemm.md, "Warp-Specialized Persistent Cooperative kernel design"; the
Ping-Pong design, which overlaps one tile's epilogue with another's K-loop, is not modelled). It
is what makes
short-K GEMMs slow in published FP8 tables, where the K-loop is half as long as in BF16: DeepGEMM
README (first release, 2025-02-25, H800 = H100 SXM compute) M=4096: K=512 590, K=1536 990,
K=2048 1025, K=7168 1304, K=16384 1358 TFLOP/s (benchmarks/kernel_curves.py prints them).

with r the per-SM rate, set so that the model returns the published MAMF at the shape where it
was measured, or the curve's published `anchor` point (pipesim/presets/gpus.py: H100/H800 FP8).

The memory roof (Williams et al. 2009, roofline) takes over for skinny GEMMs. cuBLAS picks the
fastest tile per shape, as the min does.
"""
from __future__ import annotations

import math
from functools import lru_cache

from pipesim.presets.gpus import SPLIT_K, SPLIT_K_EFFICIENCY, TILE_FILL_K, TILES

# the epilogue stores a 16-bit C tile (BF16 output, also of FP8 GEMMs: Transformer Engine)
OUT_BYTES = 2

BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 0.5}


def _raw_time(m: float, n: float, k: float, batch: float, sms: int, per_sm: float, fill_per_sm: float,
              persistent: bool = True, store_per_sm: float = math.inf, out_bytes: float = OUT_BYTES) -> float:
    """Fastest tile / split-K choice: whole waves of tiles plus the pipeline fill -- once per SM
    for persistent kernels (Hopper/Blackwell warp-specialized GEMMs prefetch the next tile during
    the previous epilogue: CUTLASS 3 "persistent" kernel schedules), once per wave otherwise
    (Volta/Ampere kernels launch one CTA per tile). `out_bytes`: HBM bytes per output element of
    the epilogue (a 16-bit store; read + write of the gradient buffer when it accumulates)."""
    best = math.inf
    for (tm, tn), tile_eff in TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * math.ceil(batch)
        for split in SPLIT_K:
            if split > 1 and (tiles * split > 2 * sms or k / split < 256):
                continue       # split-K only to fill the SMs, never below a 256-deep slice
            eff = tile_eff * (SPLIT_K_EFFICIENCY if split > 1 else 1.0)
            waves = math.ceil(tiles * split / sms)
            kk = math.ceil(k / split)
            fills = 1 if persistent else waves
            t = 2 * tm * tn * (waves * kk / per_sm + fills * TILE_FILL_K / fill_per_sm) / eff
            t += waves * tm * tn * out_bytes / store_per_sm
            best = min(best, t)
    return best


@lru_cache(maxsize=64)
def _rate_scale(sms: int, mamf: float, fill_rate: float, best_shape: tuple, persistent: bool,
                store_per_sm: float) -> float:
    """The factor on the per-SM rate that makes the model return exactly `mamf` at `best_shape`
    (bisection: the time falls monotonically with the rate; the epilogue does not scale)."""
    bm, bn, bk = best_shape
    target = 2 * bm * bn * bk / mamf

    def t(scale):
        return _raw_time(bm, bn, bk, 1, sms, mamf * scale / sms, fill_rate * scale / sms, persistent, store_per_sm)
    lo, hi = 1 / 64, 1.0
    while t(hi) > target:
        lo, hi = hi, hi * 2
        if hi > 64:
            raise ValueError(f"GEMM curve: the epilogue alone exceeds the anchor time at {best_shape}")
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t(mid) > target else (lo, mid)
    return hi


@lru_cache(maxsize=4096)
def gemm_compute_time(m: float, n: float, k: float, batch: float, sms: int, mamf: float, fill_rate: float,
                      best_shape: tuple, persistent: bool = True, store_bandwidth: float = math.inf,
                      anchor_rate: float | None = None, out_bytes: float = OUT_BYTES,
                      anchor_store_bandwidth: float | None = None, sms_used: int | None = None) -> float:
    """Seconds of tensor-core work for `batch` GEMMs of M x N x K. `mamf` is the published
    achievable FLOP/s of the dtype (the cap); the per-SM rate is set so that the model returns
    exactly `anchor_rate` (default: the MAMF) at `best_shape` (M, N, K) with the memory the anchor
    was measured on (`anchor_store_bandwidth`, default `store_bandwidth`). `fill_rate` (FLOP/s)
    times the pipeline fill; `store_bandwidth` (bytes/s, achievable HBM) the tile epilogues, which
    move `out_bytes` per output element (the anchor was measured with a 16-bit store). `sms_used`:
    the SMs the GEMM may take (default all: training.gemm_sm_margin leaves the rest), each at the
    whole device's per-SM rate, sharing the HBM store bandwidth."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    used = sms_used or sms
    anchor = anchor_rate or mamf
    scale = _rate_scale(sms, anchor, fill_rate, tuple(best_shape), persistent,
                        (anchor_store_bandwidth or store_bandwidth) / sms)
    t = _raw_time(m, n, k, batch, used, anchor * scale / sms, fill_rate * scale / sms, persistent,
                  store_bandwidth / used, out_bytes)
    # the MAMF is the best any shape reached: no shape runs faster
    return max(t, 2 * m * n * k * batch / mamf)


def out_bytes_of(dtype: str, accumulate_bytes: float = 0) -> float:
    """HBM bytes per output element of a GEMM's epilogue: the C store (16-bit, fp32 for fp32/tf32
    GEMMs), or, when it accumulates into a gradient buffer of `accumulate_bytes` elements
    (C = A B + C, beta = 1), a read and a write of it."""
    if accumulate_bytes:
        return 2 * accumulate_bytes
    return 4 if dtype in ("fp32", "tf32") else OUT_BYTES


def gemm_bytes(m: float, n: float, k: float, dtype: str, batch: float = 1, out_bytes: float | None = None) -> float:
    """Operands read once, the output moved once (`out_bytes` per element, out_bytes_of)."""
    out = out_bytes_of(dtype) if out_bytes is None else out_bytes
    return batch * ((m * k + k * n) * BYTES[dtype] + m * n * out)
