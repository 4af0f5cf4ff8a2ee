"""Speed of `pipesim simulate` on the MoE scenarios (issue 14 target: < 1 s each, one core,
representative mode): DeepSeek-V3 on 1024 H100 (TP2 PP8 VP4 EP64) and Qwen3-30B-A3B on 16 H100.

Prints, per scenario, the best of N runs of load + stage costs + simulate (trace off, as sweeps
run it, and trace on, as `pipesim simulate` runs it), cold (plan cache cleared: what one CLI call
pays) and warm; the target is the cold run without trace (plain `pipesim simulate`). Times are the
thread's CPU time (time.thread_time: on a shared machine other processes' time is not counted),
with the cold run's wall time beside it. The split says where a cold run goes: `plan` = cold − warm
(the schedule's generation, validation and lowering, cached across calls), `costs` = the stage
costs (the MoE ops, all-to-all, routing: the MoE-specific part).
Pinned to one core. Usage: python benchmarks/moe_sim_speed.py [N]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("scenarios/deepseek-v3-1024xh100.yaml", "scenarios/qwen3-30b-a3b-16xh100.yaml")
# a dense scenario timed in the same run: the machine is shared, so compare ratios to it
REFERENCE = "scenarios/gpt3-175b-1024xa100.yaml"


def once(path: Path, trace: bool, cold: bool) -> tuple[float, float, float]:
    """(thread CPU seconds, wall seconds, step time) of load + simulate."""
    from pipesim import load_scenario
    from pipesim.sim import simulate
    from pipesim.sim.workload import _generated
    if cold:
        _generated.cache_clear()
    t0, c0 = time.perf_counter(), time.thread_time()
    s = load_scenario(path)
    rep = simulate(s, mode="representative", trace=trace)
    return time.thread_time() - c0, time.perf_counter() - t0, rep.to_dict()["step_time_s"]


def costs_time(path: Path) -> float:
    """Thread CPU seconds of the stage costs alone (MoE ops, all-to-all, routing)."""
    from pipesim import load_scenario
    from pipesim.costs import stage_costs
    s = load_scenario(path)
    c0 = time.thread_time()
    stage_costs(s)
    return time.thread_time() - c0


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import pipesim.sim.engine  # noqa: F401  (imports are not part of the timing)
    print(f"{'scenario':42s} {'cold s':>7s} {'(wall)':>7s} {'warm s':>7s} {'plan s':>7s} {'costs s':>7s} "
          f"{'trace s':>8s} {'step s':>8s}  (CPU s, best of {n}, one core)")
    for rel in SCENARIOS + (REFERENCE,):
        path = ROOT / rel
        cold, cold_wall, _ = min(once(path, False, True) for _ in range(n))
        warm = min(once(path, False, False)[0] for _ in range(n))
        traced, _, step = min(once(path, True, True) for _ in range(n))
        costs = min(costs_time(path) for _ in range(n))
        verdict = "ok" if cold < 1.0 else "over 1 s"   # plain `pipesim simulate` (no trace)
        if rel == REFERENCE:
            verdict = "(dense reference)"
        print(f"{rel:42s} {cold:7.3f} {cold_wall:7.3f} {warm:7.3f} {cold - warm:7.3f} {costs:7.3f} "
              f"{traced:8.3f} {step:8.2f}  {verdict}")


if __name__ == "__main__":
    main()
