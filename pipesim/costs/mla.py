"""Multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2", arXiv 2405.04434, Sec. 2.1.2-2.1.3,
Eq. 9-19; used unchanged by DeepSeek-V3, arXiv 2412.19437, Sec. 2.1.1) as ops.

Queries: h -> q_lora_rank (down) -> RMSNorm -> heads·(nope + rope) (up); without q compression one
h -> heads·(nope + rope) projection. Keys/values: h -> kv_lora_rank + rope (down, the rope part is
the shared decoupled key) -> RMSNorm -> heads·(nope + v) (up). Attention runs with q/k head dim
nope + rope and v head dim v; the output projection maps heads·v -> h.
Tensor parallelism: the up-projections and the output projection are split by heads like Megatron's
column/row linears; the down-projections are costed as column-parallel too (they are small: 3 % of
the layer's FLOPs in DeepSeek-V3), with the sequence-parallel all-gather paid once for both.
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.layers import Shapes, flash_attention, matmul, vector
from pipesim.costs.ops import Op
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

    def rmsnorm(name: str, width: int) -> Op:
        return replace(vector(name, T * width, sh, (8, 10), saved_bytes=T * width * e, params=width),
                       param_tensors=1)

    if m.q_lora_rank:
        ops += [lin("q_down", sh.h, m.q_lora_rank, comm=True), rmsnorm("q_norm", m.q_lora_rank),
                lin("q_up", m.q_lora_rank, sh.a * qk_dim)]
    else:
        ops.append(lin("q_proj", sh.h, sh.a * qk_dim, comm=True))
    ops += [lin("kv_down", sh.h, m.kv_lora_rank + m.qk_rope_head_dim, comm=not m.q_lora_rank),
            rmsnorm("kv_norm", m.kv_lora_rank)]
    proj = lin("proj", sh.a * m.v_head_dim, sh.h, role="row", comm=True)
    if m.attention_variant == "dsa":      # absorbed up-projections around sparse attention
        from pipesim.costs.context import PREFIX
        from pipesim.costs.dsa import dsa_core_ops
        # the projection's input is v_up's output, a tensor of its own (kept)
        return ops + dsa_core_ops(s, sh, f"{PREFIX}0" if sh.cp > 1 else "attention") + [proj]
    ops.append(lin("kv_up", m.kv_lora_rank, sh.a * (m.qk_nope_head_dim + m.v_head_dim)))
    # Fused attention with q/k dim qk and v dim v: 2bs^2a(qk + v) forward FLOPs = flash's 4bs^2ad
    # at d = (qk + v)/2 (Dao et al. 2022, Sec. 3.1).
    core = replace(sh, d=(qk_dim + m.v_head_dim) / 2)
    if sh.cp > 1:        # context parallelism: the blocks of pipesim.costs.context
        from pipesim.costs.context import context_attention_ops
        ops += context_attention_ops(s, core, heads, heads, dtype)
    else:
        ops.append(flash_attention(core, heads, heads, dtype, m.causal))
    # its BF16 input is the kernel's kept output O (pipesim.costs.layers: held once)
    ops.append(proj if dtype == "fp8" else replace(proj, saved_bytes=0.0))
    return ops
