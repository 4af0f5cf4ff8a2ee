"""Turn the ranks' recordings into the simulator's report (pipesim/report/metrics.py), one per measured
step, plus the spread over steps.

Alignment: every step starts at a barrier; a step's origin is the earliest barrier exit over the
ranks (on the common clock), and each event of that step is shifted by it, so t = 0 is the
start of the step as in the simulator. The report of the median step is the main report; the
spread (mean, std, min, max of the step time) comes with it, and, from each step's wall/CPU time
ratio (`contention`), the step time with the time other processes took removed.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import replace

from pipesim.report.trace import MemorySample, TraceEvent


def align(events, memory, metas) -> tuple[dict, dict, dict]:
    """Group by measured step and shift to the step origin; returns ({step: events},
    {step: memory}, {step: {rank: peak bytes}})."""
    origin: dict[int, float] = {}
    peaks: dict[int, dict] = {}
    for m in metas:
        if m.get("kind") == "step":
            origin[m["step"]] = min(origin.get(m["step"], m["start"]), m["start"])
        elif m.get("kind") == "step_end":
            peaks.setdefault(m["step"], {})[m["rank"]] = m.get("peak", 0.0)
    ev_by, mem_by = {}, {}
    for e in events:
        o = origin.get(e.step)
        if o is None:
            continue
        ev_by.setdefault(e.step, []).append(replace(e, start=e.start - o, end=e.end - o))
    for m in memory:
        o = origin.get(m.step)
        if o is None:
            continue
        mem_by.setdefault(m.step, []).append(replace(m, time=m.time - o))
    return ev_by, mem_by, peaks


def contention(events) -> float | None:
    """Wall time / thread CPU time summed over the compute actions of one step (all ranks): 1.0
    when the ranks had their cores to themselves; above 1 by the share other processes took.
    Every action of the step is stretched by about this factor, waits included (they wait on
    other ranks' stretched compute), so step / contention estimates the step on a quiet machine.
    The time an action spends in its tensor-parallel collectives (args "tp") is waiting on the
    other ranks of its group, not time taken by other processes, and is left out of its wall time
    (counted in, a TP=2 run's ratio was 1.71 at load 3.6 with 1.02 for the pipeline cases beside it),
    and the CPU time inside them (args "tp_cpu": the copies around gloo's calls) out of its CPU time
    (left in, a TP 2 run with sequence parallelism read 0.91 on a quiet machine)."""
    wall = cpu = 0.0
    for e in events:
        c = e.args.get("cpu_s") if e.stream == "compute" and e.kind in ("F", "B", "I", "W") else None
        if c:
            wall += e.end - e.start - e.args.get("tp", 0.0)
            cpu += c - e.args.get("tp_cpu", 0.0)
    return wall / cpu if cpu > 0 else None


def _mad(xs) -> float:
    """Median absolute deviation from the median: a scale that one stalled step does not inflate
    (Hampel 1974; with 1.4826 x MAD estimating sigma for normal data, Rousseeuw & Croux 1993)."""
    med = statistics.median(xs)
    return statistics.median(abs(x - med) for x in xs)


def step_report(scenario, events, memory, peaks: dict | None = None):
    from pipesim.report.metrics import report_from_events
    rep = report_from_events(scenario, events, memory)
    if peaks:   # the counters' true peaks (a backward's transient can peak between two samples)
        for r in rep.data["ranks"]:
            if r["rank"] in peaks:
                r["peak_memory_bytes"] = max(r["peak_memory_bytes"], peaks[r["rank"]])
        rep.data["peak_memory_bytes"] = max(r["peak_memory_bytes"] for r in rep.data["ranks"])
    return rep


def summarize(scenario, events, memory, metas, results: list[dict] | None = None,
              errors: list[dict] | None = None) -> dict:
    """The emulation's output dict: the report fields (contract), events/memory of the median
    step, the spread, losses and what went wrong."""
    ev_by, mem_by, peaks = align(events, memory, metas)
    reports = {k: step_report(scenario, ev_by[k], mem_by.get(k, []), peaks.get(k)) for k in sorted(ev_by)}
    out: dict = {"source": "emulator"}
    if reports:
        times = {k: r.data["step_time_s"] for k, r in reports.items()}
        order = sorted(times, key=times.get)
        median_step = order[(len(order) - 1) // 2]
        rep = reports[median_step]
        out.update(rep.to_dict(include_trace=True))
        vals = list(times.values())
        out["step_time_spread_s"] = {"mean": statistics.fmean(vals), "std": statistics.pstdev(vals),
                                     "mad": _mad(vals), "min": min(vals), "max": max(vals), "n": len(vals),
                                     "median_step": median_step}
        out["steps"] = [{"step": k, "step_time_s": r.data["step_time_s"],
                         "peak_memory_bytes": r.data["peak_memory_bytes"],
                         "bubble_fraction": r.data["bubble_fraction"],
                         "contention": contention(ev_by[k])} for k, r in reports.items()]
        un = [st["step_time_s"] / st["contention"] for st in out["steps"] if st["contention"]]
        if un:
            out["step_time_uncontended_s"] = statistics.median(un)
            out["step_time_uncontended_spread_s"] = {"mean": statistics.fmean(un), "std": statistics.pstdev(un),
                                                     "mad": _mad(un), "min": min(un), "max": max(un), "n": len(un)}
    else:
        out["events"] = [e.to_dict() for e in events]
        out["memory"] = [m.to_dict() for m in memory]
    results = results or []
    losses = {}
    for res in results:
        for step, ls in enumerate(res.get("losses", [])):
            if ls:
                losses.setdefault(step, []).extend(ls)
    out["loss_per_step"] = [statistics.fmean(losses[k]) for k in sorted(losses)]
    qerr = [e for res in results for e in res.get("quant_errors", [])]
    if qerr:
        out["quantization_rel_error"] = {"mean": statistics.fmean(qerr), "max": max(qerr), "n": len(qerr)}
    out["rank_results"] = [{k: v for k, v in res.items() if not k.startswith("_")} for res in results]
    if errors:
        out["errors"] = errors
    return out


def merge(run_dir: str, nproc: int, cfg: dict) -> dict:
    """Read every rank's files in `run_dir` (complete or partial) and summarize them."""
    from pipesim.emulator.recorder import read_jsonl
    from pipesim.scenario.load import load_scenario
    events, memory, metas, results, errors = [], [], [], [], []
    for r in range(nproc):
        e, m, meta = read_jsonl(os.path.join(run_dir, f"rank{r}.jsonl"))
        events += e
        memory += m
        metas += meta
        for name, dest in (("result", results), ("error", errors)):
            path = os.path.join(run_dir, f"rank{r}.{name}.json")
            if os.path.exists(path):
                try:
                    with open(path) as fh:
                        dest.append(json.load(fh))
                except (OSError, ValueError):
                    pass
    try:
        s = load_scenario(cfg["scenario"])
    except Exception:      # partial results of a run whose scenario cannot even load
        return {"events": [e.to_dict() for e in events], "errors": errors}
    out = summarize(s, events, memory, metas, results, errors)
    out["run_dir"] = run_dir
    if cfg.get("calibrate"):
        from pipesim.emulator.rank_calibration import merge_profiles, read_parts
        threads = int(cfg.get("threads", 1))
        before, after = read_parts(run_dir, nproc, "before"), read_parts(run_dir, nproc, "after")
        if len(before) == nproc:
            out["profile"] = merge_profiles(s, before + (after if len(after) == nproc else []), threads, nproc)
            if len(after) == nproc:     # each moment on its own: how far the costs drifted meanwhile
                out["profile_before"] = merge_profiles(s, before, threads, nproc)
                out["profile_after"] = merge_profiles(s, after, threads, nproc)
    return out


def from_gathered(scenario, gathered: list) -> dict:
    """Under torchrun: rank 0 receives (events, memory, metas, result) from every rank."""
    events, memory, metas, results = [], [], [], []
    for ev, mem, meta, res in gathered:
        events += [TraceEvent.from_dict(d) for d in ev]
        memory += [MemorySample.from_dict(d) for d in mem]
        metas += meta
        results.append(res)
    return summarize(scenario, events, memory, metas, results)
