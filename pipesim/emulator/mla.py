"""Multi-head latent attention for the emulator, as pipesim/costs/mla.py costs it and Megatron-Core's
Transformer Engine spec builds it (DeepSeek-V2 arXiv 2405.04434 Sec. 2.1, Eq. 9-19;
megatron/core/transformer/multi_latent_attention.py):

  c_q = RMSNorm(W_DQ x)              duplicated on every tensor rank, on the rank's own tokens
  [c_kv; k_r] = W_DKV x              duplicated likewise; c_kv = RMSNorm(c_kv)
  q = W_UQ c_q                       column-parallel by heads, after the sequence all-gather of c_q
  [k_nope; v] = W_UKV c_kv           column-parallel by heads, after the all-gather of [c_kv; k_r]
  q = [q_nope; rope(q_r)], k = [k_nope; rope(k_r)] (k_r shared by the heads)
  o = softmax(q k^T / sqrt(nope + rope)) v,  out = W_O o   (row-parallel)

The duplicated weights see only this rank's tokens under sequence parallelism: their gradients
are all-reduced over the tensor group with the norms' (executor._sequence_parallel_grads).

DeepSeek sparse attention (`attention_variant: dsa`, `dsa_indexer_loss: none`; DeepSeek-V3.2-Exp
Sec. 2.1, pipesim/costs/dsa.py): a lightning indexer, duplicated on every tensor rank over every
token (x and c_q all-gathered under sequence parallelism, detached, no gradient) scores the causal
keys (kernels/dsa_indexer_kernel.py's reference: sum over the indexer heads of w · ReLU(q_I · k_I),
rotary on the first rope dims of q_I and k_I), and each query attends only to its top-k keys: the
same MLA attention under that mask (the absorbed form the cost model times computes the same
numbers). The indexer loss is not emulated.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from pipesim.emulator.layers import column, enter_tp, exit_tp, recompute


class LatentNorm(torch.nn.Module):
    """RMSNorm over a latent of `width` (replicated over the tensor group)."""

    def __init__(self, b, name: str, width: int):
        super().__init__()
        self.weight = b.tensor(f"{name}.weight", (width,), kind="ones", seq_sharded_grad=True)

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, eps=1e-6)


class LatentAttention(torch.nn.Module):
    def __init__(self, b, prefix: str, recompute_mode: str, rotary):
        super().__init__()
        m, tp = b.s.model, b.tp
        self.tp, self.recompute_mode, self.rotary = tp, recompute_mode, rotary
        self.heads = m.num_attention_heads // tp.size
        self.nope, self.rope, self.dv, self.rkv = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
        a, h, qk = m.num_attention_heads, m.hidden_size, m.qk_nope_head_dim + m.qk_rope_head_dim
        self.q_lora = m.q_lora_rank
        if self.q_lora:
            self.q_down = b.linear(f"{prefix}.q_down", h, self.q_lora, "duplicated", False)
            self.q_norm = LatentNorm(b, f"{prefix}.q_norm", self.q_lora)
            self.q_up = b.linear(f"{prefix}.q_up", self.q_lora, a * qk, "column", False)
        else:
            self.q_proj = b.linear(f"{prefix}.q_proj", h, a * qk, "column", False)
        self.kv_down = b.linear(f"{prefix}.kv_down", h, self.rkv + self.rope, "duplicated", False)
        self.kv_norm = LatentNorm(b, f"{prefix}.kv_norm", self.rkv)
        self.kv_up = b.linear(f"{prefix}.kv_up", self.rkv, a * (self.nope + self.dv), "column", False)
        self.proj = b.linear(f"{prefix}.proj", a * self.dv, h, "row", False)
        self.scale = 1.0 / math.sqrt(qk)
        self.indexer = Indexer(b, f"{prefix}.indexer") if m.attention_variant == "dsa" else None

    def core(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)

    def forward(self, x, cp=None):
        """x: [s, b, h] (this rank's sequence shard under sequence parallelism); `cp`: the
        emulator.context.ContextGroup under context parallelism (its exchange runs the core)."""
        if self.q_lora:
            c_q = self.q_norm(self.q_down(x))
            if self.indexer is not None:        # DSA's indexer reads the gathered latent too: kept
                c_q = enter_tp(c_q, self.tp)
                q = self.q_up(c_q)
            else:
                q = column(self.q_up, c_q, self.tp)
        else:
            q = column(self.q_proj, x, self.tp)
        c_kv, k_r = self.kv_down(x).split([self.rkv, self.rope], dim=-1)
        latent = enter_tp(torch.cat([self.kv_norm(c_kv), k_r], dim=-1), self.tp)
        c_kv, k_r = latent.split([self.rkv, self.rope], dim=-1)
        kv = self.kv_up(c_kv)
        s, bsz, _ = q.shape
        H = self.heads
        # [b·heads, s, dims] per head, as the rotary helper takes them
        q = q.view(s, bsz, H, self.nope + self.rope).permute(1, 2, 0, 3).reshape(bsz * H, s, -1)
        kv = kv.view(s, bsz, H, self.nope + self.dv).permute(1, 2, 0, 3).reshape(bsz * H, s, -1)
        q_nope, q_r = q.split([self.nope, self.rope], dim=-1)
        k_nope, v = kv.split([self.nope, self.dv], dim=-1)
        pos = cp.positions if cp is not None else None
        k_r = self.rotary(k_r.permute(1, 0, 2), positions=pos)              # [b, s, rope]: one shared head
        k_r = k_r.unsqueeze(1).expand(bsz, H, s, self.rope).reshape(bsz * H, s, self.rope)
        q = torch.cat([q_nope, self.rotary(q_r, positions=pos)], dim=-1)
        k = torch.cat([k_nope, k_r], dim=-1)
        if cp is not None and self.indexer is None:     # [b·heads, s, dims] as the exchanges take them
            core = functools.partial(cp.attention, heads=H)
        else:                                               # the fused kernel's [b, heads, s, dims]
            q, k, v = (t.reshape(bsz, H, s, -1) for t in (q, k, v))
            core = self.core
            if self.indexer is not None:     # each query's top-k keys (the loader: no CP with dsa here)
                allowed = self.indexer(x, c_q, self.tp, self.rotary)                 # [b, s, s]
                core = functools.partial(F.scaled_dot_product_attention, attn_mask=allowed[:, None],
                                         scale=self.scale)
        o = recompute(core, q, k, v) if self.recompute_mode == "selective" else core(q, k, v)
        o = o.reshape(bsz, H, s, self.dv).permute(2, 0, 1, 3).reshape(s, bsz, H * self.dv)
        return exit_tp(self.proj(o), self.tp)


class Indexer(torch.nn.Module):
    """DSA's lightning indexer, frozen (no gradient): which keys each query attends to."""

    def __init__(self, b, prefix: str):
        super().__init__()
        m = b.s.model
        self.heads, self.dim, self.topk, self.rope = (m.dsa_index_heads, m.dsa_index_head_dim, m.dsa_index_topk,
                                                      m.qk_rope_head_dim)
        self.wq = b.linear(f"{prefix}.wq", m.q_lora_rank, self.heads * self.dim, "duplicated", False)
        self.wk = b.linear(f"{prefix}.wk", m.hidden_size, self.dim, "duplicated", False)
        self.k_norm_w = b.tensor(f"{prefix}.k_norm.weight", (self.dim,), kind="ones", seq_sharded_grad=True)
        self.k_norm_b = b.tensor(f"{prefix}.k_norm.bias", (self.dim,), kind="small", seq_sharded_grad=True)
        self.ww = b.linear(f"{prefix}.ww", m.hidden_size, self.heads, "duplicated", False)

    @torch.no_grad()
    def forward(self, x, c_q, tp, rotary):
        """x: [s_local, b, h], c_q: [s, b, q_lora] (gathered) -> bool [b, s, s], True where a query
        attends a key: its top-k causal keys by the indexer's score."""
        from pipesim.kernels.dsa_indexer_kernel import index_scores_reference
        if tp.sp:
            x = tp.all_gather0(x, "dsa_indexer")
        s, bsz, _ = x.shape
        q = self.wq(c_q.detach()).view(s, bsz, self.heads, self.dim).permute(1, 0, 2, 3)      # [b, s, H_I, d_I]
        k = F.layer_norm(self.wk(x), (self.dim,), self.k_norm_w, self.k_norm_b).permute(1, 0, 2)   # [b, s, d_I]
        w = self.ww(x).permute(1, 0, 2) * (self.heads ** -0.5 * self.dim ** -0.5)                # [b, s, H_I]
        r = self.rope
        q_pe = rotary(q[..., :r].permute(0, 2, 1, 3).reshape(bsz * self.heads, s, r))
        q = torch.cat([q_pe.view(bsz, self.heads, s, r).permute(0, 2, 1, 3), q[..., r:]], dim=-1)
        k = torch.cat([rotary(k[..., :r]), k[..., r:]], dim=-1)
        scores = index_scores_reference(q, k, w)                                               # -inf above the diagonal
        top = scores.topk(min(self.topk, s), dim=-1).indices
        picked = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, top, True)
        return picked & torch.isfinite(scores)
