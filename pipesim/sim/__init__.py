"""pipesim.sim: simulate one training step of a scenario with SimPy.

`simulate(scenario, mode="representative"|"full", trace=True|False, stage_costs=None, plan=None, engine_choice="auto")`
-> Report. Modules: workload (scenario + plan -> timed ops per rank), network (ports, transfers,
collectives), memory (per-rank memory timeline), dag (the exact event-free timing where it applies),
engine (the SimPy processes, the reference), summary (per-rank counters and memory peak, shared by both).
"""
from __future__ import annotations

from dataclasses import replace


def simulate(scenario, mode: str = "representative", trace: bool = True, stage_costs=None, plan=None,
             engine_choice: str = "auto", detail: bool = True):
    """Simulate one step. `trace=False` skips building TraceEvents/MemorySamples (sweeps);
    `stage_costs` / `plan` override the cost model's StageCosts and the scenario's schedule.
    `engine_choice`: "auto" times the step by the action DAG (sim/dag.py) where that is exact and
    with the SimPy engine otherwise; "simpy" always runs the engine. The report's `engine` says
    which ran ("dag" | "simpy"). `detail=False` (sweeps) leaves out what only a single run's report
    reads: per-rank `comm_busy_s` and the per-stage `stage_costs` dicts. The cyclic garbage
    collector is paused for the call (sim/gc_pause.py): a step allocates tuples, not cycles."""
    from pipesim.sim.gc_pause import no_gc
    with no_gc():
        return _simulate(scenario, mode, trace, stage_costs, plan, engine_choice, detail)


def _simulate(scenario, mode, trace, stage_costs, plan, engine_choice, detail):
    from pipesim.report.metrics import build_report
    from pipesim.sim import dag
    from pipesim.sim.workload import build

    w = build(scenario, mode, stage_costs, plan)
    eng, engine = None, "simpy"
    why = dag.applies(w, trace) if engine_choice != "simpy" else "engine='simpy' requested"
    if why is None:
        eng = dag.DagRun(w).run()          # None on a deadlock: the engine reports it
        engine = "dag" if eng is not None else "simpy"
    if eng is None:
        from pipesim.sim.engine import Engine     # SimPy: imported only when the DAG pass does not apply
        eng = Engine(w, trace).run()
    events, memory = [], []
    if mode == "representative":
        ids = {g.id: [g.pp] for g in w.gangs}
    else:
        ids = {g.id: list(g.members) for g in w.gangs}
    # the GPUs of a gang behave identically: one timeline each gang, copied to its GPUs' ids
    timelines = [replace(tl, rank=ids[g.id][0]) for g, tl in zip(w.gangs, eng.tl)]
    copies = {ids[g.id][0]: ids[g.id] for g in w.gangs}
    if trace:
        from pipesim.report.trace import MemorySample, TraceEvent
        pp_rank = {g.id: g.pp for g in w.gangs}
        for gid, stream, kind, stage, mb, start, end, nbytes, args in eng.events:
            args = dict(args, pp=pp_rank[gid])
            for tp, rank in enumerate(ids[gid]):
                a = args
                if "flow" in args:        # map the receiving gang to the matching GPU
                    dst_gang = w.gangs[args["flow"][0]]
                    a = dict(args, flow=(ids[dst_gang.id][tp],) + tuple(args["flow"][1:]))
                events.append(TraceEvent(rank, stream, kind, stage, mb, start, end, nbytes, 0, a))
        for g, mem in zip(w.gangs, eng.mem):
            for rank in ids[g.id]:
                memory += [MemorySample(rank, t, total, cats, 0) for t, total, cats in mem.samples]
    extras = {}
    if scenario.parallel.context > 1:
        # exposed K/V exchange of the busiest pipeline rank per step (inside compute, like TP;
        # exposed_comm_s["CP"] per rank): pipesim.costs.context
        M = scenario.num_microbatches
        extras["cp_comm_exposed_s"] = max(M * sum(w.stage_costs[k].cp_comm_fwd + w.stage_costs[k].cp_comm_bwd
                                                  for k in w.plan.stages_of(r)) for r in range(w.plan.num_ranks))
    extras.update({"mode": mode, "simulated_ranks": len(w.gangs), "engine": engine,
                   "plan": w.plan.name, "memory_model": "activations freed at B; I frees "
                   f"{1 - w.w_fraction:.3f} of them, W the rest (Qi et al. 2024 Table 1)"})
    if scenario.model.is_moe:
        from pipesim.sim.a2a_overlap import moe_summary
        extras["moe"] = moe_summary(w, eng.tl)
    return build_report(scenario, timelines, stage_costs=w.stage_costs, extras=extras,
                        events=events, memory=memory, copies=copies, detail=detail)


__all__ = ["simulate"]
