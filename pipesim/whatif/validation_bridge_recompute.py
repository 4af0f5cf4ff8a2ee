"""Per-row settings of the bridgemem held-out family: Megatron-Bridge's matched activation-recompute
study of Nemotron 3 Nano on 16 H100 (github:NVIDIA-NeMo/Megatron-Bridge
skills/nemo-mbridge-perf-activation-recompute, SKILL.md "Matched H100 Evidence: Nemotron 3 Nano"
and card.yaml `measured_results`; Bridge 600d069b, Megatron Core 24bad8e6, 2026-08-12). The
native 16-H100 BF16 performance recipe at sequence 8192, micro-batch 1, global batch 16, EP 8,
DP 16 (expert data parallel 2), HybridEP, grouped GEMM, with only `recompute_modules` changed from
row to row; step time over iterations 7-12 and rank 0's peak *allocated* memory after iteration 2
(stated in "GB", read as GiB: Megatron reports torch.cuda.max_memory_allocated in MiB; decimal
gigabytes would read 7 % lower). The rows that did not fit (no recompute, `core_attn`, `moe_act`,
`layernorm` + `moe_act`: out of memory in iteration 1 or 2) have no step to compare and are left
out. Test only.

Mapped as the bridge families (validation_bridge.py) with: HybridEP -> moe_dispatcher hybridep; the
row's recompute_modules. Not mapped: Transformer Engine CUDA graphs of attention and Mamba (their
private memory pools included), as for the bridge2604 rows.
"""
from __future__ import annotations

from pipesim.whatif.validation_bridge_2604 import _recipe

# row id (without the "bridgemem-" prefix) -> training keys
ROWS = {
    "h100-nemotron-3-nano-bf16-moe": _recipe(flex=True, modules=["moe"]),
    "h100-nemotron-3-nano-bf16-moe-layernorm": _recipe(flex=True, modules=["moe", "layernorm"]),
}
