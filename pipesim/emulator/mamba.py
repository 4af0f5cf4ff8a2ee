"""A Mamba-2 mixer on the emulated ranks: the layer pipesim/costs/mamba.py costs, run for real.

in_proj (column-parallel: z, x, B, C, dt, each part split over the tensor group by heads and
groups), the causal depthwise conv with SiLU over x, B, C, the state-space scan, the gated
RMSNorm over groups, out_proj (row-parallel). The scan runs by chunks of mamba_chunk_size as the
GPU kernel does (ssd_chunked, Dao & Gu 2024, arXiv 2405.21060, Sec. 6); ssd_scan is the SSD
"dual" quadratic form y_t = sum_{s <= t} (C_t . B_s) exp(sum_{r=s+1..t} dt_r A) dt_s x_s + D x_t
that the tests check it against. Parameters are drawn per global name as model.py does, so any layout holds the same
model as one process.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from pipesim.emulator.layers import column, exit_tp, recompute


def segsum(a):
    """[..., Q] -> [..., Q, Q]: out[t, s] = a[s+1] + ... + a[t] for t >= s, -inf above."""
    q = a.shape[-1]
    cs = torch.cumsum(a, dim=-1)
    seg = cs[..., :, None] - cs[..., None, :]
    causal = torch.ones(q, q, dtype=torch.bool, device=a.device).tril()
    return seg.masked_fill(~causal, float("-inf"))


def ssd_chunked(x, dt, A, B, C, D, chunk: int):
    """The same scan by chunks of `chunk` tokens (Dao & Gu 2024, Sec. 6, Listing 1), as the GPU
    kernel runs it and pipesim/costs/mamba.py costs it: per chunk the quadratic form, the chunk's
    final state, the states passed along the chunks, their contribution to each output."""
    s, b, h, p = x.shape
    n = B.shape[-1]
    pad = -s % chunk                    # zero steps at the end: dt = 0 leaves the state alone
    if pad:
        x, dt, B, C = (torch.cat([t, t.new_zeros((pad,) + t.shape[1:])]) for t in (x, dt, B, C))
    c = x.shape[0] // chunk
    # [b, h, c, q] layouts for the decays, [b, c, q, h, *] for the rest
    a = (dt * A).permute(1, 2, 0).reshape(b, h, c, chunk)
    xs = (x * dt.unsqueeze(-1)).permute(1, 0, 2, 3).reshape(b, c, chunk, h, p)
    Bc = B.permute(1, 0, 2, 3).reshape(b, c, chunk, h, n)
    Cc = C.permute(1, 0, 2, 3).reshape(b, c, chunk, h, n)
    a_cs = torch.cumsum(a, dim=-1)
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, torch.exp(segsum(a)), xs)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, torch.exp(a_cs[..., -1:] - a_cs), xs)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    chunk_decay = torch.exp(segsum(F.pad(a_cs[..., -1], (1, 0))))          # [b, h, c+1, c+1]
    states = torch.einsum("bhzc,bchpn->bzhpn", chunk_decay, states)[:, :-1]
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states, torch.exp(a_cs))
    y = (y_diag + y_off).reshape(b, c * chunk, h, p).permute(1, 0, 2, 3)[:s]
    return y + D[:, None] * x[:s]


def ssd_scan(x, dt, A, B, C, D):
    """x [s, b, h, p], dt [s, b, h] (after softplus), A [h] (negative), B and C [s, b, h, n] (per
    head), D [h] -> y [s, b, h, p]."""
    s = x.shape[0]
    cs = torch.cumsum(dt * A, dim=0)                                   # [s, b, h]
    seg = cs.unsqueeze(1) - cs.unsqueeze(0)                            # [t, s', b, h]
    causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp(seg.masked_fill(~causal[:, :, None, None], float("-inf")))
    scores = torch.einsum("tbhn,sbhn->tsbh", C, B) * decay
    return torch.einsum("tsbh,sbhp->tbhp", scores, x * dt.unsqueeze(-1)) + D[:, None] * x


def causal_conv(u, w, bias=None):
    """Causal depthwise conv over time of u [s, b, c] with w [c, width] (Megatron's conv1d with
    padding width - 1), then SiLU."""
    y = F.conv1d(F.pad(u.permute(1, 2, 0), (w.shape[1] - 1, 0)), w.unsqueeze(1), bias, groups=w.shape[0])
    return F.silu(y).permute(2, 0, 1)


class Mamba(torch.nn.Module):
    def __init__(self, b, prefix: str):
        super().__init__()
        m, tp = b.s.model, b.tp
        t = tp.size
        H, self.P, N, G, self.K = m.mamba_heads, m.mamba_head_dim, m.mamba_state_dim, m.mamba_num_groups, \
            m.mamba_conv_kernel
        self.tp, self.heads, self.groups, self.N, self.chunk = tp, H // t, G // t, N, m.mamba_chunk_size
        d_inner = H * self.P
        self.in_proj = b.linear(f"{prefix}.in_proj", m.hidden_size, 2 * d_inner + 2 * G * N + H, "column", False,
                                parts=[d_inner, d_inner, G * N, G * N, H])
        # the conv's channels are x, B and C, each split over the tensor group like its in_proj part
        self.conv_w = torch.nn.ParameterList(b.tensor(f"{prefix}.conv.{part}.weight", (n, self.K), dim=0)
                                             for part, n in (("x", d_inner), ("B", G * N), ("C", G * N)))
        self.conv_b = torch.nn.ParameterList(b.tensor(f"{prefix}.conv.{part}.bias", (n,), dim=0, kind="small")
                                             for part, n in (("x", d_inner), ("B", G * N), ("C", G * N)))
        self.A_log = b.tensor(f"{prefix}.A_log", (H,), dim=0, kind="small")
        self.D = b.tensor(f"{prefix}.D", (H,), dim=0, kind="ones")
        self.dt_bias = b.tensor(f"{prefix}.dt_bias", (H,), dim=0, kind="small")
        self.norm = b.tensor(f"{prefix}.norm.weight", (d_inner,), dim=0, kind="ones")
        self.out_proj = b.linear(f"{prefix}.out_proj", d_inner, m.hidden_size, "row", False)

    def conv(self, u, i: int):
        return causal_conv(u, self.conv_w[i], self.conv_b[i])

    def forward(self, x):
        """x: the layer's normed input [s, b, h] (sequence-sharded under SP)."""
        proj = column(self.in_proj, x, self.tp)
        s, bsz = proj.shape[:2]
        d, gn, H, P = self.heads * self.P, self.groups * self.N, self.heads, self.P
        z, xs, B, C, dt = proj.split([d, d, gn, gn, H], dim=-1)
        xs, B, C = self.conv(xs, 0), self.conv(B, 1), self.conv(C, 2)
        rep = H // self.groups                              # heads sharing one group's B and C
        B = B.view(s, bsz, self.groups, self.N).repeat_interleave(rep, dim=2)
        C = C.view(s, bsz, self.groups, self.N).repeat_interleave(rep, dim=2)
        dt = F.softplus(dt + self.dt_bias)
        # the scan keeps only its inputs and re-runs in the backward, as the fused kernel does
        # (the saved tensors pipesim/costs/mamba.py counts)
        y = recompute(lambda *a: ssd_chunked(*a, self.chunk), xs.view(s, bsz, H, P), dt, -torch.exp(self.A_log),
                      B, C, self.D).reshape(s, bsz, d)
        # gated RMSNorm over each group's channels (Megatron RMSNormGated, norm after the gate)
        y = (y * F.silu(z)).view(s, bsz, self.groups, d // self.groups)
        y = F.rms_norm(y, (d // self.groups,), eps=1e-5).reshape(s, bsz, d) * self.norm
        return exit_tp(self.out_proj(y), self.tp)
