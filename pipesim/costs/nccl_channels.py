"""A communicator's NCCL channel cap (`training.nccl_max_ctas`, Megatron-Core's
--nccl-communicator-config-path: per process group `max_ctas`, NCCL's ncclConfig_t.maxCTAs).

NCCL runs one CTA per channel, and a CTA's copies move a bounded rate over NVLink: NCCL launches
two CTAs per NVLink to saturate it for large messages (NVIDIA/nccl issue #1703, maintainer,
2025-05-07), whose effective bandwidth NCCL takes as SMxx_NVLINK_BW per link and direction
(src/graph/topo.h at NVIDIA/nccl 5067397c, 2026-06: 20.0 GB/s for Volta / Ampere, 20.6 for
Hopper, 40.1 for Blackwell). So one CTA carries half a link: 10 GB/s on A100, whose 24 CTAs over
12 NVLinks (issue #1225) give its 240 GB/s, 10.3 on H100 (36 for its 18 links, 370 GB/s: issue
#212, "NCCL can get an effective NVLink bandwidth of 370GB/s"). A communicator limited to C CTAs
moves at most C of those shares over NVLink, and its ring leaves a node (NVLink domain) through
at most C NICs, one per channel. MLPerf's NeMo submissions (v3.1 to v5.1) cap the gradient groups
at 8 CTAs, TP at 8, CP at 1 and the pipeline's P2P at 2 (conf/nccl/custom_communicator_cta.yaml),
to leave SMs to the compute the collectives overlap. NCCL_MAX_CTAS in the environment overrides
every communicator's cap (src/init.cc since 2.17): such a run's caps are that value.
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.collectives import GroupPlacement, Link

# NVIDIA/nccl src/graph/topo.h, effective NVLink bandwidth per link (GB/s, one direction), by GPU
NVLINK_LINK_GBPS = {"v100": 20.0, "a100": 20.0, "h100": 20.6, "h800": 20.6, "h200": 20.6,
                    "b200": 40.1, "gb200": 40.1, "b300": 40.1, "gb300": 40.1}
CTAS_PER_NVLINK = 2            # NVIDIA/nccl issue #1703
# pipesim's groups -> the communicator names of Megatron-Core's config file
COMMUNICATOR = {"tp": "tp", "tp_row": "tp", "tp_col": "tp", "tp_depth": "tp", "cp": "cp", "cp_a2a": "cp",
                "cp_ring": "cp", "dp": "dp", "dp_cp": "dp_cp", "pp": "pp"}


def max_ctas(s, group: str) -> int:
    """The CTA cap of pipesim group `group` (0: NCCL's own channel count). The gradient group
    falls back on `dp`'s cap: Megatron's data x context group is the data group when CP is 1."""
    caps = s.training.nccl_max_ctas
    name = COMMUNICATOR.get(group)
    if name is None or (name == "tp" and s.training.overlap_tp_comm):
        return 0
    return caps.get(name, caps.get("dp", 0) if name == "dp_cp" else 0)


def cta_bandwidth(s) -> float:
    """Bytes/s one CTA moves over NVLink on this GPU (0 where NCCL's constant is not known)."""
    gbps = NVLINK_LINK_GBPS.get(s.system.gpu.kernel_curve or "", 0.0)
    return gbps * 1e9 / CTAS_PER_NVLINK


def capped_link(s, group: str, link: Link) -> Link:
    """An NVLink `link` of `group` at most its CTA cap's share."""
    ctas, per = max_ctas(s, group), cta_bandwidth(s)
    if not ctas or not per or link.bandwidth <= ctas * per:
        return link
    return Link(ctas * per, link.latency)


def capped_placement(s, group: str, g: GroupPlacement) -> GroupPlacement:
    """`g` under its communicator's CTA cap: NVLink at most C CTAs' share, and a ring that
    leaves a node through at most C of its members' NICs."""
    ctas = max_ctas(s, group)
    if not ctas:
        return g
    intra = capped_link(s, group, g.intra)
    nics = min(g.per_node, ctas)
    inter = g.inter if nics == g.per_node else Link(g.inter.bandwidth * nics / g.per_node, g.inter.latency)
    # no NVLS under a cap: the runs that cap CTAs also turn it off (MLPerf v5.1's NeMo configs,
    # config_common.sh: NCCL_NVLS_ENABLE=0 beside the communicators' CTA caps)
    return replace(g, intra=intra, inter=inter, nvls=0.0)


# --- how many CTAs a ring collective runs with (NCCL's own count, before any cap) -----------------
# NVIDIA/nccl at 5067397c: the ring graph's channel search (src/graph/search.cc ncclTopoCompute)
# takes the highest per-channel speed of its architecture's list that the path allows, and as many
# channels at that speed as the links carry, at most MAXCHANNELS / 2 = 32 (src/init.cc,
# src/include/device.h MAXCHANNELS 64); ncclTopoDupChannels then doubles them unless the speed is
# under 25 GB/s, or on sm_90+ under 50 GB/s with more than 4 channels; ncclTopoPostset doubles them
# once more (src/graph/connect.cc, "Duplication should be complete now": at most MAXCHANNELS). A
# large collective runs on all of them (src/enqueue.cc: the ring's channel count only falls for
# messages under nChannels x threads x threshold, kilobytes).
_INTRA_SPEEDS = {"base": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
                 "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
                 "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)}
_INTER_SPEEDS = {"base": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                          2.4, 1.2, 0.24, 0.12),
                 "sm90": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                          0.24, 0.12),
                 "sm100": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                           3.0, 2.4, 1.2, 0.24, 0.12)}
