"""How much of each validation family's error a slowdown of the compute beside pipesim's hidden
communication could take: a what-if to size a term pipesim does not model yet, not a model.

NCCL runs each collective's channels as CTAs on SMs the compute beside it then lacks: a ring holds
one CTA per channel, at most 32 (NVIDIA/nccl src/init.cc: the ring graph's maxChannels =
MAXCHANNELS / 2), and about two per NVLink (costs/nccl_channels.py): 24 of the A100's 108 SMs, 32 of
the H100's 132. For every row this script takes the communication pipesim hides under compute (rank
0's busy communication minus what it exposes) and stretches the step by that time x (ratio - 1),
the ratio being the compute's slowdown while the SMs are held: 108 / 84 on A100 (non-persistent
GEMMs, the free SMs' share) and `--hopper` (default 1.5) on Hopper and Blackwell, whose persistent
GEMMs run a second wave (costs/moe_interference.py cta_makespan). Every hidden second counts, so
it is an upper bound for that ratio.

    python benchmarks/overlap_interference_estimate.py [--hopper 1.5] [--families foundry titan2024 ...]
"""
from __future__ import annotations

import argparse
import statistics

from pipesim.scenario.load import load_scenario
from pipesim.whatif.evaluate import detailed_report
from pipesim.whatif.validation import case_scenario, load_cases, run_case

A100_RATIO = 108 / 84
FAMILIES = ("sc21-table1", "sc21-table2", "megatron-v1", "mcore-h100", "nemo2407", "llama3-405b", "korthikanti22",
            "titan2024", "titan2412", "titan2506", "automodel", "foundry")


def hidden_share(report: dict) -> float:
    """Seconds of communication rank 0 hides under compute, over the step."""
    rank = report["ranks"][0]
    hidden = max(0.0, rank["comm_busy_s"] - sum(rank["exposed_comm_s"].values()))
    return min(1.0, hidden / report["step_time_s"]) if report["step_time_s"] > 0 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hopper", type=float, default=1.5, help="compute slowdown beside a collective, Hopper/Blackwell")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES))
    args = ap.parse_args()
    rows: dict[str, tuple[list, list]] = {}
    for case in load_cases():
        if case.suite not in args.families:
            continue
        r = run_case(case, detailed_report)
        if r.error_pct is None or not r.report:
            continue
        a100 = load_scenario(case_scenario(case)).system.gpu.kernel_curve == "a100"
        ratio = A100_RATIO if a100 else args.hopper
        err = r.error_pct / 100
        before, after = rows.setdefault(case.suite, ([], []))
        before.append(err)
        after.append((1 + err) / (1 + hidden_share(r.report) * (ratio - 1)) - 1)
    print(f"{'family':16s} {'rows':>4s}  {'MAPE now':>8s} {'with it':>8s}  {'bias now':>8s} {'with it':>8s}")
    for suite in args.families:
        if suite not in rows:
            continue
        before, after = rows[suite]
        print(f"{suite:16s} {len(before):4d}  {100 * statistics.mean(map(abs, before)):7.1f}% "
              f"{100 * statistics.mean(map(abs, after)):7.1f}%  {100 * statistics.mean(before):+7.1f}% "
              f"{100 * statistics.mean(after):+7.1f}%")


if __name__ == "__main__":
    main()
