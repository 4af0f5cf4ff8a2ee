"""What the foundry rows (MosaicML's MPT tables, `pipesim validate foundry`) imply about MPT's Triton
FlashAttention: for each row at 4K tokens or more, pipesim's step, the share of it that is attention
(timed on the FlashAttention-2 table), and the factor on that attention time that would give the
published step if everything else were right. A diagnosis, not a model input: where attention is
most of the step the factor is the kernel's, elsewhere it also carries the rest of the row's gap.

    python benchmarks/foundry_attention.py [--min-share 0.6]
"""
from __future__ import annotations

import argparse
import statistics

import pipesim
from pipesim.scenario.load import load_scenario
from pipesim.whatif.families import tokens_per_gpu
from pipesim.whatif.validation import case_scenario, load_cases


def implied(case) -> tuple[float, float]:
    """(attention share of pipesim's step, factor on the attention time the published step implies)."""
    d = case_scenario(case)
    s = load_scenario(d)
    rep = pipesim.simulate(d).data
    step = rep["step_time_s"]
    published_step = step * tokens_per_gpu(s, step) / case.target
    sources = rep["cost_sources"]
    attention = rep["ranks"][0]["compute_busy_s"] * sources.get("attention-table", 0.0) / sum(sources.values())
    return attention / step, (published_step - step + attention) / attention


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-share", type=float, default=0.6,
                    help="summarise the rows whose attention is at least this share of the step")
    args = ap.parse_args()
    by_gpu: dict[str, list[float]] = {}
    print(f"{'row':48s} {'tokens':>7s} {'attention share':>15s} {'implied factor':>14s}")
    for case in load_cases():
        if case.suite != "foundry" or case.raw["model"]["seq_len"] < 4096:
            continue
        share, factor = implied(case)
        print(f"{case.id:48s} {case.raw['model']['seq_len']:7d} {share:15.2f} {factor:14.2f}")
        if share >= args.min_share:
            by_gpu.setdefault(case.raw["hardware"]["gpu"], []).append(factor)
    print(f"\nrows with attention >= {args.min_share:.0%} of pipesim's step:")
    for gpu, factors in sorted(by_gpu.items()):
        print(f"  {gpu}: {len(factors)} rows, factor {min(factors):.2f} .. {max(factors):.2f} "
              f"(median {statistics.median(factors):.2f})")


if __name__ == "__main__":
    main()