_ARCH = {"v100": "base", "a100": "base", "h100": "sm90", "h800": "sm90", "h200": "sm90",
         "b200": "sm100", "gb200": "sm100", "b300": "sm100", "gb300": "sm100"}   # Volta, Ampere: the base lists
# one NVLink's raw rate per direction (GB/s): NVLink 2-4 25, NVLink 5 50 (NVIDIA's datasheets: 6 /
# 12 / 18 links make V100's 150, A100's 300, H100's 450 GB/s; 18 make B200's 900)
_NVLINK_RAW_GBPS = {"base": 25.0, "sm90": 25.0, "sm100": 50.0}
RING_GRAPH_MAX_CHANNELS, MAX_CHANNELS = 32, 64


def ring_ctas(s, group: str, g: GroupPlacement) -> int:
    """CTAs (channels) NCCL runs a large ring collective of communicator `group`, placed as `g`,
    with: the channel search over NVLink inside one NVLink domain, else over the NICs of the
    group's members on a node (one per GPU, as the DGX and NVL72 presets have); then the two
    doublings; then the communicator's cap (`max_ctas`). 0 where NCCL's constants for the GPU are
    not known (no NVLink, CPU): no SMs counted."""
    curve = s.system.gpu.kernel_curve or ""
    arch = _ARCH.get(curve)
    if arch is None or s.system.intra_node.bandwidth <= 0:
        return 0
    nvlink = s.system.intra_node.bandwidth / 1e9 * NVLINK_LINK_GBPS[curve] / _NVLINK_RAW_GBPS[arch]
    if g.nodes == 1:
        speeds, path, lanes = _INTRA_SPEEDS[arch], nvlink, 1
    else:
        nic = s.system.inter_node.bandwidth / 1e9
        speeds, path, lanes = _INTER_SPEEDS[arch], min(nic, nvlink), g.per_node
    speed = next((v for v in speeds if v <= path), speeds[-1])
    n = min(RING_GRAPH_MAX_CHANNELS, lanes * max(1, int(path // speed)))
    if speed >= 25.0 and not (arch != "base" and speed < 50.0 and n > 4):
        n = min(2 * n, RING_GRAPH_MAX_CHANNELS)
    n = min(MAX_CHANNELS, 2 * n)
    cap = max_ctas(s, group)
    return min(n, cap) if cap else n


def dp_collective_sms(s, g: GroupPlacement) -> int:
    """SMs each overlapped collective of the gradient group (data x context, placed as `g`) holds
    while it runs: its ring's CTAs, one SM each (a CTA of NCCL_MAX_NTHREADS = 640 threads beside a
    GEMM's or attention kernel's CTA, which takes the SM's shared memory). 0 for a group of one or
    with training.collective_sm_contention off."""
    if g.size <= 1 or not s.training.collective_sm_contention:
        return 0
    return ring_ctas(s, "dp_cp", g)
