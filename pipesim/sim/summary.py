"""Per rank after a step, shared by the SimPy engine and the DAG pass (sim/dag.py): work
counters per (stage, kind), blocking TP and exposed all-to-all seconds, and the memory peak
replayed from the flat memory log. Memoised per plan row, as rows live with their cached plan."""
from __future__ import annotations

from collections import Counter
from operator import itemgetter

from pipesim.sim.memory import ChangeIds
from pipesim.sim.workload import Workload


def row_memo(cache: dict, steps, build):
    """build(steps), memoised per plan row: rows live as long as their cached plan, so a value
    derived from a row is computed once per plan, not once per simulation."""
    hit = cache.get(id(steps))
    if hit is not None and hit[0] is steps:
        return hit[1]
    if len(cache) > 65536:
        cache.clear()
    out = build(steps)
    cache[id(steps)] = (steps, out)
    return out


_COUNTS: dict = {}      # id(steps row) -> (row, its (key, stage, kind, compute, count) list)


_KEY = itemgetter(1)    # Step.key


def _count(steps) -> list:
    counts = Counter(map(_KEY, steps))
    one = dict(zip(map(_KEY, steps), steps))      # a step per key (all of a key share stage and kind)
    return [(key, one[key].stage, one[key].kind, one[key].compute, n) for key, n in counts.items()]


def step_counts(steps) -> list:
    """How often each (stage, kind) occurs in a plan row."""
    return row_memo(_COUNTS, steps, _count)


def work_of(steps, table) -> tuple[dict, float, float]:
    """(stage, kind) -> [count, seconds, bytes] of a rank's steps, its blocking TP seconds and the
    context-parallel part of them: every step runs once per step with its lowered duration (a
    send's wire time is its α-β time); a receive's TP seconds are its scatter/gather all-gather."""
    work: dict = {}
    tp = cp = 0.0
    for key, stage, kind, is_compute, n in step_counts(steps):
        c = table[key]
        if is_compute or kind in ("SEND_F", "SEND_B"):
            work[(stage, kind)] = [n, n * c.dur, 0.0 if is_compute else n * c.nbytes]
        if c is not None:
            tp += n * c.tp
            cp += n * c.cp
    return work, tp, cp


def flat_memory_logs(w: Workload, mems, gangs=None) -> None:
    """Keep each rank's memory log as flat (time, change id) lists, replayed with numpy
    (memory.py `_peak_flat`); the numbering lives with the workload, whose Costs carry their ids
    (mem0, mem1, buffer alloc, buffer free) across runs."""
    if w.change_ids is None:
        w.change_ids = ChangeIds()
    reg = w.change_ids
    for g in (gangs if gangs is not None else w.gangs):
        mems[g.id].flat = ([], [], reg)
        for c in g.table:
            if c is not None and c.ids is None:
                c.ids = (reg.id_of(c.mem0), reg.id_of(c.mem1), reg.id_of(c.buf_alloc), reg.id_of(c.buf_free))


def _exposed_a2a(row, table) -> float:
    """A rank's exposed all-to-all seconds (sim/a2a_overlap.py, imported for MoE plans only)."""
    if not any(c is not None and c.a2a_exposed for c in table):
        return 0.0
    from pipesim.sim.a2a_overlap import exposed_a2a
    return exposed_a2a(row, table)


def summarize(w: Workload, tls, mems, trace: bool, gangs=None) -> None:
    """Per rank after the run: work counters, TP seconds, memory peak (shared by sim/dag.py;
    `gangs` = the gangs `tls` and `mems` belong to, default all)."""
    per_row: dict = {}
    finished: dict = {}       # id(cost table) -> the last tracker finished with it
    for g, tl, mem in zip(gangs if gangs is not None else w.gangs, tls, mems):
        if id(g.table) not in per_row:
            per_row[id(g.table)] = work_of(g.steps, g.table), _exposed_a2a(g.steps, g.table)
        (tl.work, tl.tp_s, tl.cp_s), tl.a2a_s = per_row[id(g.table)]
        tl.work = {k: list(v) for k, v in tl.work.items()}
        twin = finished.get(id(g.table))
        if not trace and twin is not None and twin.same_flat_log(mem):
            mem.peak, mem.peak_by = twin.peak, dict(twin.peak_by)     # data-parallel replicas: one replay
        else:
            mem.finish(trace)
            finished[id(g.table)] = mem
        tl.peak_memory = mem.peak
        tl.peak_by_category = dict(mem.peak_by)
