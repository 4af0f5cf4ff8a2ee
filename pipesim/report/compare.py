"""Predicted (simulator) vs measured (emulator): the same report fields and the same TraceEvents,
so a comparison is a diff of two reports.

Tables: per action kind (mean duration of F, B, I, W, RECV waits, DP, optimizer, ...), per
(model stage, action kind) -- the table that tells which cost is wrong -- per pipeline rank
(compute busy, idle, bubble, peak memory) and per step (time, throughput, peak memory). Ranks
are matched by pipeline coordinate ("stage" in the report's rank entries): the simulator's
representative mode has one rank per pipeline rank; full-mode and emulator ranks at the same
pipeline rank are averaged (memory: the largest). Error % = (predicted - measured) / measured.
"""
from __future__ import annotations

import json
import os
import statistics

from pipesim.errors import PipesimError

COMPUTE = ("F", "B", "I", "W", "R", "QUANTIZE", "DEQUANTIZE", "OPTIMIZER", "NEWTON_SCHULZ")
COMM = ("RECV_F", "RECV_B", "SEND_F", "SEND_B", "DP", "TP")


def err_pct(pred: float, meas: float) -> float | None:
    if meas is None or pred is None or meas == 0:
        return None
    return (pred - meas) / meas * 100.0


def load_report(path: str) -> dict:
    if os.path.isdir(path):               # a report folder of `pipesim simulate`
        path = os.path.join(path, "report.json")
    try:
        with open(path) as fh:
            d = json.load(fh)
    except OSError as exc:
        raise PipesimError(f"{path}: cannot read the report ({exc.strerror})") from None
    except ValueError as exc:
        raise PipesimError(f"{path}: not a JSON report ({exc})") from None
    if isinstance(d, dict) and "traceEvents" in d:
        raise PipesimError(f"{path}: this is a Perfetto trace; compare reads the --json reports of "
                           f"`pipesim simulate` and `pipesim emulate`")
    if not isinstance(d, dict) or "step_time_s" not in d:
        raise PipesimError(f"{path}: not a pipesim report (no step_time_s); expected the --json of "
                           f"`pipesim simulate` or `pipesim emulate`")
    if "events" not in d:
        raise PipesimError(f"{path}: the report has no events to compare; write it with "
                           f"`pipesim simulate SCENARIO --events --json {path}`")
    return d


def _means(events, key) -> dict:
    acc: dict = {}
    for e in events:
        k = key(e)
        if k is None:
            continue
        acc.setdefault(k, []).append(e["end"] - e["start"])
    return {k: (statistics.fmean(v), len(v)) for k, v in acc.items()}


def _cpu_means(events) -> dict:
    """Mean thread CPU seconds per kind (emulator compute actions on CPU record args.cpu_s)."""
    acc: dict = {}
    for e in events:
        cpu = (e.get("args") or {}).get("cpu_s")
        if cpu is not None and e["kind"] in COMPUTE:
            acc.setdefault(e["kind"], []).append(cpu)
    return {k: statistics.fmean(v) for k, v in acc.items()}


def _kind(e):
    return e["kind"] if e["kind"] in COMPUTE + COMM else None


def _stage_kind(e):
    return (e["stage"], e["kind"]) if e["kind"] in ("F", "B", "I", "W", "R") else None


def _by_pp(ranks) -> dict:
    out: dict = {}
    for r in ranks:
        out.setdefault(r["stage"], []).append(r)
    return out


# what two reports of one scenario share, whichever ran it (simulate --json, emulate --json)
SAME_RUN = ("num_gpus", "num_microbatches", "schedule")


def check_same_run(sim: dict, emu: dict, sim_path: str, emu_path: str) -> None:
    """Refuse to compare reports of two different runs (their errors would mean nothing)."""
    differ = [f"{k} {sim.get(k)} vs {emu.get(k)}" for k in SAME_RUN
              if k in sim and k in emu and sim[k] != emu[k]]
    if differ:
        raise PipesimError(f"{sim_path} and {emu_path} are reports of different runs ({', '.join(differ)}); "
                           f"compare the simulation and the emulation of one scenario")


