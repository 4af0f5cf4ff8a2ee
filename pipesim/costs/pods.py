"""Pods: full-bisection network domains joined by an oversubscribed layer.

Large clusters are built from pods with full bisection inside, joined by a layer with less
capacity: Llama 3's 24K-GPU cluster has pods of 3,072 GPUs with full bisection and an
aggregation layer oversubscribed 1:7 between them, which is why its parallelism order puts the
least bandwidth-hungry dimension, data parallelism, outermost (Dubey et al. 2024, "The Llama 3
Herd of Models", Sec. 3.3.1 "Network" and Sec. 3.3.2). A pod of `pod_gpus` GPUs reaches the other
pods at U = pod_gpus · b / o (b: a GPU's inter-node rate, o: `pod_oversubscription`); every
instance of a communicator runs at once (the DP reductions of all tensor and pipeline
coordinates, the all-to-alls of all expert groups), so the pod's traffic toward the others
shares U. The factors below scale the inter-node rate of a communicator whose instance spans
pods (1 inside one pod, or without pods):

* ring and tree collectives: an instance with m members in a pod enters and leaves the pod once
  per ring; the pod holds pod_gpus / m instances, so each crossing gets U / (pod_gpus / m) =
  b · m / o: factor min(1, m / o);
* all-to-all: each member sends the share c = 1 − m/n of its bytes (n members) out of the pod,
  all of the pod's GPUs at once: those bytes run at min(1, 1 / (o · c)) of b, the rest of its
  inter-node bytes (the share 1 − k/n leaves its NVLink island of k members) at b; the factor is
  their byte-weighted harmonic mean;
* point-to-point between pipeline stages in different pods: every GPU of the pod holding the
  sending stage sends at once, min(1, pod_gpus / (o · senders)).
"""
from __future__ import annotations

from collections import Counter


def _pods(s):
    sysc = s.system
    if not sysc.pod_gpus or sysc.pod_oversubscription <= 1 or sysc.pod_gpus >= s.num_gpus:
        return None
    return sysc.pod_gpus, sysc.pod_oversubscription


def _fewest_per_pod(s, members) -> tuple[int, float] | None:
    """(members in the pod holding the fewest, oversubscription), or None inside one pod."""
    pods = _pods(s)
    if pods is None:
        return None
    size, over = pods
    per_pod = Counter(r // size for r in members)
    return (min(per_pod.values()), over) if len(per_pod) > 1 else None


def ring_factor(s, members) -> float:
    """Inter-node rate factor of a ring / tree communicator whose instance is `members`."""
    fewest = _fewest_per_pod(s, members)
    if fewest is None:
        return 1.0
    m, over = fewest
    return min(1.0, m / over)


def a2a_factor(s, members, per_island: int) -> float:
    """Inter-node rate factor of an all-to-all among `members`, `per_island` of them on one
    NVLink island (the pod holding the fewest members sets it)."""
    fewest = _fewest_per_pod(s, members)
    if fewest is None:
        return 1.0
    (m, over), n = fewest, len(members)
    cross = 1 - m / n                                    # share of a member's bytes leaving its pod
    inter = max(cross, 1 - per_island / n)               # share leaving its island (the inter link's)
    slow = min(1.0, 1 / (over * cross))
    share = cross / inter
    return 1 / ((1 - share) + share / slow)


def p2p_factor(s, src: int, dst: int, senders: int) -> float:
    """Inter-node rate factor of a send from `src` to `dst` while `senders` GPUs of the pod send
    across at once."""
    pods = _pods(s)
    if pods is None:
        return 1.0
    size, over = pods
    if src // size == dst // size:
        return 1.0
    return min(1.0, size / (over * max(1, senders)))
