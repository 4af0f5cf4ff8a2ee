"""Eager-PyTorch elementwise ops (`training.kernel_fusion: eager`): the extra memory passes of a
model written op by op, as torchtitan's Llama (torchtitan/models/llama/model.py and
models/norms.py, 2024) runs without torch.compile, against the fused kernels pipesim costs by
default (Megatron-Core / Transformer Engine: one pass per norm, rotary, SwiGLU).

Bytes per element of the op's input, counted from the code (bf16 activations, fp32 where the
code casts up); the fused op already costs (reads + writes)·2 forward and (reads + writes + 1)·2
backward (pipesim/costs/layers.py vector()), so only the difference is added:

  RMSNorm   forward  x.float() 2+4, pow(2) 4+4, mean 4, x·rstd 4+4, .type_as 4+2, ·weight 2+2 = 36
            backward autograd through the same chain (·weight 8, cast 6, x·rstd 16, mean 4,
                     pow 12, summing the two paths into dx 12, cast back 6)                   = 64
            saved    x.float() (4) for pow and x·rstd, the cast output (2) for ·weight         = 6
  rotary    forward  q.float() 2+4, complex multiply 4+4 (complex64 = 4 bytes per real
                     element), .type_as 4+2                                                  = 20
            backward the three in reverse: 6 + 8 + 6                                         = 20
  SwiGLU    forward  silu(a) 2+2, silu(a)·b 2+2+2 (per element of the f-wide output)         = 10
            backward mul: g·b and g·silu(a) 12, silu' 6                                      = 18
            saved    a for silu, silu(a) and b for the product                               = 6
  GQA       repeat_kv: expand + reshape copies K and V to every query head, forward
            read 2 + write 2·rep per kv element, backward the sum back (2·rep + 2)
  attention output: transpose(1, 2).contiguous() before wo, 2 + 2 each way (the eager core
            only: SDPA's flash kernel writes its output as (b, s, h, d) and returns a transposed
            view, aten _scaled_dot_product_flash_attention_cuda, so the call copies nothing)
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.ops import Op

NORMS = ("ln1", "ln2", "final_norm")
# (forward, backward, saved) bytes per input element, from the table above
EAGER = {"norm": (36.0, 64.0, 6.0), "rope": (20.0, 20.0, 0.0), "swiglu": (10.0, 18.0, 6.0)}
# what pipesim's fused ops already count per element (pipesim/costs/layers.py): norm and rope
# read 1 write 1 (+1 backward), SwiGLU reads its 2 halves and writes 1 (backward 5 elements)
FUSED = {"norm": (4.0, 6.0, 2.0), "rope": (4.0, 6.0, 0.0), "swiglu": (6.0, 10.0, 4.0)}


def _kind(op: Op, gated: bool, rmsnorm: bool) -> str | None:
    if op.name in NORMS:
        return "norm" if rmsnorm else None       # nn.LayerNorm is one fused kernel in eager PyTorch too
    if op.name == "rope":
        return "rope"
    if op.name == "act" and gated:
        return "swiglu"
    return None


# forward FLOPs per element pipesim gives each op (pipesim/costs/layers.py): recovers its size
FLOPS_PER_ELEMENT = {"norm": 8.0, "rope": 3.0, "swiglu": 8.0}


def _elements(op: Op, kind: str) -> float:
    return op.flops_fwd / FLOPS_PER_ELEMENT[kind]


def eager_ops(ops: list[Op], gated: bool, rmsnorm: bool, kv_elems: float = 0.0, rep: int = 1,
              attn_out_elems: float = 0.0) -> list[Op]:
    """`ops` with the eager extra bytes on the norms, rotary and SwiGLU, plus the GQA repeat and
    the attention-output transpose as their own memory-bound ops (kv_elems: K (= V) elements per
    GPU; rep: query heads per kv head; attn_out_elems: attention output elements per GPU)."""
    out = []
    for op in ops:
        kind = _kind(op, gated, rmsnorm)
        if kind is None:
            out.append(op)
            continue
        n = _elements(op, kind)
        (ef, eb, es), (ff, fb, fs) = EAGER[kind], FUSED[kind]
        out.append(replace(op, bytes_fwd=op.bytes_fwd + (ef - ff) * n, bytes_bwd=op.bytes_bwd + (eb - fb) * n,
                           saved_bytes=op.saved_bytes + (es - fs) * n if op.saved_bytes else op.saved_bytes))
        if op.name == "rope" and rep > 1:
            # K and V copied to every query head (both forward; the backward sums them back)
            out.append(Op("kv_repeat", "vector", 0.0, 2 * rep * kv_elems,
                          2 * kv_elems * (2 + 2 * rep), 2 * kv_elems * (2 * rep + 2),
                          saved_bytes=2 * kv_elems * 2 * (rep - 1)))
    if attn_out_elems:
        at = next((i for i, o in enumerate(out) if o.name == "proj"), None)
        if at is not None:
            out.insert(at, Op("attn_transpose", "vector", 0.0, 0.0, 4 * attn_out_elems, 4 * attn_out_elems))
    return out
