"""Seconds of the collectives a simulated rank runs over its data-parallel group (gradient
buckets, ZeRO all-gathers), memoised on the workload: what the engine and the DAG pass share."""
from __future__ import annotations

from pipesim.costs.param_gather import exposed_param_gather
from pipesim.costs.zero3_reuse import gradient_buckets, param_allgather_seconds
from pipesim.costs.zero_groups import zero_collective_time
from pipesim.sim.interference import lost_beside
from pipesim.sim.workload import Workload


def collective_seconds(w: Workload, kind: str, nbytes: float, pp: int, algorithm: str | None = None) -> float:
    key = (kind, nbytes, pp, algorithm)
    sec = w.cache.get(key)
    if sec is None:
        group, _ = w.dp_group[pp]
        # On a CPU system the gradient all-reduce is gloo's, timed by the calibration (the TP
        # all-reduce takes the same measured time: costs/stage.py comm_seconds)
        sec = None
        if kind == "all_reduce" and w.host_profile is not None:
            from pipesim.calibrate.host import host_collective_seconds
            sec = host_collective_seconds(w.host_profile, "all_reduce", nbytes, group.size)
        if sec is None:
            # with sharding replicas the ZeRO collectives run inside one replica (+ the all-reduce
            # across replicas after a reduce-scatter): pipesim/costs/zero_groups.py
            sec = zero_collective_time(kind, nbytes, group, w.scenario.training.zero_replicas,
                                       algorithm or w.scenario.parallel.collective)
        w.cache[key] = sec
    return sec


def bucket_seconds(w: Workload, stage: int, pp: int) -> float:
    """Seconds of one simulated gradient collective of `stage` over its DP group: the real buckets
    it stands for, each a collective of its own (Workload.bucket_time)."""
    nbytes, per = w.bucket_time[stage]
    return collective_seconds(w, w.grad_kind, nbytes, pp) * per


def param_gather_seconds(w: Workload, stages, pp: int) -> float:
    """The ZeRO-1/2 parameter all-gather of a rank's `stages` over its DP group, bucket by bucket
    (costs/zero3_reuse.py param_allgather_seconds)."""
    tr = w.scenario.training
    return sum(param_allgather_seconds(tr, w.stage_costs[st], lambda kind, n: collective_seconds(w, kind, n, pp))
               for st in stages)


def param_gather_exposed(w: Workload, g) -> float:
    """Seconds of gang `g`'s ZeRO-1/2 parameter all-gather its next step waits for: all of it
    without --overlap-param-gather; with it, what outlasts the forwards each chunk's gather runs
    under (costs/param_gather.py)."""
    if not w.scenario.training.overlap_param_gather:
        return param_gather_seconds(w, w.plan.stages_of(g.pp), g.pp)
    tr = w.scenario.training
    return exposed_param_gather([(param_gather_seconds(w, (st,), g.pp), start, forward,
                                  gradient_buckets(tr, w.stage_costs[st]))
                                 for st, start, forward in g.first_forwards])


def param_gather_contention(w: Workload, g) -> float:
    """Compute seconds gang `g` loses beside the part of its ZeRO-1/2 parameter all-gather that
    --overlap-param-gather hides under the next step's forwards: that part x (1 - 1 / the
    forwards' slowdown beside a collective), the fluid model of sim/interference.py (taken here,
    at the step's end, as the step it lengthens); all of it when their norm kernels wait for it."""
    tr = w.scenario.training
    if not tr.overlap_param_gather or w.zero_stage not in (1, 2):
        return 0.0
    stages = w.plan.stages_of(g.pp)
    passes = [(w.stage_costs[st].forward, w.stage_costs[st].dp_overlap_slow_fwd) for st in stages]
    stalls = any(w.stage_costs[st].dp_norm_waits_fwd for st in stages)
    if all(r <= 1.0 for _, r in passes) and not stalls:
        return 0.0
    return lost_beside(param_gather_seconds(w, stages, g.pp) - param_gather_exposed(w, g), passes, stalls)
