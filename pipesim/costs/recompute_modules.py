"""Megatron-Core's fine-grained selective recompute: `training.recompute: selective` re-runs the
submodules listed in `training.recompute_modules` in the backward (megatron/core/transformer/
transformer_config.py, recompute_modules: "core_attn", "moe_act", "layernorm", "mla_up_proj",
"mlp", "moe", "shared_experts"; default ["core_attn"]).

Two kinds, as Megatron-Core runs them:
- output-discarding (layernorm, moe_act, mla_up_proj: CheckpointWithoutOutput): the module keeps
  its input, and its output - the tensor its consumers saved for their backward - is freed after
  the forward and recomputed before the consumers' backward. Freed: what those consumers saved
  (the norms' outputs the next linears keep; the expert activation's output expert_fc2 keeps; the
  up-projections' Q, K, V the attention kernel keeps).
- checkpointed (mlp, moe, shared_experts: CheckpointFunction): the module keeps its input only
  and re-runs its whole forward, tensor-parallel collectives included (the MoE block's dispatch
  and combine all-to-all too: costs/moe.py). Freed: what its ops other than the first saved.
A module's FP8 casts are re-run with it.
"core_attn" is the Korthikanti et al. selective recompute (costs/stage.py layer_recompute): the
eager attention core's score tensors; with a fused (flash) kernel there is nothing to free.
"""
from __future__ import annotations

from pipesim.costs.layers import FP32, shapes_of
from pipesim.costs.ops import Op

_SHARED = ("shared_fc1", "shared_act", "shared_fc2")
_MOE_BLOCK = ("router", "router_topk", "moe_latent_down", "permute", "expert_fc1", "expert_act", "expert_fc2",
              "unpermute", "moe_latent_up") + _SHARED
# module -> ops (by name, pipesim/costs/layers.py, mla.py, moe.py) re-run in the backward
RERUN = {"layernorm": ("ln1", "ln2"), "moe_act": ("expert_act",), "mla_up_proj": ("q_up", "kv_up", "q_absorb"),
         "mlp": ("fc1", "act", "fc2"), "moe": _MOE_BLOCK, "shared_experts": _SHARED}
# module -> ops whose saved inputs the module's recompute frees (the attention kernel's Q, K, V
# for mla_up_proj: mla_freed)
FREED = {"layernorm": ("qkv", "q_down", "kv_down", "q_proj", "fc1", "router", "shared_fc1"),
         "moe_act": ("expert_fc2",), "mlp": ("act", "fc2"), "moe": _MOE_BLOCK[1:], "shared_experts": _SHARED[1:]}
CHECKPOINTED = ("mlp", "moe", "shared_experts")
CAST = "_fp8_cast"          # costs/fp8.py cast_ops: one per low-precision GEMM op


def mla_freed(s, ops: list[Op]) -> float:
    """Q, K and V of an MLA layer's attention: what the up-projections' recompute frees (the
    kernel keeps Q, K, V, O and the log-sum-exp; Q and K have nope + rope dims, V and O v dims).
    DSA (absorbed MLA): the sparse kernel's query, kv_lora_rank + rope dims per head; its latent
    key comes from kv_down, not an up-projection."""
    m, sh = s.model, shapes_of(s)
    if m.attention_variant == "dsa":
        if not any(o.name == "q_absorb" for o in ops):
            return 0.0
        return sh.tokens * sh.a / sh.tp.head_div * (m.kv_lora_rank + m.qk_rope_head_dim) * sh.e
    att = next((o for o in ops if o.name == "attention" and o.flash), None)
    if att is None or not any(o.name in RERUN["mla_up_proj"] for o in ops):
        return 0.0
    heads = sh.a / sh.tp.head_div
    qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    tensors = att.saved_bytes - sh.b * heads * sh.s * FP32
    return tensors * (2 * qk + v) / (2 * qk + 2 * v)


def module_recompute(s, cm, ops: list[Op], modules) -> tuple[float, list, float]:
    """(compute seconds re-run in the backward, the collectives re-run with them, saved bytes
    freed) of one layer's `ops` under the recompute modules other than core_attn."""
    rerun = {name for m in modules for name in RERUN.get(m, ())}
    freed = {name for m in modules for name in FREED.get(m, ())}
    seconds = sum(cm.time(o, "fwd").seconds for o in ops if o.name.removesuffix(CAST) in rerun)
    # a checkpointed module re-runs its collectives too (fc1's sequence-parallel all-gather, fc2's
    # reduce-scatter)
    again = {name for m in modules if m in CHECKPOINTED for name in RERUN[m]}
    comms = [c for o in ops if o.name in again for c in o.comm_fwd]
    dropped = sum(o.saved_bytes for o in ops if o.name in freed)
    if "mla_up_proj" in modules:
        dropped += mla_freed(s, ops)
    return seconds, comms, dropped
