"""The fused MoE dispatchers' kernels: how many SMs they hold and how fast those SMs move tokens.

DeepEP's normal kernels and HybridEP (NVIDIA's hybrid-ep kernels in DeepEP, Megatron-Core's flex
dispatcher backend `hybridep`) copy tokens over NVLink with a fixed set of SMs, so within an
NVLink domain a dispatch or combine runs at the lower of the link's bandwidth and the rate those
SMs reach. Where a table of that rate is published, it is used (costs/moe.py a2a_costs takes the
slower of the two): on Blackwell, whose 900 GB/s NVLink 5 neither backend's SMs fill, HybridEP's
table and NVIDIA's measurement of DeepEP across an NVL72 domain. Elsewhere the link alone bounds the
time: DeepEP V1's own table is NVLink-bound (153 / 158 GB/s on H800's 160 GB/s, deepseek-ai/DeepEP
docs/legacy.md), no table is published for H100/H200's 450 GB/s, and DeepEP's internode kernels
(RDMA between NVLink domains, NVLink forwarding inside them) have no Blackwell figure
(benchmarks/moe_dispatch_rates.py prints the comparisons).

Rates are bytes received per rank per second, the rank's own tokens included (DeepEP's and
HybridEP's tests divide `nvl_recv_bytes`, every token the rank receives, by the kernel time).
"""
from __future__ import annotations

import numpy as np

from pipesim.costs.fp8 import BLACKWELL_CURVES

# SMs each backend's kernels run on unless `training.moe_dispatcher_sms` says: DeepEP, Megatron-Core's
# `moe_deepep_num_sms = 20` (megatron/core/transformer/transformer_config.py, 2025-26); HybridEP, 32:
# the HybridEPBuffer's own default (deepseek-ai/DeepEP hybrid-ep branch, deep_ep/hybrid_ep_buffer.py
# `num_sms_dispatch_api: int = 32`, `num_sms_combine_api: int = 32`), which Megatron-Core keeps when
# `moe_hybridep_num_sms` is None, and the value Megatron-Bridge's performance scripts set for every
# hybridep run (scripts/performance/utils/overrides.py `moe_hybridep_num_sms = 32`, v0.2.0-v0.6.0).
DEFAULT_SMS = {"deepep": 20, "hybridep": 32}
FUSED_DISPATCHERS = tuple(DEFAULT_SMS)       # one copy per destination rank (costs/moe.py a2a_costs)

# HybridEP intranode on GB200, deepseek-ai/DeepEP PR #420 ("Add HybridEP solution for normal mode
# intranode dispatch/combine", NVIDIA, 2025-09), its GB200 table, "Torch API" columns:
# ranks -> SMs -> (dispatch FP8, dispatch BF16, combine) GB/s. B200 / B300 / GB300 run the same
# NVLink 5 at the same 900 GB/s and take it (no table of their own is published).
HYBRIDEP_BLACKWELL = {
    8: {16: (248.86, 362.01, 310.21), 24: (350.97, 512.72, 425.95), 32: (447.76, 615.78, 519.57)},
    16: {16: (242.51, 328.80, 278.34), 24: (338.87, 442.47, 378.32), 32: (393.72, 520.76, 442.51)},
    24: {16: (258.33, 324.64, 126.53), 24: (351.05, 450.22, 163.62), 32: (405.04, 502.84, 207.10)},
}


# DeepEP's normal kernels over one Blackwell NVLink domain: NVIDIA's measurement in the Megatron-LM
# discussion "Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72" (NVIDIA/Megatron-LM
# docs/discussions/deepseek-v3-gb200-optimization, Sec. 2.2.1): EP 32 on GB200 NVL72 (multi-node
# NVLink, through the community PR deepseek-ai/DeepEP#218), 24 SMs, "the dispatch can only reach
# about 400 GB/s and the combine can only reach about 190 GB/s algorithm bandwidth". Its dispatch was
# BF16 (Megatron-Core did not dispatch MXFP8 then, Sec. 2.1.3); no FP8 dispatch figure is given, so
# FP8 dispatch takes the same bytes per second. One rank count only: every NVLink group takes it.
DEEPEP_BLACKWELL = {32: {24: (400.0, 400.0, 190.0)}}
# the published tables: (ranks -> SMs -> (dispatch FP8, dispatch BF16, combine) GB/s), Blackwell only
KERNEL_TABLES = {"hybridep": HYBRIDEP_BLACKWELL, "deepep": DEEPEP_BLACKWELL}


def dispatcher_sms(s) -> int:
    """SMs the fused dispatcher's kernels hold (0 for NCCL's all-to-all: not modelled)."""
    tr = s.training
    if tr.moe_dispatcher not in DEFAULT_SMS:
        return 0
    return tr.moe_dispatcher_sms or DEFAULT_SMS[tr.moe_dispatcher]


def kernel_rate(s, ranks: int, phase: str, elem_bytes: float, one_domain: bool = True) -> float | None:
    """Bytes/s per rank (received, own tokens included) the fused dispatcher's SMs reach for
    `phase` ("dispatch" / "combine") among `ranks` NVLink peers, or None where no table is
    published (NCCL all-to-all, either backend off Blackwell, DeepEP's internode kernels when the
    EP group spans NVLink domains: not `one_domain`): the link alone bounds it then. Between the
    measured SM counts the rate is linear; beyond them it is the nearest measured one's per-SM rate
    (the kernel's SMs are its copy engines). More ranks than the table's largest take its largest
    row, fewer its smallest."""
    table = KERNEL_TABLES.get(s.training.moe_dispatcher)
    if table is None or s.system.gpu.kernel_curve not in BLACKWELL_CURVES:
        return None
    if s.training.moe_dispatcher == "deepep" and not one_domain:
        return None
    row = table[max([r for r in table if r <= ranks] or [min(table)])]
    column = 2 if phase == "combine" else (0 if elem_bytes <= 1 else 1)
    sms = dispatcher_sms(s)
    counts, rates = zip(*sorted((n, r[column]) for n, r in row.items()))
    if sms < counts[0]:
        return rates[0] * sms / counts[0] * 1e9
    if sms > counts[-1]:
        return rates[-1] * sms / counts[-1] * 1e9
    return float(np.interp(sms, counts, rates)) * 1e9


def pace(s) -> dict | None:
    """What sets the expert all-to-all's pace inside the NVLink island, for the report: the fused
    kernels' SMs or the link (GB/s per rank, both counted as a2a_costs counts them, the rank's own
    tokens included); None without expert parallelism."""
    from pipesim.costs.moe_parallel import expert_placement
    if s.parallel.expert <= 1:
        return None
    g = expert_placement(s, "ep")
    per = g.per_node
    link = g.intra.bandwidth * per / (per - 1) if per > 1 else None     # None: no NVLink peers
    rates = [kernel_rate(s, per, phase, 2, one_domain=per >= s.parallel.expert) for phase in ("dispatch", "combine")]
    kernel = min(rates) if all(rates) else None
    bound = "kernel" if kernel is not None and link is not None and kernel < link else "link"
    return {"dispatcher": s.training.moe_dispatcher, "sms": dispatcher_sms(s), "link_Bps": link,
            "kernel_Bps": kernel, "bound": bound}
