"""Compute slowed beside the data-parallel stream's collectives, in both timing paths.

An overlapped gradient reduce-scatter / all-reduce or ZeRO-3 weight all-gather runs as NCCL ring
channels, one CTA per channel on an SM of its own, for as long as it runs; a compute kernel
launched meanwhile gets the other SMs (costs/nccl_channels.py dp_collective_sms counts them,
costs/moe_interference.py times the ops on what is left: StageCosts.dp_overlap_slow_*). A compute
action that took `d` seconds alone, with collectives reserved over part of it, runs at that ratio
over the overlapped part: it ends (ratio - 1) x overlap later. The overlap is taken over the
action's own nominal span [start, start + d), from the collectives reserved by then (a
reservation starting inside that span was made by its start), so the engine and the DAG pass
compute it from the same intervals; the extension itself is not re-examined (its length is a
fraction of the overlap).
"""
from __future__ import annotations


def lost_seconds(interval_lists, start: float, end: float, ratio: float) -> float:
    """Seconds a compute action over [start, end) loses at `ratio` beside the busy intervals of
    `interval_lists` (each in time order, non-overlapping, a later list after an earlier one's
    intervals: walked newest first, so the sum has one order in both timing paths)."""
    overlap = 0.0
    for ivs in interval_lists:
        for i in range(len(ivs) - 1, -1, -1):
            a, b = ivs[i]
            if b <= start:
                return overlap * (ratio - 1.0)
            lo = a if a > start else start
            hi = b if b < end else end
            if hi > lo:
                overlap += hi - lo
    return overlap * (ratio - 1.0)


def add_busy(busy: list, start: float, end: float, joins: bool) -> None:
    """Log a collective's interval; `joins`: a later bucket of the same gradient job, merged with
    the previous interval when back to back (the DAG pass keeps a job's buckets as such runs)."""
    if joins and busy and busy[-1][1] == start:
        busy[-1] = (busy[-1][0], end)
    else:
        busy.append((start, end))
