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
