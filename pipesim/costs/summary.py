"""Model-level numbers: parameters, FLOPs per iteration, memory per GPU; profile shapes needed."""
from __future__ import annotations

from pipesim.costs.layers import embedding_ops, head_ops, layer_ops, mtp_ops
from pipesim.scenario.config import Scenario


def total_params(s: Scenario, learning: bool = False) -> float:
    """Whole-model parameters (unsharded), counted from the ops: per-GPU op params times the
    tensor split they were divided by. `learning`: only those that learn (LoRA freezes the rest)."""
    from dataclasses import replace
    unsharded = replace(s, parallel=replace(s.parallel, tensor=1, pipeline=1, data=1, context=1, sequence_parallel=False,
                                            tensor_mode="1d", virtual_stages=1, layers_per_stage=None,
                                            expert=1, expert_tensor=1))

    def count(ops) -> float:
        return sum(o.params for o in ops if not (learning and o.frozen))
    return sum(n * count(layer_ops(unsharded, moe)) for moe, n in layer_counts(s, weights=True)) \
        + count(extra_ops(unsharded, weights=True))


def layer_counts(s: Scenario, weights: bool = False) -> list[tuple[bool | str, int]]:
    """[(layer kind, number of layers)] of the whole model, its multi-token-prediction blocks
    included (built like the last layer, or as model.mtp_hybrid_pattern). Kinds: False (dense),
    True (MoE); a hybrid model's "mamba", "gdn", "attention", "mlp" and True (ModelConfig.layer_kind).
    `weights`: count repeated MTP depths once (layers with their own weights, not passes)."""
    m = s.model
    depths = m.mtp_weight_depths if weights else m.mtp_layers
    if m.hybrid_layer_pattern:
        kinds = [m.layer_kind(i) for i in range(m.num_layers)] + m.mtp_kinds * depths
        return [(k, kinds.count(k)) for k in dict.fromkeys(kinds)]
    moe = m.num_moe_layers + (depths if m.mtp_is_moe else 0)
    dense = m.num_layers + depths - moe
    return ([(False, dense)] if dense else []) + ([(True, moe)] if moe else [])


def extra_ops(s: Scenario, weights: bool = False) -> list:
    """The ops outside the layer stack: embedding, output head, and per MTP depth its own
    (`weights`: per depth with its own weights)."""
    depth = s.model.mtp_weight_depths if weights else s.model.mtp_layers
    return embedding_ops(s) + head_ops(s) + (mtp_ops(s) * depth if depth else [])


def active_params(s: Scenario, input_embedding: bool = True) -> float:
    """Parameters a token passes through: the routed experts count moe_top_k of num_experts.
    input_embedding=False leaves out the embedding table (a lookup), as OpenAI's gpt-oss model
    card counts active parameters."""
    from pipesim.costs.moe import expert_params
    from pipesim.costs.layers import shapes_of
    total = total_params(s)
    m = s.model
    if m.is_moe:
        from dataclasses import replace
        one = replace(s, parallel=replace(s.parallel, tensor=1, sequence_parallel=False, expert=1, expert_tensor=1))
        per_layer = expert_params(layer_ops(one, True))
        moe_layers = sum(n for kind, n in layer_counts(s, weights=True) if kind is True)
        total -= moe_layers * per_layer * (1 - m.moe_top_k / m.num_experts)
    if not input_embedding:
        sh = shapes_of(s)
        total -= sh.v * sh.h
    return total


def iteration_flops(s: Scenario) -> float:
    """Model FLOPs per optimizer step (forward + backward, no recompute), whole cluster."""
    from dataclasses import replace
    # model FLOPs: unsharded, with balanced routing (imbalance costs time, not model FLOPs)
    unsharded = replace(s, parallel=replace(s.parallel, tensor=1, context=1, sequence_parallel=False, tensor_mode="1d"),
                        training=replace(s.training, moe_routing="balanced"))
    per_mb = (sum(n * sum(model_flops(o) for o in layer_ops(unsharded, moe)) for moe, n in layer_counts(s))
              + sum(model_flops(o) for o in extra_ops(unsharded)))
    return per_mb * s.training.global_batch_size / s.training.micro_batch_size


def model_flops(op) -> float:
    """An op's forward + backward model FLOPs. A fused attention kernel's backward re-computes the
    scores (5 matmuls against the forward's 2: Dao 2023, "FlashAttention-2", Alg. 2), which the
    op's time counts; model FLOPs count the 4 matmuls of the gradient alone, twice the forward
    (Chowdhery et al. 2022, "PaLM", App. B: MFU leaves re-computation out). The same holds for a
    fused kernel with its own rate (DSA's sparse attention)."""
    fused = (op.flash or op.fused_attention) and op.flops_bwd
    return op.flops_fwd + (2 * op.flops_fwd if fused else op.flops_bwd)


