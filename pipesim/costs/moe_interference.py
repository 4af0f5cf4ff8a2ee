"""How much slower compute runs while communication kernels hold SMs: an overlapped all-to-all's
(below) or an overlapped NCCL collective's (sim/interference.py).

With the A2A overlap (pipesim/sim/a2a_overlap.py) the dispatcher's kernels of one micro-batch
run on a communication stream beside the compute of the paired one. DeepEP's normal kernels are
persistent: each holds `num_sms` SMs for the whole transfer (deepseek-ai/DeepEP README, "SM
number control"; Megatron-Core's default `moe_deepep_num_sms = 20`; DeepSeek-V3, arXiv
2412.19437 Sec. 3.2.2: 20 of the H800's 132 SMs for communication). The compute beside them
gets the rest:

* GEMMs: cuBLAS's Hopper kernels are persistent, launched with one CTA per SM of the whole
  device (an H100 GEMM of [2500 x 5120] x [5120 x 5120], 400 tiles, launches 132 CTAs; NVIDIA
  developer forum, "Active SMs doesn't hit 100 % even there are enough blocks", 2025), each CTA
  walking a fixed stride of output tiles, and one CTA fills an SM (the warp-specialized kernels
  take the SM's shared memory: NVIDIA/cutlass media/docs/efficient_gemm.md). The CTAs that find
  no free SM start only when a running one ends, a second wave of the whole kernel: measured on
  H100, a GEMM of 132 CTAs beside an NCCL all-gather of 24 CTAs took nearly twice as long, 80 %
  -> 47 % MFU (NVIDIA developer forum, "Compute-communication overlap causes severe GEMM
  performance degradation because of tail effect", 2025). Transformer Engine asks cuBLAS for
  fewer SMs only with NVTE_EXT_MARGIN_SM (transformer_engine/pytorch/csrc/extensions/gemm.cpp:
  `sm_count - getenv("NVTE_EXT_MARGIN_SM", sm_count)` = 0, i.e. the whole device, by default),
  which the Megatron MoE model zoo's overlap runs do not set (sbatch_benchmarking.sh sets only
  NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=24 and CUDA_DEVICE_MAX_CONNECTIONS=32). `cta_makespan`
  schedules the CTAs greedily on the free SMs; the slowdown is its ratio to the whole device.
  Blackwell's persistent GEMMs take tiles by cluster launch control, so a late CTA takes fewer
  (presets/gpus.py `clc`): scheduled as one CTA per tile, no second wave.
* Everything else (attention, normalisation, element-wise and copy kernels, many short CTAs):
  runs on the free SMs at their share, SMs / (SMs − held).
Not modelled: the HBM bandwidth the copy kernels take (DeepEP's ~50 GB/s of RDMA plus its NVLink
forwarding is a few % of H100's 3.35 TB/s), a communication kernel that waits for a running
persistent GEMM to leave SMs free (kernels are 0.1 ms against 1 ms transfers), and NCCL's
all-to-all channels (the alltoall dispatcher holds no SMs here: its channel count is NCCL's
tuning).
"""
from __future__ import annotations

import heapq
import math
from functools import lru_cache

from pipesim.costs.moe_dispatch import dispatcher_sms
from pipesim.costs.ops import Op

# The output tile of cuBLAS's Hopper BF16 GEMMs: 256 x 128 (the nvjet kernels are named
# `nvjet_hsh_256x128_...`; CUTLASS 3 Hopper's largest tile, pipesim/presets/gpus.py TILES).
GEMM_TILE = (256, 128)


def comm_sms(s) -> int:
    """SMs the all-to-all kernels hold while they run: the fused dispatchers' (costs/moe_dispatch.py;
    DeepEP V2's README: "For V3-like legacy training, SM usage reduced from 24 to 4 - 6"); NCCL's
    all-to-all none (not modelled)."""
    return dispatcher_sms(s)


