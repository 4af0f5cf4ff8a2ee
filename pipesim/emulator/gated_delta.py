"""A Gated DeltaNet mixer on the emulated ranks: the layer pipesim/costs/gated_delta.py costs, run
for real (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", ICLR 2025; Megatron-Core
megatron/core/ssm/gated_delta_net).

in_proj to q, k, v, z, beta, alpha; the causal depthwise conv with SiLU over q, k, v; L2-normed q
and k, shared over Hv / Hk value heads; the gates beta = sigmoid(b) and g = -exp(A_log) ·
softplus(alpha + dt_bias); the delta rule
    S_t = exp(g_t) S_{t-1} + beta_t (v_t - exp(g_t) S_{t-1} k_t) k_t^T,   o_t = S_t q_t / sqrt(dk)
token by token (exact; the GPU kernel chunks it); the RMSNorm of each head's output gated by
silu(z); out_proj. The rule keeps only its inputs and re-runs in the backward, as the kernel does.
One tensor rank only (check_supported): the head-shared norm weight would need its gradient summed
over the tensor group.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from pipesim.emulator.layers import recompute
from pipesim.emulator.mamba import causal_conv


def delta_rule(q, k, v, g, beta, scale: float):
    """q, k [s, b, h, dk] (unit norm), v [s, b, h, dv], g and beta [s, b, h] -> o [s, b, h, dv]."""
    s, b, h, dk = k.shape
    state = k.new_zeros(b, h, v.shape[-1], dk)
    out = []
    for t in range(s):
        state = state * torch.exp(g[t])[..., None, None]
        recalled = torch.einsum("bhvk,bhk->bhv", state, k[t])
        state = state + torch.einsum("bhv,bhk->bhvk", beta[t][..., None] * (v[t] - recalled), k[t])
        out.append(torch.einsum("bhvk,bhk->bhv", state, q[t]) * scale)
    return torch.stack(out)


class GatedDeltaNet(torch.nn.Module):
    def __init__(self, b, prefix: str):
        super().__init__()
        m = b.s.model
        self.Hk, self.Hv, self.dk, self.dv = (m.gdn_num_key_heads, m.gdn_num_value_heads, m.gdn_key_head_dim,
                                              m.gdn_value_head_dim)
        K = m.mamba_conv_kernel
        qk, vd = self.Hk * self.dk, self.Hv * self.dv
        self.in_proj = b.linear(f"{prefix}.in_proj", m.hidden_size, 2 * qk + 2 * vd + 2 * self.Hv, "column", False,
                                parts=[qk, qk, vd, vd, self.Hv, self.Hv])
        self.conv_w = torch.nn.ParameterList(b.tensor(f"{prefix}.conv.{part}.weight", (n, K))
                                             for part, n in (("q", qk), ("k", qk), ("v", vd)))
        self.A_log = b.tensor(f"{prefix}.A_log", (self.Hv,), kind="small")
        self.dt_bias = b.tensor(f"{prefix}.dt_bias", (self.Hv,), kind="small")
        self.norm = b.tensor(f"{prefix}.norm.weight", (self.dv,), kind="ones")
        self.out_proj = b.linear(f"{prefix}.out_proj", vd, m.hidden_size, "row", False)

    def forward(self, x):
        """x: the layer's normed input [s, b, h]."""
        s, bsz = x.shape[:2]
        qk, vd, Hk, Hv = self.Hk * self.dk, self.Hv * self.dv, self.Hk, self.Hv
        q, k, v, z, beta, alpha = self.in_proj(x).split([qk, qk, vd, vd, Hv, Hv], dim=-1)
        q, k, v = (causal_conv(t, w) for t, w in zip((q, k, v), self.conv_w))
        rep = Hv // Hk                                     # value heads sharing a query/key head
        q, k = (F.normalize(t.reshape(s, bsz, Hk, self.dk), dim=-1).repeat_interleave(rep, dim=2) for t in (q, k))
        g = -torch.exp(self.A_log) * F.softplus(alpha + self.dt_bias)
        o = recompute(lambda *a: delta_rule(*a, self.dk ** -0.5), q, k, v.reshape(s, bsz, Hv, self.dv), g,
                      torch.sigmoid(beta))
        o = F.rms_norm(o, (self.dv,), eps=1e-5) * self.norm * F.silu(z.reshape(s, bsz, Hv, self.dv))
        return self.out_proj(o.reshape(s, bsz, vd))
