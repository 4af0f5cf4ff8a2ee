"""Sharding replicas (`training.zero_replicas`): hybrid sharded data parallelism.

The gradient group (data x context) splits into R replicas of consecutive ranks; each replica
shards the ZeRO states over its own (data·context)/R ranks, and the replicas hold the same
shards. Megatron-Core `--num-distributed-optimizer-instances` (parallel_state.py: the intra-instance
groups are consecutive slices of the data-parallel-with-CP ranks; param_and_grad_buffer.py
start_grad_sync: each bucket is reduce-scattered over the intra-instance group, then its shard is
all-reduced over the inter-instance group, one after the other; the parameter all-gather stays
inside the instance), PyTorch FSDP's HSDP and torchtitan's data_parallel_replicate_degree
(all-gathers inside the shard group, reduce-scatter there plus an all-reduce across replicas).
"""
from __future__ import annotations

from pipesim.costs.collectives import GroupPlacement, collective_time


def shard_size(group_size: int, replicas: int) -> int:
    """Ranks one ZeRO shard set spans."""
    return max(1, group_size // max(1, replicas))


def replica_split(group: GroupPlacement, replicas: int) -> tuple[GroupPlacement, GroupPlacement]:
    """(shard group, replica group) of `group` split into `replicas` consecutive slices: a slice
    keeps the group's members per node up to its size; the replica group takes one rank of each
    slice, so several share a node only when a slice is smaller than the node's share."""
    n = shard_size(group.size, replicas)
    shard = GroupPlacement(n, min(n, group.per_node), group.intra, group.inter)
    replica = GroupPlacement(replicas, max(1, group.per_node // n), group.intra, group.inter)
    return shard, replica


def zero_collective_time(kind: str, nbytes: float, group: GroupPlacement, replicas: int,
                         algorithm: str = "auto") -> float:
    """Seconds of one ZeRO collective of `nbytes` (the whole buffer) over the gradient `group`:
    with replicas, all-gathers run inside the shard group, and a reduce-scatter is followed by the
    all-reduce of its 1/n shard across the replicas. An all-reduce (no sharding) spans the group."""
    if replicas <= 1 or kind == "all_reduce":
        return collective_time(kind, nbytes, group, algorithm)
    shard, replica = replica_split(group, replicas)
    sec = collective_time(kind, nbytes, shard, algorithm)
    if kind == "reduce_scatter":
        sec += collective_time("all_reduce", nbytes / shard.size, replica, algorithm)
    return sec
