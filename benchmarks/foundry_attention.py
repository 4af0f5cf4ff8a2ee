"""What the foundry rows (MosaicML's MPT tables, `pipesim validate foundry`) imply about MPT's Triton
FlashAttention: for each row at 4K tokens or more, pipesim's step, the share of it that is attention
(timed on the row's kernel table: fa-triton for attn_impl triton, fa2 for flash), and the factor on that attention time that would give the
published step if everything else were right. A diagnosis, not a model input: where attention is
most of the step the factor is the kernel's, elsewhere it also carries the rest of the row's gap.

    python benchmarks/foundry_attention.py [--min-share 0.6] [--residual]

--residual then applies each GPU generation's median factor to the Triton rows' attention (the
FlashAttention-2 rows keep theirs) and prints what error stays, by generation, gradient accumulation
and activation checkpointing.
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


def generation(gpu: str) -> str:
    """The table's GPU name without its memory: a100_80gb -> a100."""
    return gpu.split("_")[0]


def print_residuals(rows: list, medians: dict[str, float]) -> None:
    """Each row's error left once its Triton attention runs at its generation's median factor."""
    groups: dict[tuple, list[float]] = {}
    for case, share, factor in rows:
        gen = generation(case.raw["hardware"]["gpu"])
        f = medians[gen] if case.raw["training"]["attn_impl"] == "triton" else 1.0
        residual = 100 * ((1 + share * (factor - 1)) / (1 + share * (f - 1)) - 1)
        key = (gen, case.raw["parallel"]["grad_accum"] > 1, case.raw["training"]["activation_checkpointing"])
        groups.setdefault(key, []).append(residual)
    print("\nerror left with the Triton attention at the median factor (+ = pipesim faster):")
    for (gen, accum, ckpt), res in sorted(groups.items()):
        print(f"  {gen} {'accumulating' if accum else 'one micro-batch':15s} "
              f"{'checkpointing' if ckpt else 'no checkpointing':16s} {len(res):3d} rows  mean {statistics.mean(res):+5.1f} %"
              f"  ({min(res):+.1f} .. {max(res):+.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-share", type=float, default=0.6,
                    help="summarise the rows whose attention is at least this share of the step")
    ap.add_argument("--residual", action="store_true", help="the error left at the median factors, every row")
    args = ap.parse_args()
    by_gpu: dict[str, list[float]] = {}
    rows = []
    print(f"{'row':48s} {'tokens':>7s} {'attention share':>15s} {'implied factor':>14s}")
    for case in load_cases():
        if case.suite != "foundry" or (case.raw["model"]["seq_len"] < 4096 and not args.residual):
            continue
        share, factor = implied(case)
        rows.append((case, share, factor))
        if case.raw["model"]["seq_len"] >= 4096:
            print(f"{case.id:48s} {case.raw['model']['seq_len']:7d} {share:15.2f} {factor:14.2f}")
        if share >= args.min_share:
            by_gpu.setdefault(case.raw["hardware"]["gpu"], []).append(factor)
    print(f"\nrows with attention >= {args.min_share:.0%} of pipesim's step:")
    for gpu, factors in sorted(by_gpu.items()):
        print(f"  {gpu}: {len(factors)} rows, factor {min(factors):.2f} .. {max(factors):.2f} "
              f"(median {statistics.median(factors):.2f})")
    if args.residual:
        medians = {}
        for gpu, factors in by_gpu.items():
            medians.setdefault(generation(gpu), []).extend(factors)
        medians = {gen: statistics.median(f) for gen, f in medians.items()}
        print("  median by generation: " + ", ".join(f"{g} {m:.2f}" for g, m in sorted(medians.items())))
        print_residuals(rows, medians)


if __name__ == "__main__":
    main()
