"""GEMM time from its shape: tile and wave quantisation over the SMs, split-K, the memory roof.

C[M, N] = A[M, K] @ B[K, N] (times `batch`) is cut into Tm x Tn output tiles; each SM runs one
tile at a time, so the tiles run in waves of `sms` (wave quantisation: NVIDIA Deep Learning
Performance Guide, "Matrix Multiplication Background", sections "Tile quantization" and "Wave
quantization"). A tile costs its share of the achievable peak (the MAMF asymptote of
pipesim/presets/gpus.py) for its K-loop plus a fixed pipeline fill (TILE_FILL_K):

    t      = 2 Tm Tn (ceil(tiles·s / sms) · K/s + K_fill) / (r · tile_eff · split_eff)
    t_gemm = max(min over tiles and split-K s of t,  bytes moved / achievable HBM bandwidth)

with r the per-SM rate, set so that the model returns the published MAMF at the shape where it
was measured (pipesim/presets/gpus.py).

The memory roof (Williams et al. 2009, roofline) takes over for skinny GEMMs. cuBLAS picks the
fastest tile per shape, as the min does.
"""
from __future__ import annotations

import math
from functools import lru_cache

from pipesim.presets.gpus import SPLIT_K, SPLIT_K_EFFICIENCY, TILE_FILL_K, TILES

BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def _raw_time(m: float, n: float, k: float, batch: float, sms: int, per_sm: float, fill_per_sm: float,
              persistent: bool = True) -> float:
    """Fastest tile / split-K choice: whole waves of tiles plus the pipeline fill -- once per SM
    for persistent kernels (Hopper/Blackwell warp-specialized GEMMs prefetch the next tile during
    the previous epilogue: CUTLASS 3 "persistent" kernel schedules), once per wave otherwise
    (Volta/Ampere kernels launch one CTA per tile)."""
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
            best = min(best, t)
    return best


@lru_cache(maxsize=4096)
def gemm_compute_time(m: float, n: float, k: float, batch: float, sms: int, mamf: float, fill_rate: float,
                      best_shape: tuple, persistent: bool = True) -> float:
    """Seconds of tensor-core work for `batch` GEMMs of M x N x K. `mamf` is the published
    achievable FLOP/s of the dtype, measured at `best_shape` (M, N, K): the per-SM rate is set
    so that the model returns exactly `mamf` there. `fill_rate` (FLOP/s) times the pipeline fill."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return 0.0
    bm, bn, bk = best_shape
    nominal = _raw_time(bm, bn, bk, 1, sms, mamf / sms, fill_rate / sms, persistent)
    scale = nominal / (2 * bm * bn * bk / mamf)     # >= 1: losses the model sees at the best shape
    t = _raw_time(m, n, k, batch, sms, mamf * scale / sms, fill_rate * scale / sms, persistent)
    # the MAMF is the best any shape reached: no shape runs faster
    return max(t, 2 * m * n * k * batch / mamf)


def gemm_bytes(m: float, n: float, k: float, dtype: str, batch: float = 1, out_bytes: int = 2) -> float:
    """Operands read once, the output written once (16-bit output unless fp32)."""
    e = BYTES[dtype]
    out = 4 if dtype in ("fp32", "tf32") else out_bytes
    return batch * ((m * k + k * n) * e + m * n * out)
