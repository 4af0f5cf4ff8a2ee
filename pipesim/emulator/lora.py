"""LoRA adapters of the emulated model (training.lora_rank; pipesim/costs/lora.py is their cost):
the base weights frozen, a low-rank pair A (r x k), B (n x r) beside each targeted linear, laid
out over the tensor group as Megatron-Bridge's ParallelLinearAdapter lays them out
(src/megatron/bridge/peft/utils.py):
  - beside a column-parallel linear (qkv, fc1): A column-parallel (its r/t rows), its output
    gathered over the group (gather_output), then B column-parallel on the rank's output rows,
    its input gradient all-reduced (ColumnParallelLinear's copy_to_tensor_model_parallel_region);
  - beside a row-parallel linear (proj, fc2): A row-parallel on the rank's input slice, its output
    all-reduced, B column-parallel with its output gathered to the whole width (and under sequence
    parallelism split back to the rank's sequence shard).
The adapter's scaling (alpha / r) is 1 here: it changes no cost and no gradient test.
"""
from __future__ import annotations

import torch

from pipesim.emulator.layers import copy_to_tp, reduce_from_tp

ROLES = {"qkv": "column", "fc1": "column", "proj": "row", "fc2": "row"}


class _GatherLast(torch.autograd.Function):
    """Every rank's slice of the last dimension concatenated (Megatron's
    gather_from_tensor_model_parallel_region); the backward keeps the rank's slice."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.all_gather0(x, "fwd", dim=-1)

    @staticmethod
    def backward(ctx, g):
        return g.chunk(ctx.tp.size, -1)[ctx.tp.rank].contiguous(), None


class _SplitSeq(torch.autograd.Function):
    """The rank's shard of the sequence (Megatron's scatter_to_sequence_parallel_region); the
    backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.chunk(tp.size, 0)[tp.rank].contiguous()

    @staticmethod
    def backward(ctx, g):
        return ctx.tp.all_gather0(g, "bwd"), None


class Adapter(torch.nn.Module):
    """The adapter of linear `name` (k -> n; `parts` as the base's fused output is split)."""

    def __init__(self, b, name: str, k: int, n: int, parts=None):
        super().__init__()
        r, self.tp = b.s.training.lora_rank, b.tp
        self.role = ROLES[name.rsplit(".", 1)[-1]]
        self.a = b.linear(f"{name}.lora_a", k, r, "column" if self.role == "column" else "row", False)
        self.b = b.linear(f"{name}.lora_b", r, n, "column", False, parts=parts)

    def forward(self, x):
        tp = self.tp
        z = self.a(x)
        if tp.size == 1:
            return self.b(z)
        if self.role == "column":
            return self.b(copy_to_tp(_GatherLast.apply(z, tp), tp))
        y = _GatherLast.apply(self.b(copy_to_tp(reduce_from_tp(z, tp), tp)), tp)
        return _SplitSeq.apply(y, tp) if tp.sp else y


def adapters(b, prefix: str, shapes: dict) -> torch.nn.ModuleDict | None:
    """The block's adapters: `shapes` maps each linear to (k, n, parts); None without LoRA."""
    tr = b.s.training
    if not tr.lora_rank:
        return None
    return torch.nn.ModuleDict({name: Adapter(b, f"{prefix}.{name}", *shapes[name])
                                for name in tr.lora_targets if name in shapes})


def freeze_base(b) -> None:
    """Every parameter but the adapters' stops learning (requires_grad False): no gradient, no
    optimizer state, no data-parallel reduction."""
    for p_id, name in b.names.items():
        if ".lora_" not in name:
            b.params_by_id[p_id].requires_grad_(False)


def with_adapter(adapters, name: str, x, y):
    """`y` (the base linear's output on input `x`) plus its adapter's, when it has one."""
    if adapters is None or name not in adapters:
        return y
    return y + adapters[name](x)
