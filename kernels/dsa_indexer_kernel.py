"""DeepSeek sparse attention's lightning-indexer scores in Triton (DeepSeek-AI 2025, "DeepSeek-V3.2-Exp",
Eq. 1): I[t, s] = sum_j w[t, j] · ReLU(q[t, j] · k[s]) over the causal keys s <= t, -inf above the
diagonal, fp32 out; the scores the top-k selection reads (pipesim/costs/dsa.py costs this op).

Shapes: q (batch, seq, heads, head_dim), k (batch, seq, head_dim) (one key head shared by the
indexer heads), w (batch, seq, heads) fp32 (the head weights, scales folded in); out (batch, seq,
seq) fp32. head_dim a power of two in 16..128; any seq (tails masked). One program per (query
block, key block, batch): the per-head products go through the tensor cores, the ReLU, weight and
sum over the heads stay in registers, and a key block wholly above the diagonal only writes -inf.
Forward only: Megatron trains the indexer on a KL loss over the selected keys (not this kernel).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_device, dot_precision, launch


@triton.jit
def _index_scores_kernel(Q, K, W, OUT, s_qb, s_qm, s_qh, s_kb, s_kn, s_wb, s_wm, s_ob, s_om, S,
                         HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    start_n = tl.program_id(1)
    b = tl.program_id(2)
    rm = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rd = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if start_n * BLOCK_N <= start_m * BLOCK_M + BLOCK_M - 1:       # some key at or before a query
        kt = tl.load(K + b * s_kb + rn[None, :] * s_kn + rd[:, None], mask=rn[None, :] < S, other=0.0)
        for h in range(HEADS):
            q = tl.load(Q + b * s_qb + rm[:, None] * s_qm + h * s_qh + rd[None, :], mask=rm[:, None] < S,
                        other=0.0)
            w = tl.load(W + b * s_wb + rm * s_wm + h, mask=rm < S, other=0.0)
            acc += w[:, None] * tl.maximum(tl.dot(q, kt, input_precision=PRECISION), 0.0)
    valid = (rm[:, None] >= rn[None, :]) & (rn[None, :] < S)
    acc = tl.where(valid, acc, float("-inf"))
    tl.store(OUT + b * s_ob + rm[:, None] * s_om + rn[None, :], acc, mask=(rm[:, None] < S) & (rn[None, :] < S))


def _blocks(q, cuda: bool | None = None):
    if q.is_cuda if cuda is None else cuda:
        return dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2)
    return dict(BLOCK_M=16, BLOCK_N=16)       # interpreter: small tiles, few programs' worth of work


def index_scores(q, k, w):
    """Launcher: -> fp32 (batch, seq, seq) scores, -inf above the diagonal."""
    check_device(q, k, w)
    B, S, H, D = q.shape
    if k.shape != (B, S, D) or w.shape != (B, S, H):
        raise ValueError(f"index_scores: q {tuple(q.shape)}, k {tuple(k.shape)}, w {tuple(w.shape)}: expected k "
                         f"(batch, seq, head_dim) and w (batch, seq, heads)")
    q, k, w = q.contiguous(), k.contiguous(), w.float().contiguous()
    out = torch.empty(B, S, S, device=q.device, dtype=torch.float32)
    cfg = _blocks(q)
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), triton.cdiv(S, cfg["BLOCK_N"]), B)
    launch(_index_scores_kernel, q)[grid](q, k, w, out, q.stride(0), q.stride(1), q.stride(2), k.stride(0),
                                          k.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1), S,
                                          HEADS=H, HEAD_DIM=D, PRECISION=dot_precision(q.dtype), **cfg)
    return out


def index_scores_reference(q, k, w):
    """The same scores in torch (fp32): the CPU calibration runner and the tests' reference."""
    S = q.shape[1]
    dots = torch.einsum("bthd,bsd->btsh", q.float(), k.float()).relu()
    scores = (dots * w.float()[:, :, None, :]).sum(-1)
    above = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(above, float("-inf"))
