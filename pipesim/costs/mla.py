"""Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", arXiv 2405.04434, Sec. 2.1.2-2.1.3,
Eq. 9-19; used unchanged by DeepSeek-V3, arXiv 2412.19437, Sec. 2.1.1) as ops.

Queries: h -> q_lora_rank (down) -> RMSNorm -> heads·(nope + rope) (up); without q compression one
h -> heads·(nope + rope) projection. Keys/values: h -> kv_lora_rank + rope (down, the rope part is
the shared decoupled key) -> RMSNorm -> heads·(nope + v) (up). Attention runs with q/k head dim
nope + rope and v head dim v; the output projection maps heads·v -> h.
Tensor parallelism (1D), as Megatron-Core's Transformer Engine spec builds it
(transformer/multi_latent_attention.py: the down-projections are TELinear with parallel_mode
"duplicated"): the up-projections and the output projection are split by heads like column/row
linears; the down-projections hold the whole weight on every tensor rank and run on the rank's
own tokens (its sequence-parallel shard; every token without sequence parallelism), with their
norms. The sequence-parallel all-gather therefore moves the latents (q_lora_rank, and
kv_lora_rank with the rope key), at the up-projections, not the hidden state. Both
down-projections read the same normalized input: it is kept once. Not modelled: the all-reduce
over the tensor group of the duplicated weights' gradients (once per step). 2D/2.5D/3D tensor
parallelism splits the down-projections like the others.
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.layers import Shapes, flash_attention, matmul, vector
from pipesim.costs.ops import Op
from pipesim.costs.tensor_parallel import TensorSplit
from pipesim.scenario.config import Scenario


def mla_attention_ops(s: Scenario, sh: Shapes) -> list[Op]:
    m, dtype = s.model, s.training.precision
    tp, e, T = sh.tp, sh.e, sh.tokens
    tok = T / tp.token_div
    heads = sh.a / tp.head_div
    qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim
    ops: list[Op] = []

    def lin(name: str, k: int, n: int, role: str = "column", comm: bool = False) -> Op:
        saved = (T / tp.size if role == "row" else tok if comm else T) * k * e
        op = matmul(name, T, k, n, sh, role, saved_input=saved, dtype=dtype, bias=m.bias)
        return op if comm else replace(op, comm_fwd=(), comm_bwd=())

    one_d = tp.mode == "1d"
    # the rank's own tokens and the whole weight: a duplicated linear (1D) on the local shard
    local = replace(sh, tp=TensorSplit(mode="1d", size=1, q=1)) if one_d else sh
    rows = tok if one_d else T

    def down(name: str, n: int, keep: bool) -> Op:
        """`keep`: the op is the first reader of the normalized input (it keeps it; a second
        reader shares the tensor, except under FP8, where each linear keeps its own 1-byte copy)."""
        if not one_d:
            return lin(name, sh.h, n, comm=keep)
        saved = rows * sh.h * e if keep or dtype == "fp8" else 0.0
        return matmul(name, rows, sh.h, n, local, "column", saved_input=saved, dtype=dtype, bias=m.bias)

    def rmsnorm(name: str, width: int) -> Op:
        return replace(vector(name, rows * width, local, (8, 10), saved_bytes=rows * width * e, params=width),
                       param_tensors=1)

    if m.q_lora_rank:
        ops += [down("q_down", m.q_lora_rank, keep=True), rmsnorm("q_norm", m.q_lora_rank),
                lin("q_up", m.q_lora_rank, sh.a * qk_dim, comm=one_d)]
    else:
        ops.append(lin("q_proj", sh.h, sh.a * qk_dim, comm=True))
    ops += [down("kv_down", m.kv_lora_rank + m.qk_rope_head_dim, keep=not (m.q_lora_rank or one_d)),
            rmsnorm("kv_norm", m.kv_lora_rank)]
    proj = lin("proj", sh.a * m.v_head_dim, sh.h, role="row", comm=True)
    if m.attention_variant == "dsa":      # absorbed up-projections around sparse attention
        from pipesim.costs.context import PREFIX
        from pipesim.costs.dsa import dsa_core_ops
        # the projection's input is v_up's output, a tensor of its own (kept)
        return ops + dsa_core_ops(s, sh, f"{PREFIX}0" if sh.cp > 1 else "attention") + [proj]
    ops.append(gather_rope(lin("kv_up", m.kv_lora_rank, sh.a * (m.qk_nope_head_dim + m.v_head_dim), comm=one_d),
                           m.kv_lora_rank, m.qk_rope_head_dim))
    # rotary embedding of the rope parts and the kernel's contiguous Q, K (the shared rope key
    # broadcast to every head) and V: one memory pass (Megatron-Core multi_latent_attention.py,
    # fused_apply_mla_rope_for_q / _for_kv, or apply_rotary_pos_emb + torch.cat + .contiguous())
    ops.append(rope_pass("mla_rope", T, reads=heads * (qk_dim + m.qk_nope_head_dim + m.v_head_dim)
                         + m.qk_rope_head_dim, writes=heads * (2 * qk_dim + m.v_head_dim),
                         rotated=T * (heads + 1) * m.qk_rope_head_dim, e=e))
    # Fused attention with q/k dim qk and v dim v: 2bs^2a(qk + v) forward FLOPs = flash's 4bs^2ad
    # at d = (qk + v)/2 (Dao et al. 2022, Sec. 3.1).
    core = replace(sh, d=(qk_dim + m.v_head_dim) / 2)
    if sh.cp > 1:        # context parallelism: the blocks of pipesim.costs.context
        from pipesim.costs.context import context_attention_ops
        ops += context_attention_ops(s, core, heads, heads, dtype)
    else:
        ops.append(flash_attention(core, heads, heads, dtype, m.causal, mla=True))
    # its BF16 input is the kernel's kept output O (pipesim.costs.layers: held once)
    ops.append(proj if dtype == "fp8" else replace(proj, saved_bytes=0.0))
    return ops


def gather_rope(op: Op, latent: int, rope: int) -> Op:
    """kv_up's sequence-parallel all-gather (and its reduce-scatter) also carries the shared rope
    key, which leaves kv_down beside the latent."""
    def widen(comms):
        return tuple(replace(c, bytes=c.bytes * (latent + rope) / latent) for c in comms)
    return replace(op, comm_fwd=widen(op.comm_fwd), comm_bwd=widen(op.comm_bwd))


def rope_pass(name: str, tokens: float, reads: float, writes: float, rotated: float, e: float) -> Op:
    """A memory-bound pass that rotates the rope dims and lays out the attention operands:
    `reads` / `writes` elements per token, `rotated` elements rotated in all (2 mul + 1 add each,
    RoFormer Eq. 34); the backward runs the same pass on the gradients."""
    nbytes = tokens * (reads + writes) * e
    return Op(name, "vector", 3 * rotated, 3 * rotated, nbytes, nbytes)
