"""SM contention beside overlapped data-parallel collectives: the pieces against what was measured.

    python benchmarks/sm_contention.py

1. One GEMM beside an NCCL collective holding SMs: the slowdown costs/moe_interference.py's CTA
   schedule gives, against measurements (an H100 GEMM of [2500 x 5120] x [5120 x 5120], 132
   persistent CTAs, beside an all-gather of 24 CTAs: 80 % -> 47 % MFU, NVIDIA developer forum,
   "Compute-communication overlap causes severe GEMM performance degradation because of tail
   effect", 2025; "matmuls take 2x as long" beside NCCL under FSDP on H100, pytorch/pytorch#143988).
2. The CTAs NCCL's channel search gives a ring (costs/nccl_channels.py ring_ctas) per system and
   placement of the data-parallel group.
3. What the bundled scenarios lose to it (sim/interference.py): seconds and share of the step.
4. Transformer Engine's norm kernels: how many CTAs a row of the hidden dimension takes forward
   and backward (costs/norm_kernels.py, TE's registries), cooperative - waiting for a collective
   that holds more SMs than training.norm_sm_margin - from two CTAs on.
5. The SM margins on GPT-3 175B (the bundled 1,024-GPU layout on DGX H100): the step with
   Transformer Engine's norms waiting (norm_sm_margin 0), with a margin of the rings' CTAs, and
   with GEMMs that leave those SMs free (gemm_sm_margin).
"""
from __future__ import annotations

from pathlib import Path

import pipesim
from pipesim.costs.collectives import GroupPlacement, Link
from pipesim.costs.moe_interference import gemm_slowdown
from pipesim.costs.nccl_channels import ring_ctas
from pipesim.costs.norm_kernels import ctas_per_row

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "scenarios" / "llama2-7b-2x8-a100-zero1.yaml"


def main() -> None:
    print("1. GEMM [2500 x 5120] x [5120 x 5120] (400 tiles of 256 x 128) beside 24 held SMs, time / alone")
    print(f"   H100, static persistent (132 CTAs): pipesim {gemm_slowdown(2500, 5120, 1, 132, 24, True):.2f}, "
          f"measured {80 / 47:.2f} (80 -> 47 % MFU)")
    print(f"   8192 x 8192 (2048 tiles), 16 held: static {gemm_slowdown(8192, 8192, 1, 132, 16, True):.2f} "
          f"(pytorch#143988: 'about 2x'); a CTA per tile / Blackwell's CLC {gemm_slowdown(8192, 8192, 1, 132, 16, False):.2f}\n")
    print("2. NCCL ring CTAs of a data-parallel group (size, members per node)")
    link = Link(1e9, 0.0)
    for preset in ("dgx-a100-80gb", "dgx-h100", "dgx-b200", "gb200-nvl72"):
        s = pipesim.load_scenario(BASE, overrides=[f"system.preset={preset}",
                                                   f"system.num_nodes={4 if preset == 'gb200-nvl72' else 2}"])
        cells = []
        for size, per_node in ((8, 8), (64, 8), (64, 4), (64, 1)):
            g = GroupPlacement(size=size, per_node=per_node, intra=link, inter=link)
            if preset == "gb200-nvl72":       # 72-GPU NVLink domain: every group of up to 72 is inside
                g = GroupPlacement(size=size, per_node=size, intra=link, inter=link)
            cells.append(f"({g.size}, {g.per_node}) {ring_ctas(s, 'dp_cp', g):2d}")
        print(f"   {preset:14s} " + "   ".join(cells))
    print("\n3. bundled scenarios: compute lost beside data-parallel collectives")
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        s = pipesim.load_scenario(path)
        rep = pipesim.simulate(s, trace=False).to_dict(include_trace=False)
        lost = max((r.get("compute_contention_s", 0.0) for r in rep["ranks"]), default=0.0)
        print(f"   {path.name:40s} {s.system.gpu.name:18s} step {rep['step_time_s']:8.3f} s  lost {lost:7.3f} s "
              f"({100 * lost / rep['step_time_s']:4.1f} %)")
    print("\n4. Transformer Engine norm kernels: CTAs per row forward / backward (cooperative from 2)")
    for name, norm, hidden in (("Llama 3 8B", "rmsnorm", 4096), ("Llama 3 70B", "rmsnorm", 8192),
                               ("DeepSeek-V3", "rmsnorm", 7168), ("Llama 3.1 405B", "rmsnorm", 16384),
                               ("GPT-3 175B", "layernorm", 12288), ("Nemotron-4 340B", "layernorm", 18432),
                               ("Megatron-Core 32B", "layernorm", 7168)):
        print(f"   {name:18s} {norm:9s} {hidden:6d}: {ctas_per_row(norm, 'fwd', hidden)} / "
              f"{ctas_per_row(norm, 'bwd', hidden)}")
    print("\n5. GPT-3 175B on 1,024 H100 (TP 8, PP 8, DP 16), step by SM margin")
    held = None
    for label, extra in (("no margin modelled", []), ("norm_sm_margin 0", ["training.norm_sm_margin=0"]),
                         ("norm_sm_margin = the rings' CTAs", "held"),
                         ("gemm_sm_margin = the rings' CTAs", "gemm")):
        if isinstance(extra, str):
            extra = [f"training.{'norm' if extra == 'held' else 'gemm'}_sm_margin={held}"]
        s = pipesim.load_scenario(ROOT / "scenarios" / "gpt3-175b-1024xa100.yaml",
                                  overrides=["system.preset=dgx-h100", *extra])
        if held is None:
            from pipesim.costs.nccl_channels import dp_collective_sms
            from pipesim.costs.topology import placement
            held = dp_collective_sms(s, placement(s, "dp_cp"))
        rep = pipesim.simulate(s, trace=False).to_dict(include_trace=False)
        lost = max((r.get("compute_contention_s", 0.0) for r in rep["ranks"]), default=0.0)
        print(f"   {label:34s} ({' '.join(extra) or '-'}): step {rep['step_time_s']:7.3f} s, compute lost "
              f"beside the collectives {lost:6.3f} s")


if __name__ == "__main__":
    main()
