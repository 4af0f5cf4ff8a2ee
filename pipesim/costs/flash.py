"""Fused (flash) attention time from published kernel tables, by sequence length.

FLOPs follow the FlashAttention papers' convention (Dao 2023, FlashAttention-2, Sec. 4.1):
forward 4·b·heads·s²·d (half when causal), backward 2.5x the forward. The achieved TFLOP/s at a
sequence length is interpolated (log-linear in s, clamped at the table ends) in the GPU's table
(pipesim/presets/gpus.py: on Hopper the cuDNN / FlashAttention-2 / -3 bars of the FlashAttention-3
paper, Fig. 5; on Blackwell NVIDIA's cudnn-frontend benchmarks; head dim 128), times a head-dim
factor from the FlashAttention-3 paper's head-dim 64 and 256 panels.
A table with a measured causal backward (`bwd_causal`: the Blackwell cuDNN tables) uses it; the
others' backward is non-causal only, and a causal backward keeps the forward's causal/non-causal
ratio at that length (the same masked blocks are skipped).
"""
from __future__ import annotations

import math

from pipesim.presets.gpus import KERNEL_CURVES, interp_by_seq as _interp


def attention_tflops(curve: dict, seq: float, causal: bool, phase: str, kernel: str = "auto",
                     head_dim: float = 128, dtype: str = "bf16") -> float:
    """Achieved TFLOP/s of the fused attention kernel on this GPU (`kernel`: a name of the curve's
    `attention_kernels`, or "auto" for its default table) at `head_dim`; `dtype` "fp8" / "mxfp8":
    cuDNN's FP8 attention with per-tensor / MXFP8 scaling (the curve's `attention_fp8`)."""
    if dtype != "bf16":
        table, scale = curve["attention_fp8"][dtype]
    elif kernel == "auto":
        table, scale = curve["attention"], curve["attention_scale"]
    else:
        table, scale = curve["attention_kernels"][kernel]
    if phase == "fwd":
        key = "fwd_causal" if causal else "fwd"
        return scale * _interp(table[key], seq) * head_dim_factor(table, key, seq, head_dim)
    if causal and "bwd_causal" in table:
        bwd = _interp(table["bwd_causal"], seq)
    else:
        bwd = _interp(table["bwd"], seq)
        if causal:
            bwd *= _interp(table["fwd_causal"], seq) / _interp(table["fwd"], seq)
    return scale * bwd * head_dim_factor(table, "fwd", seq, head_dim)


def head_dim_factor(table: dict, key: str, seq: float, head_dim: float) -> float:
    """Rate at `head_dim` over the rate at 128 (the main table), from the kernel's head-dim 64 and
    256 panels (FlashAttention-3 paper, Fig. 5; H100 panels: a table measured at head dim 128 only
    names the H100 table whose panels it borrows in `head_dim_from`), log-linear in the head dim
    between them and held beyond; 1 for a table without them. The backward uses the forward
    non-causal factor (no published backward panel per head dim is used)."""
    table = table.get("head_dim_from", table)
    panels = table.get("head_dim")
    if not panels or head_dim == 128:
        return 1.0
    base = _interp(table[key], seq)
    lo, hi = (64, 128) if head_dim < 128 else (128, 256)
    rate = {128: base, **{d: _interp(p[key], seq) for d, p in panels.items()}}
    w = min(max((math.log(head_dim) - math.log(lo)) / (math.log(hi) - math.log(lo)), 0.0), 1.0)
    return (rate[lo] + w * (rate[hi] - rate[lo])) / base


def attention_kernel_of(s) -> str:
    """`training.attention_kernel: auto` is what the stack runs: Transformer Engine's choice
    (the curve's default table: cuDNN on Hopper and Blackwell) for the fused Megatron stack, and
    PyTorch SDPA's for a PyTorch-native one (kernel_fusion: eager, torchtitan-style): SDPA tries
    its backends in a fixed order with FlashAttention first (torch.nn.attention.SDPBackend;
    cuDNN only when asked for), i.e. the FlashAttention-2 table where the GPU has one. That is
    the order of the published torch-stack runs (torch <= 2.10); from 2.11 the wheels' bundled
    cuDNN passes the version gate of aten's check_prefer_cudnn_attention (cuDNN > 9.15, sm90 /
    sm100) and SDPA prefers cuDNN there: such a run sets `attention_kernel: cudnn`."""
    tr = s.training
    curve = s.system.gpu.kernel_curve
    if tr.attention_kernel != "auto" or tr.kernel_fusion != "eager" or curve is None:
        return tr.attention_kernel
    return "fa2" if "fa2" in KERNEL_CURVES.get(curve, {}).get("attention_kernels", {}) else "auto"
