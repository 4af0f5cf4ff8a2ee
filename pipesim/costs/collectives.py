"""α-β cost of point-to-point transfers and collectives.

n GPUs, B bytes (the full buffer: the all-reduced tensor, the all-gather output, the
reduce-scatter input), α latency per message, β = 1/bandwidth per byte (per GPU, per direction):
  ring all-reduce      2(n-1)α + 2(n-1)/n · B β     Patarasuk & Yuan 2009, "Bandwidth optimal
                                                      all-reduce algorithms", Sec. 3; Thakur et al. 2005
  ring all-gather      (n-1)α + (n-1)/n · B β       Thakur, Rabenseifner & Gropp 2005, Sec. 4.1
  ring reduce-scatter  (n-1)α + (n-1)/n · B β       ibid., Sec. 4.4
  all-to-all (pairwise)(n-1)α + (n-1)/n · B β       ibid., Sec. 4.5
  tree all-reduce      2⌈log2 n⌉α + 2 B β           double binary tree, Sanders, Speck & Träff 2009
                                                      (pipelined reduce + broadcast at full bandwidth)
  broadcast (pipelined)⌈log2 n⌉α + B β              ibid.
  hierarchical AR      intra RS + inter AR on B/k + intra AG, k GPUs of the group per node
                                                      (Goyal et al. 2017; Jia et al. 2018 "Highly
                                                      scalable DL training system", Sec. 3.2)
A group inside a node uses the NVLink/PCIe bandwidth. A ring, reduce-scatter or all-gather over
a group that spans nodes is NCCL's ring (`ring_time`): one ring through all n ranks, the k
members of a node chained over NVLink and the ring crossing to the next node through a NIC.
NCCL splits the buffer over channels that cross on different NICs and runs every link at once
(the transfers are pipelined in chunks, not done phase after phase), so the time is set by the
slowest hop: a member's NVLink at the per-GPU bandwidth, or the node's NICs, which carry the
same 2(n-1)/n·B per direction for all k members together. With one NIC per GPU (DGX/HGX rails)
the per-rank bandwidth is min(NVLink, k x NIC) (nccl-tests doc/PERFORMANCE.md: "the bus
bandwidth should reflect the speed of the hardware bottleneck"; nccl-tests issue #119: 3 nodes
x 8 A100 with 4 HDR NICs each reach 96 GB/s bus bandwidth = 4 x 24 GB/s, the maintainer's
target, not the 12 GB/s per GPU of a per-GPU-NIC bottleneck; issue #309: DGX H100 nodes with
8 x 400G reach ~380 GB/s across hosts = 8 x ~48 GB/s). Latency follows NCCL's tuning model
(src/graph/tuning.cc, ncclTopoTuneModel): of the ring's steps, the 2(N-1) (all-reduce) or N-1
(reduce-scatter / all-gather) that cross between N nodes pay the network latency, the others
the NVLink latency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ALGORITHMS = ("ring", "tree", "hierarchical", "auto")
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


@dataclass(frozen=True)
class Link:
    bandwidth: float      # effective bytes/s per GPU per direction
    latency: float        # seconds


@dataclass(frozen=True)
class GroupPlacement:
    """A communicator of `size` GPUs with `per_node` of them on each node."""
    size: int
    per_node: int
    intra: Link
    inter: Link
    nvls: float = 0.0     # NVLink SHARP all-reduce bus bandwidth, bytes/s, on a whole 8-GPU node; 0: none

    @property
    def nodes(self) -> int:
        return max(1, self.size // max(1, self.per_node))

    @property
    def bottleneck(self) -> Link:
        if self.nodes == 1:
            return self.intra
        return Link(min(self.intra.bandwidth, self.inter.bandwidth), max(self.intra.latency, self.inter.latency))


def p2p_time(nbytes: float, link: Link) -> float:
    """One message: α + B β."""
    if nbytes <= 0:
        return 0.0
    return link.latency + nbytes / link.bandwidth


def flat_time(kind: str, nbytes: float, n: int, link: Link, algorithm: str) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    a, beta = link.latency, 1.0 / link.bandwidth
    steps = math.ceil(math.log2(n))
    if kind == "all_reduce":
        if algorithm == "tree":
            return 2 * steps * a + 2 * nbytes * beta
        return 2 * (n - 1) * a + 2 * (n - 1) / n * nbytes * beta
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) * a + (n - 1) / n * nbytes * beta
    if kind == "broadcast":
        return steps * a + nbytes * beta
    raise ValueError(f"unknown collective {kind!r}; known: {', '.join(KINDS)}")


def collective_time(kind: str, nbytes: float, group: GroupPlacement, algorithm: str = "auto") -> float:
    """Seconds for one collective on `group`; "auto" takes the faster of NCCL's algorithms (ring,
    and tree for all-reduce), as NCCL's tuner aims to (src/graph/tuning.cc). "hierarchical" (a
    framework-level two-level scheme, phases one after another) is chosen only when asked: NCCL
    does not run it, and over 2 nodes it would beat the NIC-aggregate bus bandwidth that NVIDIA
    gives as the target (nccl-tests issue #119, 4 x 24 GB/s)."""
    n = group.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown collective algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if algorithm == "auto":
        options = ["ring", "tree"] if kind == "all_reduce" else ["ring"]
        best = min(collective_time(kind, nbytes, group, alg) for alg in options)
        if kind == "all_reduce" and group.nvls:
            # NVLS: the measured bus bandwidth (busbw = algbw 2(n-1)/n, nccl-tests PERFORMANCE.md)
            # after NCCL's NVLS latency (src/graph/tuning.cc: 25 us on NVLink, Simple protocol);
            # NCCL's tuner takes it where it is faster, for large messages
            best = min(best, NVLS_LATENCY_S + 2 * (n - 1) / n * nbytes / group.nvls)
        return best
    if algorithm == "hierarchical" and group.nodes > 1 and group.per_node > 1:
        return hierarchical_time(kind, nbytes, group)
    if algorithm == "tree" and kind != "all_reduce":
        algorithm = "ring"    # trees are NCCL's all-reduce algorithm only
    if algorithm == "ring" and group.nodes > 1 and kind in RING_KINDS:
        return ring_time(kind, nbytes, group)
    return flat_time(kind, nbytes, n, group.bottleneck, algorithm)


RING_KINDS = ("all_reduce", "all_gather", "reduce_scatter")
NVLS_LATENCY_S = 25e-6


def ring_time(kind: str, nbytes: float, group: GroupPlacement) -> float:
    """NCCL's ring over a group that spans nodes (module docstring): the bandwidth term at the
    slowest hop, min(NVLink per GPU, per_node x NIC), and the latency term with NCCL's split of
    steps into network hops (2(N-1) for an all-reduce, N-1 otherwise) and NVLink hops."""
    n, nodes = group.size, group.nodes
    # nccl-tests doc/PERFORMANCE.md: all-reduce moves 2(n-1)/n·B per rank, RS / AG (n-1)/n·B
    hops, inter_hops = (2 * (n - 1), 2 * (nodes - 1)) if kind == "all_reduce" else (n - 1, nodes - 1)
    per_rank = min(group.intra.bandwidth, group.per_node * group.inter.bandwidth)
    # NCCL src/graph/tuning.cc: latency += (nsteps - nInterSteps)·intraLat + nInterSteps·interLat
    latency = (hops - inter_hops) * group.intra.latency + inter_hops * group.inter.latency
    return latency + hops / n * nbytes / per_rank


def hierarchical_time(kind: str, nbytes: float, group: GroupPlacement) -> float:
    k, nodes = group.per_node, group.nodes
    if kind == "all_reduce":
        return (flat_time("reduce_scatter", nbytes, k, group.intra, "ring")
                + flat_time("all_reduce", nbytes / k, nodes, group.inter, "ring")
                + flat_time("all_gather", nbytes, k, group.intra, "ring"))
    # all-gather / reduce-scatter: the k GPUs of a node each carry 1/k of the inter-node phase
    # over their own NIC (rails), then the node finishes inside NVLink.
    rails = Link(group.inter.bandwidth * k, group.inter.latency)
    return flat_time(kind, nbytes, nodes, rails, "ring") + flat_time(kind, nbytes, k, group.intra, "ring")
