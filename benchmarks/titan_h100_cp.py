"""Held-out look, not a validation family: torchtitan's context-parallel table on H100.

    python benchmarks/titan_h100_cp.py [ring|allgather] [balanced|contiguous] [fa2|auto|fa3]

pytorch/torchtitan docs/performance.md (commit eaea6f6, torch 1963fc8 of 2024-12-23), Table 2:
Llama 3.1 8B on 8 H100 (Grand Teton: 96 GB HBM2e at 2.4 TB/s, the default 500 W power limit),
FSDP x CP over the 8 GPUs, local batch 1, full activation checkpointing, torch.compile, Float8
linear layers. Published TPS/GPU: CP1 32K 3,890; CP2 64K 2,540; CP4 128K 1,071; CP8 256K 548.

Mapped: llama3-8b at the row's sequence length, dgx-h100 with the 96 GB / 2.4 TB/s memory,
data = 8 / CP, ZeRO-3 with prefetch, fp8 (tensorwise), full recompute, fused kernels, and the
attention kernel PyTorch's SDPA runs (`attention_kernel: fa2`, its flash backend vendors
FlashAttention-2; the third argument picks another: auto = cuDNN, fa3). Not
mapped: the 500 W power limit (pipesim's sustained ratio is the 700 W H200 measurement, so the
absolute figures are optimistic by construction); which CP layout and rotate method torchtitan ran
is an argument. The ratios to the CP1 row cancel most of what is common to the rows (power limit,
Float8 overheads, compile) and test how the CP and long-sequence attention terms scale.
"""
from __future__ import annotations

import sys

import pipesim

ROWS = [(1, 32768, 3890), (2, 65536, 2540), (4, 131072, 1071), (8, 262144, 548)]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    mode = argv[0] if argv else "ring"
    layout = argv[1] if len(argv) > 1 else "balanced"
    kernel = argv[2] if len(argv) > 2 else "fa2"
    print(f"torchtitan Table 2 (Llama 3.1 8B, 8 H100, FSDP x CP), context_mode {mode}, layout {layout}, "
          f"attention kernel {kernel}")
    out = []
    for cp, seq, pub in ROWS:
        s = pipesim.load_scenario({
            "model": {"preset": "llama3-8b", "seq_length": seq, "dropout": False},
            "system": {"preset": "dgx-h100", "num_nodes": 1, "gpu": {"memory_GiB": 96, "hbm_bandwidth_GBps": 2400}},
            "parallel": {"tensor": 1, "pipeline": 1, "data": 8 // cp, "context": cp, "context_mode": mode,
                         "context_layout": layout},
            "training": {"micro_batch_size": 1, "global_batch_size": 8 // cp, "recompute": "full", "precision": "fp8",
                         "attention": "flash", "attention_kernel": kernel, "zero_stage": 3, "zero3_prefetch": True, "overlap_grad_reduce": True,
                         "grad_reduce_in_fp32": True}})
        r = pipesim.simulate(s, trace=False).to_dict()
        out.append((cp, seq, pub, r["tokens_per_s"] / s.num_gpus))
    p0, m0 = out[0][3], out[0][2]
    for cp, seq, pub, tps in out:
        print(f"  CP{cp} {seq:7d}: predicted {tps:7.0f} TPS/GPU, published {pub:6d} ({100 * (tps / pub - 1):+6.1f} %);"
              f"  / CP1 row: predicted {tps / p0:.3f}, published {pub / m0:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