def gemm_tiles(m: float, n: float) -> int:
    """Output tiles of one M x N GEMM, the tile turned whichever way gives fewer."""
    a, b = GEMM_TILE
    return min(math.ceil(m / a) * math.ceil(n / b), math.ceil(m / b) * math.ceil(n / a))


@lru_cache(maxsize=4096)
def cta_makespan(tiles: int, kernels: int, sms: int, free: int, persistent: bool) -> int:
    """Tile-times until `kernels` concurrent GEMMs of `tiles` tiles each end when only `free` of
    the device's `sms` SMs take their CTAs. A persistent kernel launches min(tiles, sms) CTAs, CTA i
    doing tiles i, i + grid, ...; otherwise one CTA per tile. The CTAs go, in launch order, to the
    SM that frees first."""
    if tiles <= 0 or kernels <= 0:
        return 0
    grid = min(tiles, sms) if persistent else tiles
    work = [math.ceil((tiles - i) / grid) for i in range(grid)] * kernels
    if free >= len(work):
        return max(work)
    ends = [0] * max(1, free)
    for w in work:
        heapq.heapreplace(ends, ends[0] + w)
    return max(ends)


def gemm_slowdown(m: float, n: float, batch: float, sms: int, held: int, persistent: bool,
                  margin: int = 0) -> float:
    """Time of `batch` concurrent M x N GEMMs with `held` SMs taken / time alone, each GEMM's grid
    sized for all SMs but `margin` (training.gemm_sm_margin: cuBLASLt's SM count target)."""
    tiles, kernels, grid = gemm_tiles(m, n), max(1, math.ceil(batch)), sms - margin
    alone = cta_makespan(tiles, kernels, grid, sms, persistent)
    return cta_makespan(tiles, kernels, grid, sms - held, persistent) / alone if alone else 1.0


def curve_gemm_slowdown(cm, m: float, n: float, batch: float, held: int) -> float:
    """gemm_slowdown on the cost model's GPU: a late CTA of a static persistent kernel walks its
    whole stride; Blackwell's CLC hands the late CTAs fewer tiles, as one CTA per tile would
    (presets/gpus.py `clc`)."""
    curve = cm.curve
    static = curve["persistent"] and not curve.get("clc")
    return gemm_slowdown(m, n, batch, curve["sms"], held, static, cm.gemm_sm_margin)


def op_seconds_beside_comm(cm, op: Op, phase: str, held: int, alone: float | None = None) -> tuple[float, float]:
    """(seconds alone, seconds while `held` SMs are taken) of one op: GEMMs on the cost model's
    GEMM curve by their CTA schedule, the rest at the free SMs' share. `alone`: the op's time
    alone when the caller has it already (cm.time)."""
    if alone is None:
        alone = cm.time(op, phase).seconds
    curve = cm.curve
    sms = curve["sms"] if curve else 0
    if not held or not sms or held >= sms:
        return alone, alone
    share = sms / (sms - held)
    gemms = op.gemms_fwd if phase == "fwd" else op.gemms_bwd
    if not gemms or op.flash:
        return alone, alone * share
    parts = [(cm.gemm_time(*g), curve_gemm_slowdown(cm, g[1], g[2], g[0], held)) for g in gemms]
    total = sum(t for t, _ in parts)
    if total <= 0:
        return alone, alone * share
    return alone, alone * sum(t * r for t, r in parts) / total


def overlap_slowdown(s, cm, ops: list[Op], phase: str, held: int | None = None) -> float:
    """Time of `ops` beside a communication kernel holding `held` SMs (default: the all-to-all
    dispatcher's) / time alone (1 = no interference)."""
    if held is None:
        held = comm_sms(s)
    pairs = [op_seconds_beside_comm(cm, o, phase, held) for o in ops]
    alone = sum(a for a, _ in pairs)
    return sum(b for _, b in pairs) / alone if alone > 0 else 1.0