def megatron_flops(s: Scenario, recompute: bool) -> float:
    """Narayanan et al. SC'21, Eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh) with full recompute
    (4 passes); without recompute the factor is 72 and V/(12lh)."""
    m, B = s.model, s.training.global_batch_size
    s_, l, h, V = m.seq_length, m.num_layers, m.hidden_size, m.vocab_size
    if recompute:
        return 96 * B * s_ * l * h * h * (1 + s_ / (6 * h) + V / (16 * l * h))
    return 72 * B * s_ * l * h * h * (1 + s_ / (6 * h) + V / (12 * l * h))


def megatron_core_flops(s: Scenario) -> float:
    """Model FLOPs per step as Megatron-Core's logger counts them for a GQA transformer, dense or
    MoE (megatron/training/training.py num_floating_point_operations, transformer_flops, since
    ADLR/megatron-lm!2789 of 2025-03-06, which halved the causal attention term):
      B·s·[12·L·h·(f_dense·D/L + (f_moe·k + f_shared)·M/L)·g + 12·L·h²·((1 + q/a) + s/2h)·r
           + 6·h·V]
    g = 3/2 for SwiGLU, q/a = query groups over heads, r = heads·head_dim / h, D and M the dense
    and MoE layers, V the vocabulary padded to 128·tensor (Megatron --make-vocab-size-divisible-by).
    Multi-latent attention (its `args.multi_latent_attention` branch) replaces 12·h²·(...) by
    (6 per multiply-accumulate over forward and backward) the projections q_lora·(h + a·(d_nope +
    d_rope) + 1) (or h·a·(d_nope + d_rope) without a q compression) + kv_lora·(h + a·(d_nope + d_v)
    + 1) + h·d_rope + a·d_v·h, and the causal core a·(d_nope + d_rope)·s/2 + a·d_v·s/2."""
    m, B = s.model, s.training.global_batch_size
    S, L, h = m.seq_length, m.num_layers, m.hidden_size
    gated = 1.5 if m.activation == "swiglu" else 1.0
    moe_layers = m.num_moe_layers if m.is_moe else 0
    dense = L - moe_layers
    mlp = m.ffn * dense / L
    if moe_layers:
        mlp += (m.moe_ffn * m.moe_top_k + m.num_shared_experts * m.moe_ffn) * moe_layers / L
    if m.attention_variant == "mla":
        a, qk, v = m.num_attention_heads, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        q = h * a * qk if m.q_lora_rank is None else m.q_lora_rank * (h + a * qk + 1)
        projections = q + m.kv_lora_rank * (h + a * (m.qk_nope_head_dim + v) + 1) + h * m.qk_rope_head_dim + a * v * h
        attention = (projections + S * (a * qk + a * v) / 2) / 2      # 12 x this = 6 x (projections + core)
    else:
        ratio = m.head_dim * m.num_attention_heads / h
        attention = h * h * ((1 + m.kv_heads / m.num_attention_heads) + S / h / 2) * ratio
    pad = 128 * s.parallel.tensor
    vocab = -(-m.vocab_size // pad) * pad
    return B * S * (12 * L * h * mlp * gated + 12 * L * attention + 6 * h * vocab)


def required_measurements(s: Scenario) -> list[tuple[str, dict]]:
    """The (op key, shape) lookups the cost model will ask a profile for, deduplicated."""
    ops = [o for moe, _ in layer_counts(s) for o in layer_ops(s, moe)] + embedding_ops(s) + head_ops(s)
    seen, out = set(), []
    for op in ops:
        for key, shape in op.measure_fwd + op.measure_bwd:
            ident = (key, tuple(sorted(shape.items())))
            if ident not in seen:
                seen.add(ident)
                out.append((key, dict(shape)))
    from pipesim.costs.eager_copies import lookups
    from pipesim.costs.eager_ring import lookups as ring_lookups
    out += [item for item in lookups(s) + ring_lookups(s) if item not in out]
    bits = s.training.activation_compression_bits
    if bits < 16:
        from pipesim.costs.layers import shapes_of
        sh = shapes_of(s)
        numel = int(sh.tokens * sh.h / sh.tp.size)
        out += [("quantize", dict(numel=numel, bits=bits)), ("dequantize", dict(numel=numel, bits=bits))]
    return out
