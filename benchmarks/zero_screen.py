"""The closed-form screening model against the simulator on data-parallel-heavy layouts: GPT-3 175B
on 1024 A100 (scenarios/sweeps/gpt3-175b-1024.yaml), ZeRO 0-2 over tensor 2/4/8 x pipeline
1/2/4/8 x micro-batch 1/2 (full recompute) and ZeRO-3 over tensor 2/4/8 x pipeline 1/2/4 x
micro-batch 1/2 x recompute selective/full, data parallelism the rest, layouts that fit in
simulation. Prints both step times and the closed form's error per layout and its mean |error| per
ZeRO stage (docs/WHATIF.md, "search").

    python benchmarks/zero_screen.py
"""
from __future__ import annotations

import itertools
import os
import statistics

SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "sweeps", "gpt3-175b-1024.yaml")


def layouts():
    for zero, tp, pp, mb in itertools.product((0, 1, 2), (2, 4, 8), (1, 2, 4, 8), (1, 2)):
        yield zero, tp, pp, mb, "full"
    for tp, pp, mb, rc in itertools.product((2, 4, 8), (1, 2, 4), (1, 2), ("selective", "full")):
        yield 3, tp, pp, mb, rc


def main() -> None:
    from pipesim import load_scenario, simulate
    from pipesim.errors import PipesimError
    from pipesim.whatif.analytic import analytic_report
    errors: dict[int, list] = {}
    print(f"{'ZeRO':>4} {'TP':>3} {'PP':>3} {'DP':>4} {'mb':>3} {'recompute':>10} {'closed form s':>14} "
          f"{'simulated s':>12} {'error':>7}")
    for zero, tp, pp, mb, rc in layouts():
        d = 1024 // (tp * pp)
        sets = [f"parallel.tensor={tp}", f"parallel.pipeline={pp}", f"parallel.data={d}",
                "parallel.sequence_parallel=true", f"training.micro_batch_size={mb}", f"training.recompute={rc}",
                f"training.zero_stage={zero}"]
        try:
            s = load_scenario(SCENARIO, sets)
            sim = simulate(s)
            ana = analytic_report(s)["step_time_s"]
        except PipesimError:
            continue
        if sim.data["oom"]:
            continue
        e = ana / sim.step_time_s - 1
        errors.setdefault(zero, []).append(e)
        print(f"{zero:>4} {tp:>3} {pp:>3} {d:>4} {mb:>3} {rc:>10} {ana:14.2f} {sim.step_time_s:12.2f} {100 * e:+6.1f}%")
    for zero, es in sorted(errors.items()):
        print(f"ZeRO-{zero}: {len(es)} layouts, mean |error| {100 * statistics.mean(map(abs, es)):.1f} %, "
              f"max {100 * max(map(abs, es)):.1f} %")


if __name__ == "__main__":
    main()
