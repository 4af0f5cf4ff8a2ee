"""The closed-form screening model against the simulator on ZeRO-3 layouts: GPT-3 175B on 1024 A100
(scenarios/sweeps/gpt3-175b-1024.yaml) over tensor 2/4/8 x pipeline 1/2/4 x micro-batch 1/2 x
recompute selective/full, data parallelism the rest. Prints both step times and the closed form's
error per layout and its mean |error| (docs/WHATIF.md, "search").

    python benchmarks/zero3_screen.py
"""
from __future__ import annotations

import itertools
import os
import statistics

SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "sweeps", "gpt3-175b-1024.yaml")


def main() -> None:
    from pipesim import load_scenario, simulate
    from pipesim.errors import PipesimError
    from pipesim.whatif.analytic import analytic_report
    errors = []
    print(f"{'TP':>3} {'PP':>3} {'DP':>4} {'mb':>3} {'recompute':>10} {'closed form s':>14} {'simulated s':>12} {'error':>7}")
    for tp, pp, mb, rc in itertools.product((2, 4, 8), (1, 2, 4), (1, 2), ("selective", "full")):
        d = 1024 // (tp * pp)
        sets = [f"parallel.tensor={tp}", f"parallel.pipeline={pp}", f"parallel.data={d}",
                "parallel.sequence_parallel=true", f"training.micro_batch_size={mb}", f"training.recompute={rc}",
                "training.zero_stage=3"]
        try:
            s = load_scenario(SCENARIO, sets)
            ana, sim = analytic_report(s)["step_time_s"], simulate(s).step_time_s
        except PipesimError:
            continue
        errors.append(ana / sim - 1)
        print(f"{tp:>3} {pp:>3} {d:>4} {mb:>3} {rc:>10} {ana:14.2f} {sim:12.2f} {100 * errors[-1]:+6.1f}%")
    print(f"{len(errors)} layouts: mean |error| {100 * statistics.mean(map(abs, errors)):.1f} %, "
          f"max {100 * max(map(abs, errors)):.1f} %")


if __name__ == "__main__":
    main()
