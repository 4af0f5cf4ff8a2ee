"""FP8 vs BF16 step time for Llama 3 70B on 64 H100 (8 DGX H100), and the terms that cap the
speed-up below the 1402.6 / 794.5 = 1.77x of the GEMMs alone.

    .venv/bin/python benchmarks/fp8_speedup.py

Layout: NeMo 24.07's Llama 3 70B recipe without context parallelism (tp 4, pp 4, vp 5, dp 4,
micro-batch 1, global batch 128, seq 8192), sequence parallelism, TP overlap, distributed
optimizer, fp32 gradient reduction, delayed scaling. Published FP8 training gains over BF16 on
H100 are 1.2-1.5x (the range issue 13 asks pipesim to land in).
Then the same with FP8 attention (training.fp8_attention), and the layout on 64 B200 (8 DGX B200):
BF16, MXFP8 and NVFP4 (FP4 GEMMs) step times.
"""
from __future__ import annotations

import copy

import pipesim

BASE = {"model": {"preset": "llama3-70b", "dropout": False},
        "system": {"preset": "dgx-h100", "num_nodes": 8},
        "parallel": {"tensor": 4, "pipeline": 4, "data": 4, "sequence_parallel": True, "virtual_stages": 5},
        "training": {"micro_batch_size": 1, "global_batch_size": 128, "schedule": "interleaved",
                     "attention": "flash", "zero_stage": 1, "overlap_grad_reduce": True,
                     "overlap_param_gather": True, "overlap_tp_comm": True, "grad_reduce_in_fp32": True}}


def breakdown(precision: str, recipe: str = "delayed", system: str = "dgx-h100",
              fp8_attention: bool = False) -> tuple[float, dict]:
    sc = copy.deepcopy(BASE)
    sc["system"]["preset"] = system
    sc["training"].update(precision=precision, fp8_recipe=recipe, fp8_attention=fp8_attention)
    r = pipesim.simulate(sc).to_dict()
    rank = r["ranks"][0]
    m, p = r["num_microbatches"], BASE["parallel"]["pipeline"]
    # cost_sources: per micro-batch, summed over every model stage; a rank holds 1/p of them
    terms = {f"compute: {k}": v * m / p for k, v in r["cost_sources"].items()}
    step_ops = {}
    for c in r["stage_costs"][::p]:                           # rank 0's chunks (interleaved)
        for name, sec in c["step_ops"].items():
            step_ops[name] = step_ops.get(name, 0.0) + sec
    terms.update({f"step op: {k}": v for k, v in step_ops.items()})
    terms.update({f"exposed comm: {k}": v for k, v in r["exposed_comm_s"].items()})
    terms["pipeline bubble / idle"] = r["step_time_s"] - rank["compute_busy_s"] - sum(r["exposed_comm_s"].values())
    return r["step_time_s"], terms


def main() -> None:
    (tb, bf16), (tf, fp8) = breakdown("bf16"), breakdown("fp8")
    print(f"Llama 3 70B, 64 H100: step BF16 {tb:.3f} s, FP8 {tf:.3f} s, speed-up {tb / tf:.2f}x "
          f"(GEMMs alone: {1402.6 / 794.5:.2f}x)\n")
    print(f"  {'term (s per step, rank 0)':34s} {'BF16':>8s} {'FP8':>8s} {'saved':>8s}")
    for name in sorted(set(bf16) | set(fp8), key=lambda n: -max(bf16.get(n, 0), fp8.get(n, 0))):
        b, f = bf16.get(name, 0.0), fp8.get(name, 0.0)
        print(f"  {name:34s} {b:8.3f} {f:8.3f} {b - f:+8.3f}")
    t_attn, _ = breakdown("fp8", fp8_attention=True)
    print(f"\n  with FP8 attention too (training.fp8_attention, cuDNN 9.19's FP8 / BF16 ratio): FP8 {t_attn:.3f} s, "
          f"speed-up {tb / t_attn:.2f}x")
    steps = {name: breakdown(prec, recipe, "dgx-b200")[0]
             for name, prec, recipe in (("BF16", "bf16", "delayed"), ("MXFP8", "fp8", "mxfp8"), ("NVFP4", "fp8", "nvfp4"))}
    print("\nLlama 3 70B, 64 B200: " + ", ".join(f"{k} {v:.3f} s ({steps['BF16'] / v:.2f}x)" for k, v in steps.items())
          + "  (GEMMs alone: FP8 3432.5 / 1745 = 1.97x, FP4 5239 / 1745 = 3.00x at the MAMF)")


if __name__ == "__main__":
    main()