def compare(sim: dict, emu: dict) -> dict:
    """The comparison as a dict of tables (rows of predicted, measured, error_pct)."""
    se, ee = sim.get("events", []), emu.get("events", [])
    ps, ms = _means(se, _kind), _means(ee, _kind)
    order = [k for k in COMPUTE + COMM if k in ps or k in ms]
    cpu = _cpu_means(ee)
    actions = [{"kind": k, "predicted_s": ps.get(k, (None, 0))[0], "measured_s": ms.get(k, (None, 0))[0],
                "n_predicted": ps.get(k, (None, 0))[1], "n_measured": ms.get(k, (None, 0))[1],
                "error_pct": err_pct(ps.get(k, (None,))[0], ms.get(k, (None,))[0]),
                "measured_cpu_s": cpu.get(k),
                "cpu_error_pct": err_pct(ps.get(k, (None,))[0], cpu.get(k))} for k in order]
    pst, mst = _means(se, _stage_kind), _means(ee, _stage_kind)
    per_stage = [{"stage": st, "kind": k, "predicted_s": pst.get((st, k), (None,))[0],
                  "measured_s": mst.get((st, k), (None,))[0],
                  "error_pct": err_pct(pst.get((st, k), (None,))[0], mst.get((st, k), (None,))[0])}
                 for st, k in sorted(set(pst) | set(mst), key=lambda x: (x[0], "FBIWR".index(x[1])))]
    sp, mp = _by_pp(sim.get("ranks", [])), _by_pp(emu.get("ranks", []))
    step_p, step_m = sim["step_time_s"], emu["step_time_s"]
    ranks = []
    for pp in sorted(set(sp) | set(mp)):
        a, b = sp.get(pp, []), mp.get(pp, [])

        def mean(rows, key):
            return statistics.fmean(r[key] for r in rows) if rows else None

        busy_p, busy_m = mean(a, "compute_busy_s"), mean(b, "compute_busy_s")
        mem_p = max((r["peak_memory_bytes"] for r in a), default=None)
        mem_m = max((r["peak_memory_bytes"] for r in b), default=None)
        ranks.append({
            "pp": pp,
            "busy_predicted_s": busy_p, "busy_measured_s": busy_m, "busy_error_pct": err_pct(busy_p, busy_m),
            "idle_predicted_s": None if busy_p is None else step_p - busy_p,
            "idle_measured_s": None if busy_m is None else step_m - busy_m,
            "bubble_predicted": mean(a, "bubble_fraction"), "bubble_measured": mean(b, "bubble_fraction"),
            "peak_memory_predicted": mem_p, "peak_memory_measured": mem_m,
            "peak_memory_error_pct": err_pct(mem_p, mem_m)})
    step = {"step_time_predicted_s": step_p, "step_time_measured_s": step_m,
            "step_time_error_pct": err_pct(step_p, step_m),
            "throughput_predicted": sim.get("throughput_samples_per_s"),
            "throughput_measured": emu.get("throughput_samples_per_s"),
            "throughput_error_pct": err_pct(sim.get("throughput_samples_per_s"), emu.get("throughput_samples_per_s")),
            "bubble_predicted": sim.get("bubble_fraction"), "bubble_measured": emu.get("bubble_fraction"),
            "peak_memory_predicted": sim.get("peak_memory_bytes"), "peak_memory_measured": emu.get("peak_memory_bytes"),
            "peak_memory_error_pct": err_pct(sim.get("peak_memory_bytes"), emu.get("peak_memory_bytes"))}
    if "step_time_spread_s" in emu:
        step["step_time_measured_spread_s"] = emu["step_time_spread_s"]
    return {"step": step, "actions": actions, "stage_actions": per_stage, "ranks": ranks}


def _ms(x) -> str:
    return f"{x * 1e3:10.3f}" if x is not None else f"{'-':>10}"


def _pct(x) -> str:
    return f"{x:+8.1f}%" if x is not None else f"{'-':>9}"


def _mib(x) -> str:
    return f"{x / 2**20:10.2f}" if x is not None else f"{'-':>10}"


def format_table(c: dict) -> str:
    s = c["step"]
    lines = ["                      predicted   measured     error"]
    lines.append(f"step time (ms)       {_ms(s['step_time_predicted_s'])} {_ms(s['step_time_measured_s'])} "
                 f"{_pct(s['step_time_error_pct'])}")
    sp = s.get("step_time_measured_spread_s")
    if sp:
        lines.append(f"  measured spread: mean {sp['mean'] * 1e3:.3f} ms, std {sp['std'] * 1e3:.3f}, "
                     f"min {sp['min'] * 1e3:.3f}, max {sp['max'] * 1e3:.3f} over {sp['n']} steps")
    tp, tm = s["throughput_predicted"], s["throughput_measured"]
    lines.append(f"throughput (samp/s)  {tp or 0:10.2f} {tm or 0:10.2f} {_pct(s['throughput_error_pct'])}")
    lines.append(f"bubble fraction      {(s['bubble_predicted'] or 0):10.3f} {(s['bubble_measured'] or 0):10.3f}")
    lines.append(f"peak memory (MiB)    {_mib(s['peak_memory_predicted'])} {_mib(s['peak_memory_measured'])} "
                 f"{_pct(s['peak_memory_error_pct'])}")
    lines += ["", "action kind  mean ms: predicted   measured     error    n(pred/meas)   measured CPU   error"]
    for a in c["actions"]:
        cpu = (f"   {_ms(a['measured_cpu_s'])} {_pct(a['cpu_error_pct'])}"
               if a.get("measured_cpu_s") is not None else "")
        lines.append(f"  {a['kind']:<10}           {_ms(a['predicted_s'])} {_ms(a['measured_s'])} "
                     f"{_pct(a['error_pct'])}    {a['n_predicted']:>4}/{a['n_measured']:<4}{cpu}")
    lines += ["", "stage action  mean ms: predicted   measured     error"]
    for a in c["stage_actions"]:
        lines.append(f"  {a['stage']:>3} {a['kind']:<3}               {_ms(a['predicted_s'])} {_ms(a['measured_s'])} "
                     f"{_pct(a['error_pct'])}")
    lines += ["", "pp rank  busy ms: pred    meas   err     idle ms: pred   meas   bubble: pred  meas   "
                  "peak MiB: pred    meas    err"]
    for r in c["ranks"]:
        lines.append(f"  {r['pp']:>3}       {_ms(r['busy_predicted_s'])}{_ms(r['busy_measured_s'])}"
                     f"{_pct(r['busy_error_pct'])} {_ms(r['idle_predicted_s'])}{_ms(r['idle_measured_s'])}"
                     f"   {(r['bubble_predicted'] or 0):6.3f} {(r['bubble_measured'] or 0):6.3f}  "
                     f"{_mib(r['peak_memory_predicted'])}{_mib(r['peak_memory_measured'])}"
                     f"{_pct(r['peak_memory_error_pct'])}")
    return "\n".join(lines)


def plot(sim: dict, emu: dict, path: str, title: str = "") -> None:
    """Side-by-side timeline PNG: simulated above, measured below (pipesim.report.plots)."""
    from pipesim.report.plots import plot_compare
    from pipesim.report.trace import TraceEvent

    def evs(d):
        return [TraceEvent.from_dict(e) for e in d.get("events", [])]
    plot_compare(evs(sim), evs(emu), path, title=title)
