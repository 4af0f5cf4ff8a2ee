"""Compute slowed beside the data-parallel stream's collectives, in both timing paths.

An overlapped gradient reduce-scatter / all-reduce or ZeRO-3 weight all-gather runs as NCCL ring
channels, one CTA on an SM of its own each, for as long as it runs; a compute kernel launched
meanwhile gets the other SMs (costs/nccl_channels.py dp_collective_sms counts them,
costs/moe_interference.py times the ops on what is left: StageCosts.dp_overlap_slow_*, the
compute's time beside a collective over its time alone). A compute action of `d` seconds alone
progresses at 1 / ratio while a collective runs and at 1 otherwise (a fluid model), over the
collectives reserved by its nominal end start + d: a reservation that starts inside that span was
made by its start, so the engine and the DAG pass see the same intervals; later reservations,
which only an action's extension could meet, are not waited for.

Transformer Engine's LayerNorm / RMSNorm kernels are persistent: all their CTAs must be resident
at once (they spin-wait on each other), on every SM but `training.norm_sm_margin`. Beside a
collective that holds more SMs than that margin, a norm kernel cannot start until the collective
ends, and the compute stream waits with it: "A common reason for DP communication overlap
failure" (NVIDIA Megatron-Bridge performance guide, docs/performance-guide.md, DP communication).
The fluid model then runs an action beside a collective only up to its next norm kernel (`stall`
seconds of its work apart, the first at its start) and holds it there until the collective ends.
"""
from __future__ import annotations

import math


def finish_time(interval_lists, start: float, work: float, ratio: float, stall: float = 0.0) -> float:
    """When a compute action of `work` seconds (alone) started at `start` ends, at 1 / `ratio` of
    its pace inside the busy intervals of `interval_lists` (each in time order, non-overlapping,
    every interval of a list after those of the lists before it). `stall` > 0: its norm kernels,
    that many seconds of its work apart from its start, wait inside an interval for its end."""
    tail = []                                 # the intervals ending after `start`, newest first
    for ivs in reversed(interval_lists):
        for i in range(len(ivs) - 1, -1, -1):
            if ivs[i][1] <= start:
                break
            tail.append(ivs[i])
        else:
            continue
        break
    t, done = start, 0.0                      # done: work finished so far
    for a, b in reversed(tail):
        if a > t:
            if work - done <= a - t:
                return t + work - done
            done += a - t
            t = a
        inside = (b - t) / ratio               # work done while the collective runs
        if stall > 0:                          # ... up to the next norm kernel, which waits
            inside = min(inside, max(0.0, math.ceil(done / stall - 1e-9) * stall - done))
        if work - done <= inside:
            return t + (work - done) * ratio
        done += inside
        t = b
    return t + work - done


def lost_beside(seconds: float, passes, stalls: bool = False) -> float:
    """Compute seconds lost beside `seconds` of collectives that run wholly under compute, the
    compute at 1 / ratio meanwhile: its ratio the mean of `passes` = [(pass seconds, ratio), ...]
    weighted by their seconds (the closed-form counterpart of `finish_time`). `stalls`: the
    compute's norm kernels wait for the collectives, so all of their time is lost (the few
    kernels up to the first norm are neglected)."""
    if stalls:
        return max(0.0, seconds)
    total = sum(sec for sec, _ in passes)
    ratio = sum(sec * r for sec, r in passes) / total if total > 0 else 1.0
    return seconds * (1.0 - 1.0 / ratio) if seconds > 0 and ratio > 1.0 else 0.0


def add_busy(busy: list, start: float, end: float, joins: bool) -> None:
    """Log a collective's interval; `joins`: a later bucket of the same gradient job, merged with
    the previous interval when back to back (the DAG pass keeps a job's buckets as such runs)."""
    if joins and busy and busy[-1][1] == start:
        busy[-1] = (busy[-1][0], end)
    else:
        busy.append((start, end))
