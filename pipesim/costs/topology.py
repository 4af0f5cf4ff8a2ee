"""Where ranks sit: the rank mapping (Megatron order by default: tensor innermost, then context,
then data, then pipeline) and the placement of each communicator on nodes."""
from __future__ import annotations

import math

from pipesim.costs.collectives import GroupPlacement, Link
from pipesim.costs.nccl_channels import capped_link, capped_placement
from pipesim.costs.pods import p2p_factor, ring_factor
from pipesim.costs.tensor_parallel import tensor_split
from pipesim.scenario.config import Scenario


def dim_sizes(s: Scenario) -> dict[str, int]:
    return {"tp": s.parallel.tensor, "cp": s.parallel.context, "dp": s.parallel.data, "pp": s.parallel.pipeline}


def rank_order(s: Scenario) -> list[str]:
    """Dimensions innermost first. Context parallelism exchanges K/V every layer, so when the
    order does not name `cp` it goes right after `tp`: CP ranks share an NVLink island first
    (Megatron-Core's default order tp-cp-ep-dp-pp, parallel_state.initialize_model_parallel)."""
    dims = s.parallel.rank_order.split("-")
    if "cp" not in dims:
        dims.insert(dims.index("tp") + 1, "cp")
    return dims


def strides(s: Scenario) -> dict[str, int]:
    """Global-rank stride of each parallel dimension, innermost first per `rank_order`."""
    sizes, out, stride = dim_sizes(s), {}, 1
    for dim in rank_order(s):
        out[dim] = stride
        stride *= sizes[dim]
    return out


