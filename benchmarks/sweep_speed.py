"""Sweep speed: configurations evaluated per CPU-second on the GPT-3 175B / 1024-GPU grid.

    python benchmarks/sweep_speed.py [--jobs 2] [--limit N] [--profile] [--warm] [--band]

Evaluates scenarios/sweeps/gpt3-175b-1024-grid.yaml (1152 combinations; the impossible ones are
pruned by the loader and not counted) with the simulator in representative mode: every
configuration simulated in fresh worker processes (cold: every plan generated once per sweep, in
the worker its plan family is sent to), the sweep default (memory screen), the closed form, and
(--warm, or by default at the end) one process over every configuration: once cold, then three
times warm with every plan cached (targets: cold >= 30, warm >= 100 configurations per CPU-second). The
`engine` column says how many were timed by the DAG path and how many by the SimPy engine.
--search [--ray] times `pipesim search` over >= 100,000 layouts of an MoE model (Qwen3-30B-A3B on 512 H100s)
(target <= 10 minutes on 2 cores) and, with --ray, runs it again as Ray tasks and compares the
rankings. --band prints the closed form's throughput error against the simulator per schedule (the band
`pipesim search` keeps candidates within, whatif/search.py ERROR_BAND). Configurations per
CPU-second do not depend on other load much; wall rates do.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "sweeps" / "gpt3-175b-1024.yaml"
GRID = ROOT / "scenarios" / "sweeps" / "gpt3-175b-1024-grid.yaml"


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (the pool's workers)."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(evaluator, jobs: int, limit: int | None, screen: bool = False) -> tuple[int, float, float, list[dict]]:
    from pipesim.whatif.evaluate import evaluate_all
    from pipesim.whatif.grid import prepare, read_grid
    from pipesim.whatif.sweep import read_base
    raw, _ = read_base(SCENARIO)
    t0, c0 = time.perf_counter(), cpu_seconds()
    items = prepare(raw, read_grid(GRID))
    live = [it for it in items if it.scenario is not None]
    if limit:
        live = live[:limit]
    rows = evaluate_all(live, evaluator=evaluator, jobs=jobs, screen=screen)
    return len(live), time.perf_counter() - t0, cpu_seconds() - c0, rows


def profile_one(n: int = 20) -> None:
    """cProfile of n simulator runs spread over the grid, by own time."""
    import cProfile
    import pstats
    from pipesim.whatif.evaluate import simulate_report
    from pipesim.whatif.grid import prepare, read_grid
    from pipesim.whatif.sweep import read_base
    raw, _ = read_base(SCENARIO)
    live = [it for it in prepare(raw, read_grid(GRID)) if it.scenario is not None][:: max(1, 630 // n)][:n]
    from pipesim.errors import PipesimError
    pr = cProfile.Profile()
    pr.enable()
    for it in live:
        try:
            simulate_report(it.scenario)
        except PipesimError:          # a schedule that cannot run the layout: its cost counts too
            pass
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(15)


def warm_plan_cache(limit: int | None = None) -> None:
    """Every live configuration simulated in one process, once cold, then three times warm: the
    warm passes find every plan in the simulator's plan cache, so they time the simulator without
    plan generation (three, as neighbouring jobs on a shared machine move one pass by up to 25 %)."""
    import collections
    from pipesim.whatif.evaluate import evaluate_all, simulate_report
    from pipesim.whatif.grid import prepare, read_grid
    from pipesim.whatif.sweep import read_base
    raw, _ = read_base(SCENARIO)
    sample = [it for it in prepare(raw, read_grid(GRID)) if it.scenario is not None][:limit]
    from pipesim.sim.workload import clear_shape_caches
    for label in ("cold plan cache", "warm plan cache", "warm plan cache", "warm plan cache"):
        clear_shape_caches()     # the warm passes re-use plans only, not per-scenario stage costs or links
        t0 = time.process_time()
        rows = evaluate_all(sample, evaluator=simulate_report, jobs=1)
        dt = time.process_time() - t0
        engines = collections.Counter(r.get("engine", r["status"]) for r in rows)
        print(f"simulator, 1 process, {label:16s}: {len(sample)} configs in {dt:.1f} CPU s = "
              f"{len(sample) / dt:.1f} configs per CPU-second (target {'30' if label.startswith('cold') else '100'}); "
              f"timed by {dict(engines)}")


def error_band() -> None:
    """Simulated / closed-form throughput - 1 per schedule, over layouts that fit in simulation."""
    import collections
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.evaluate import evaluate_all, simulate_report
    from pipesim.whatif.grid import prepare, read_grid
    from pipesim.whatif.sweep import read_base
    raw, _ = read_base(SCENARIO)
    live = [it for it in prepare(raw, read_grid(GRID)) if it.scenario is not None]
    sim = evaluate_all(live, evaluator=simulate_report, jobs=2)
    ana = evaluate_all(live, evaluator=analytic_report, jobs=2)
    err = collections.defaultdict(list)
    for a, b in zip(sim, ana):
        if a["status"] == "ok" and b["status"] in ("ok", "oom"):
            err[a["schedule"]].append(a["throughput_samples_per_s"] / b["throughput_samples_per_s"] - 1)
    print("closed-form throughput error (simulated / closed form - 1) on layouts that fit:")
    for name, v in sorted(err.items()):
        v.sort()
        print(f"   {name:12s} {len(v):4d} layouts  lowest {v[0]:+.4f}  median {v[len(v) // 2]:+.4f}  highest {v[-1]:+.4f}")


# The >= 100,000-layout search: an MoE model (Qwen3-30B-A3B: 48 layers, 128 experts, top-8) at
# 8K tokens on 512 H100s, over expert x tensor x pipeline x context x virtual stages x micro-batch x
# recompute x schedule x ZeRO x compression (104,664 layouts).
SEARCH_GPUS = 512
# Sequence parallelism on: Megatron-Core requires it for expert layers under tensor parallelism.
SEARCH_BASE = {"model": {"preset": "qwen3-30b-a3b", "seq_length": 8192}, "system": {"preset": "dgx-h100"},
               "parallel": {"sequence_parallel": True},
               "training": {"micro_batch_size": 1, "global_batch_size": 1024, "precision": "bf16"}}


def search_space():
    """The default axes (context parallelism down to 4K tokens per GPU: 1 and 2 here) plus the
    expert-parallel size."""
    from pipesim.whatif.search import SearchSpace
    return SearchSpace(extra={"parallel.expert": (1, 2, 4, 8, 16, 32, 64)})


def screen_rate(stride: int) -> None:
    """CPU seconds per candidate of the search's closed-form screen (loading included), on every
    `stride`-th layout of the big search, one process: for a machine too loaded to run it all."""
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.evaluate import evaluate_all
    from pipesim.whatif.grid import Prepared
    from pipesim.whatif.search import candidates
    cands = candidates(SEARCH_BASE, SEARCH_GPUS, search_space())
    items = [Prepared(i, {}, raw=c) for i, c in enumerate(cands[::stride])]
    c0 = time.process_time()
    rows = evaluate_all(items, evaluator=analytic_report, jobs=1)
    cpu = time.process_time() - c0
    per = cpu / len(items)
    print(f"screen: {len(items):,} of {len(cands):,} layouts (every {stride}th) in {cpu:.1f} CPU s = {per * 1e3:.2f} ms "
          f"each ({sum(r['status'] in ('ok', 'oom') for r in rows):,} loadable); all {len(cands):,} on 2 cores: "
          f"{per * len(cands) / 2 / 60:.1f} min (load average {os.getloadavg()[0]:.1f})")


def big_search(jobs: int, ray: bool) -> None:
    from pipesim.whatif.search import candidates, search
    gpus = SEARCH_GPUS
    n = len(candidates(SEARCH_BASE, gpus, search_space()))
    print(f"search: Qwen3-30B-A3B (MoE, 8K tokens) on {gpus} H100, {n:,} layouts, {jobs} processes, load average {os.getloadavg()[0]:.1f}")
    runs = [("process pool", dict(jobs=jobs))] + ([("Ray", dict(use_ray=True))] if ray else [])
    keys = []
    for label, kw in runs:
        t0, c0 = time.perf_counter(), cpu_seconds()
        res = search(SEARCH_BASE, gpus, search_space(), **kw)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        print(f"   {label:12s} {wall:6.1f} s wall ({wall / 60:.1f} min; target <= 10), {cpu:6.1f} s CPU of this "
              f"process and its pool: " + " -> ".join(f"{k} {v:,}" for k, v in res.stages.items()))
        best = res.best
        print(f"   {'':12s} best: tensor {best['tensor']} pipeline {best['pipeline']} {best['schedule']} "
              f"v={best['virtual_stages']} mb {best['micro_batch_size']} recompute {best['recompute']} "
              f"ZeRO-{best['zero_stage']}: {best['throughput_samples_per_s']:.2f} samples/s")
        keys.append([(r["tensor"], r["pipeline"], r["schedule"], r["virtual_stages"], r["micro_batch_size"],
                      r["recompute"], r["zero_stage"], r["throughput_samples_per_s"]) for r in res.finalists])
    if ray:
        print(f"   Ray ranking {'identical to' if keys[0] == keys[1] else 'DIFFERS from'} the process pool's "
              f"({len(keys[0])} finalists)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes (default 2)")
    ap.add_argument("--limit", type=int, help="evaluate only the first N live configurations")
    ap.add_argument("--profile", action="store_true", help="also profile 20 simulator runs")
    ap.add_argument("--warm", action="store_true",
                    help="only the cold vs warm plan-cache comparison (every configuration twice, 1 process)")
    ap.add_argument("--band", action="store_true", help="only the closed form's error band per schedule")
    ap.add_argument("--search", action="store_true", help="only the >= 100,000-layout search")
    ap.add_argument("--ray", action="store_true", help="with --search: also on Ray, rankings compared")
    ap.add_argument("--screen-rate", type=int, metavar="STRIDE",
                    help="only the search screen's CPU time per layout on every STRIDE-th layout")
    args = ap.parse_args()
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.evaluate import count_status, simulate_report

    if args.warm:
        warm_plan_cache(args.limit)
        return 0
    if args.band:
        error_band()
        return 0
    if args.search:
        big_search(args.jobs, args.ray)
        return 0
    if args.screen_rate:
        screen_rate(args.screen_rate)
        return 0

    print(f"grid: {GRID.relative_to(ROOT)} on {SCENARIO.relative_to(ROOT)}; {args.jobs} processes; "
          f"load average {os.getloadavg()[0]:.1f}")
    runs = (("simulator, every config", simulate_report, False),
            ("sweep default (OOM screen)", simulate_report, True),
            ("closed form only", analytic_report, False))
    for name, ev, screen in runs:
        n, dt, cpu, rows = measure(ev, args.jobs, args.limit, screen)
        c = count_status(rows)
        rate = n / dt
        if screen:
            skipped = sum(1 for r in rows if r.get("engine") == "analytic")
            name += f" [{skipped} OOM rows not simulated]"
        print(f"{name:28s}: {n} configurations ({c['ok']} feasible, {c['oom']} out of memory, "
              f"{c['pruned']} rejected by the schedule) in {dt:.1f} s = "
              f"{rate:.1f} configs/s wall, {rate / args.jobs:.1f} per core; CPU {cpu:.1f} s = "
              f"{n / cpu:.1f} configs per CPU-second")
        if name.startswith("simulator"):
            import collections
            print(f"{'':28s}  timed by {dict(collections.Counter(r.get('engine', r['status']) for r in rows))}")
            sim = [r for r in rows if r.get("engine") != "analytic"]
            ms = [r.get("num_microbatches", 0) * r.get("pipeline", 0) for r in sim]
            print(f"{'':28s}  pipeline x micro-batches per config: mean {sum(ms) / len(ms):.0f}, max {max(ms)}")
    warm_plan_cache(args.limit)
    if args.profile:
        profile_one()
    return 0


if __name__ == "__main__":
    sys.exit(main())
