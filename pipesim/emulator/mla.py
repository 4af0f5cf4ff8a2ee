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
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from pipesim.emulator.layers import enter_tp, exit_tp, recompute


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

    def core(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)

    def forward(self, x, cp=None):
        """x: [s, b, h] (this rank's sequence shard under sequence parallelism); `cp`: the
        emulator.context.ContextGroup under context parallelism (its exchange runs the core)."""
        if self.q_lora:
            q = self.q_up(enter_tp(self.q_norm(self.q_down(x)), self.tp))
        else:
            q = self.q_proj(enter_tp(x, self.tp))
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
        if cp is not None:          # [b·heads, s, dims] as the exchanges take them
            core = functools.partial(cp.attention, heads=H)
        else:
            shape = (bsz, H, s)
            q, k, v = q.reshape(*shape, -1), k.reshape(*shape, -1), v.reshape(*shape, -1)
            core = self.core
        o = recompute(core, q, k, v) if self.recompute_mode == "selective" else core(q, k, v)
        o = o.reshape(bsz, H, s, self.dv).permute(2, 0, 1, 3).reshape(s, bsz, H * self.dv)
        return exit_tp(self.proj(o), self.tp)