def coords(s: Scenario, rank: int) -> dict[str, int]:
    sizes, st = dim_sizes(s), strides(s)
    return {dim: (rank // st[dim]) % sizes[dim] for dim in sizes}


def rank_of(s: Scenario, tp: int = 0, dp: int = 0, pp: int = 0, cp: int = 0) -> int:
    st = strides(s)
    return tp * st["tp"] + cp * st["cp"] + dp * st["dp"] + pp * st["pp"]


def node_of(s: Scenario, rank: int) -> int:
    return rank // s.system.gpus_per_node


def island_of(s: Scenario, rank: int) -> int:
    """NVLink domain of a rank: its node, or a rack-wide domain (NVL72) spanning several trays."""
    return rank // s.system.island


def links(s: Scenario, node: int | None = None) -> tuple[Link, Link]:
    """Effective (intra, inter) links; `node` applies a per-node inter-node override."""
    sysc = s.system
    intra = Link(sysc.intra_node.effective_bandwidth, sysc.intra_node.latency)
    inter_bw = sysc.inter_node.bandwidth
    if node is not None and node in sysc.heterogeneity.node_inter_bandwidth:
        inter_bw = sysc.heterogeneity.node_inter_bandwidth[node]
    return intra, Link(inter_bw * sysc.inter_node.efficiency, sysc.inter_node.latency)


def group_stride_size(s: Scenario, group: str) -> tuple[int, int]:
    st = strides(s)
    if group in ("tp", "cp", "dp", "pp"):
        return st[group], dim_sizes(s)[group]
    if group in ("cp_a2a", "cp_ring"):
        # hierarchical CP: all-to-all groups of adjacent CP ranks, a ring across them
        a2a, ring = s.parallel.context_levels
        return (st["cp"], a2a) if group == "cp_a2a" else (st["cp"] * a2a, ring)
    split = tensor_split(s.parallel)
    q = split.q
    # 2D/2.5D/3D axes inside the tensor group: row (contiguous), column (stride q), depth (q*q).
    sub = {"tp_row": (1, q), "tp_col": (q, q), "tp_depth": (q * q, split.depth if split.mode == "2.5d" else q)}
    inner, size = sub[group]
    return st["tp"] * inner, size


def placement(s: Scenario, group: str) -> GroupPlacement:
    """Placement of a communicator (assumed the same for every instance of the group).
    "dp_cp": the gradient group of data x context parallelism (CP ranks hold the same weights)."""
    if group == "dp_cp":
        return capped_placement(s, group, joint_placement(s, ("cp", "dp")))
    stride, size = group_stride_size(s, group)
    gpn = s.system.island          # GPUs on one NVLink fabric: "intra" below means NVLink
    per_node = 1 if stride >= gpn else min(size, math.ceil(gpn / stride))
    intra, inter = links(s)
    if s.system.pod_gpus:
        inter = scaled(inter, ring_factor(s, [i * stride for i in range(size)]))
    return capped_placement(s, group, GroupPlacement(size=size, per_node=per_node, intra=intra, inter=inter,
                                                     nvls=nvls_of(s, size, per_node)))


def nvls_of(s: Scenario, size: int, per_node: int) -> float:
    """NVLink SHARP's all-reduce bus bandwidth for a group that is one whole node, as it was
    measured (presets/systems.py), else 0: other groups keep the ring."""
    nvls = s.system.intra_node.nvls
    return nvls if nvls and size == per_node == s.system.gpus_per_node else 0.0


def scaled(link: Link, factor: float) -> Link:
    """`link` at `factor` of its rate (a pod's share of an oversubscribed layer, costs/pods.py)."""
    return link if factor >= 1 else Link(link.bandwidth * factor, link.latency)


def joint_placement(s: Scenario, dims: tuple[str, ...]) -> GroupPlacement:
    """Placement of the group spanned by several dimensions (the one holding rank 0): its size
    and how many of its members share an NVLink fabric (the node, or an NVLink domain spanning
    trays, as `placement` counts them)."""
    sizes, st, gpn = dim_sizes(s), strides(s), s.system.island
    members = [0]
    for dim in dims:
        members = [r + i * st[dim] for r in members for i in range(sizes[dim])]
    per_node = sum(1 for r in members if r < gpn)
    intra, inter = links(s)
    return GroupPlacement(size=len(members), per_node=max(1, per_node), intra=intra,
                          inter=scaled(inter, ring_factor(s, members)),
                          nvls=nvls_of(s, len(members), max(1, per_node)))


def p2p_link(s: Scenario, src: int, dst: int) -> Link:
    intra, inter = links(s, node_of(s, src))
    if island_of(s, src) == island_of(s, dst):
        return capped_link(s, "pp", intra)      # the pipeline's send / recv: the "pp" communicator
    _, inter_dst = links(s, node_of(s, dst))
    factor = p2p_factor(s, src, dst, pod_senders(s, src, dst)) if s.system.pod_gpus else 1.0
    return Link(min(inter.bandwidth, inter_dst.bandwidth) * factor, inter.latency)


def pod_senders(s: Scenario, src: int, dst: int) -> int:
    """GPUs of `src`'s pod that send across pods at this stage boundary at once (the pipeline
    sends of one boundary run together in a schedule's steady state): the ranks of the pod at
    `src`'s pipeline coordinate whose peer, the same offset away, lies in another pod."""
    size, st, P = s.system.pod_gpus, strides(s)["pp"], s.parallel.pipeline
    start, shift, k = src // size * size, dst - src, coords(s, src)["pp"]
    end = min(start + size, s.num_gpus)            # the last pod may be partial
    count = 0
    for block in range(start // (st * P) * st * P, end, st * P):
        lo, hi = max(block + k * st, start), min(block + k * st + st, end)
        if lo < hi:                     # [lo, hi) sends to [lo + shift, hi + shift): the part outside the pod
            inside = max(0, min(hi + shift, end) - max(lo + shift, start))
            count += (hi - lo) - inside
    return count


def stage_link(s: Scenario, stage_rank: int, next_rank: int, dp: int = 0, tp: int = 0) -> Link:
    """Link between pipeline ranks `stage_rank` and `next_rank` (same dp/tp coordinate)."""
    return p2p_link(s, rank_of(s, tp=tp, dp=dp, pp=stage_rank), rank_of(s, tp=tp, dp=dp, pp=next_rank))
