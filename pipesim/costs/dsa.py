"""DeepSeek sparse attention (DSA) as ops: MLA whose attention reads, per query, only the top-k
keys a lightning indexer picks (DeepSeek-AI 2025, "DeepSeek-V3.2-Exp: Boosting Long-Context
Efficiency with DeepSeek Sparse Attention", Sec. 2.1; GLM-5 uses the same layer).

The layer as Megatron-Core builds it (transformer/experimental_attention_variant/absorbed_mla.py,
dsa.py; the paper's App. A "MQA mode of MLA"):
- MLA's down-projections, norms and query up-projection as in pipesim.costs.mla. The key/value
  up-projection is absorbed: the query's non-rotary part is multiplied into the latent space
  (q_absorb, per head d_nope -> kv_lora_rank) and the latent output is up-projected per head
  after attention (v_up, kv_lora_rank -> v_head_dim): the same weights and FLOPs as kv_up.
- Indexer (paper Eq. 1): q_I = W_q^I c_q (the normalized query latent), one shared key
  k_I = LayerNorm(W_k^I x), head weights w = W_w^I x; score I[t,s] = sum_j w[t,j] ReLU(q_I[t,j]·k_I[s])
  over the causal keys: 2·H_I·d_I FLOPs per (query, key) pair, in BF16. No rate of the kernel is
  published: it is the score half of a causal flash forward (same tiling, a per-score epilogue),
  so it runs at the GPU's fused-attention forward table rate. Its projections are duplicated on
  tensor-parallel ranks (parallel_mode "duplicated"): not split by TP; under sequence parallelism
  they first all-gather the hidden state and the query latent.
- Top-k of each row (int32 indices kept for the backward).
- Sparse attention: every local head attends to the k selected latent keys, q/k dim
  kv_lora_rank + rope (576), v dim kv_lora_rank (512): 2·heads·k·(576 + 512) FLOPs per query
  forward (FlashMLA tests/lib.py count); the backward recomputes the scores and runs four
  products, 2·heads·k·(3·576 + 2·512) (the FlashAttention-2 backward, Alg. 2, over the selected
  keys). Timed at FlashMLA's published sparse rate (presets/gpus.py), which pads query heads to a
  multiple of 64 (the cuDNN / FlashMLA sparse path Megatron calls): fewer heads per GPU do not run
  faster.
- Indexer loss (paper Eq. 4, `dsa_indexer_loss: sparse`): the KL between the indexer's softmax and
  the head-summed attention distribution over the selected keys. The indexer's inputs are
  detached, so it trains on this loss alone and its projections need weight gradients only.
  Megatron's fused cuDNN path computes the loss and the indexer's gradients inside the forward:
  the target re-runs QK^T over the k keys for the local heads (2·heads·k·576 per query) and is
  all-reduced over the tensor group ([tokens, k] fp32); the indexer backward recomputes its
  logits on the k keys and forms dq_I and dk_I (3·2·H_I·d_I·k per query), kept until the
  backward. `none`: the indexer runs without gradients.
IndexShare (GLM-5.2; Megatron-Core dsa_indexer_topk_freq / skip_topk_offset): only one layer in
`dsa_index_topk_freq` runs the indexer, the others reuse its top-k; the indexer ops are costed at
the share of layers that run them (every layer at the average).
Context parallelism all-gathers the latent keys and the indexer key (pipesim.costs.context,
head_bytes); queries stay local: in the load-balanced chunks every rank scores T·S/2 pairs, in a
contiguous split the last rank T·(S - T/2).
"""
from __future__ import annotations

import math
from dataclasses import replace

from pipesim.costs.layers import FP32, Shapes, matmul, vector
from pipesim.costs.mla import rope_pass
from pipesim.costs.ops import Comm, Op, is_wgrad
from pipesim.costs.tensor_parallel import TensorSplit
from pipesim.scenario.config import Scenario

INDEX_BYTES = 4          # int32 top-k indices (Megatron's fused paths)
HEAD_PAD = 64            # the sparse kernels pad query heads to a multiple of 64 (SM90 and SM100)


def keys_per_query(seq: int, topk: int) -> float:
    """Mean over the positions of a causal sequence of min(topk, position + 1): the keys a query
    attends to (a query sees at most its own prefix)."""
    if seq <= topk:
        return (seq + 1) / 2
    return topk - topk * (topk - 1) / (2 * seq)


def padded_share(heads: float) -> float:
    """Share of the sparse kernel's work that is real when heads are padded to HEAD_PAD."""
    return heads / (math.ceil(heads / HEAD_PAD) * HEAD_PAD)


def _batched(name: str, batch: float, m: float, n: float, k: float, dtype: str, e: float, saved: float,
             params: float, matrices: tuple = ()) -> Op:
    """`batch` GEMMs [m, k] @ [k, n] with their own weights (the per-head absorption einsums)."""
    flops = 2 * batch * m * n * k
    a, w, c = batch * m * k * e, batch * k * n * e, batch * m * n * e
    return Op(name, "matmul", flops, 2 * flops, a + w + c, c + 2 * a + 2 * w, saved_bytes=saved, params=params,
              param_tensors=1 if params else 0, dgrad_fraction=0.5,
              gemms_fwd=((batch, m, n, k, dtype),),
              gemms_bwd=((batch, m, k, n, dtype), (batch, k, n, m, dtype, "wgrad")), matrices=matrices)


def _indexer_projection(op: Op, trained: bool) -> Op:
    """A duplicated indexer projection: its input is detached, so the backward is the weight
    gradient alone, and nothing at all when the indexer does not train."""
    if not trained:
        return replace(op, flops_bwd=0.0, bytes_bwd=0.0, gemms_bwd=(), measure_bwd=(), comm_fwd=(), comm_bwd=(),
                       dgrad_fraction=0.0, saved_bytes=0.0)
    wgrad = tuple(filter(is_wgrad, op.gemms_bwd))
    return replace(op, flops_bwd=op.flops_bwd / 2, bytes_bwd=op.bytes_bwd / 2, gemms_bwd=wgrad, measure_bwd=(),
                   comm_fwd=(), comm_bwd=(), dgrad_fraction=0.0, saved_bytes=0.0)


INDEXER_OPS = ("dsa_idx_q", "dsa_idx_k", "dsa_idx_w", "dsa_idx_k_norm", "dsa_index_scores", "dsa_topk",
               "dsa_loss_target", "dsa_indexer_grad")


def topk_share(s: Scenario) -> float:
    """Share of the layers (MTP layers numbered on their own, as Megatron-Core does) that run the
    indexer under IndexShare (`model.dsa_index_topk_freq`); 1 without it."""
    m = s.model
    layers = [m.computes_topk(i) for i in range(1, m.num_layers + 1)]
    layers += [m.computes_topk(i) for i in range(1, m.mtp_layers + 1)]
    return sum(layers) / len(layers)


def _scaled(op: Op, share: float) -> Op:
    """An indexer op at `share` of its cost: every layer costs the layer average (as
    pipesim.costs.layers.windowed_attention does for sliding windows)."""
    if share == 1:
        return op
    return replace(op, flops_fwd=op.flops_fwd * share, flops_bwd=op.flops_bwd * share,
                   bytes_fwd=op.bytes_fwd * share, bytes_bwd=op.bytes_bwd * share,
                   saved_bytes=op.saved_bytes * share, params=op.params * share, measure_fwd=(), measure_bwd=(),
                   comm_fwd=tuple(replace(c, bytes=c.bytes * share) for c in op.comm_fwd),
                   comm_bwd=tuple(replace(c, bytes=c.bytes * share) for c in op.comm_bwd))


def dsa_core_ops(s: Scenario, sh: Shapes, attention_name: str) -> list[Op]:
    """The ops of a DSA layer between MLA's down/up projections and the output projection, per
    micro-batch on one GPU (`attention_name`: the sparse attention op's name, a context-parallel
    block name when CP > 1 so that pipesim.costs.context times the key all-gather)."""
    m, e, dtype = s.model, sh.e, s.training.precision
    tp = sh.tp
    T = sh.tokens                                   # local queries: b · seq / CP
    S = m.seq_length                                # keys per sample (all-gathered under CP)
    heads = sh.a / tp.head_div
    r_kv, d_r, d_n, d_v = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim
    d_qk, d_lat = r_kv + d_r, r_kv
    H_I, d_I, k = m.dsa_index_heads, m.dsa_index_head_dim, m.dsa_index_topk
    trained = m.dsa_indexer_loss != "none"
    # the absorption einsums and the indexer run in BF16 in FP8 runs (torch einsums; BF16 kernels)
    bf = "bf16" if dtype == "fp8" else dtype
    k_eff = keys_per_query(S, k)
    # causal (query, key) pairs of the local queries: the load-balanced chunks hold an even share;
    # a contiguous split leaves the last rank (the critical one) the most keys
    contiguous = sh.cp > 1 and s.parallel.context_layout == "contiguous"
    pairs = T * (S - sh.s / 2) if contiguous else T * S / 2
    share = padded_share(heads)

    ops = [_batched("q_absorb", heads, T, r_kv, d_n, bf, e, saved=T * heads * d_n * e,
                    params=heads * d_n * r_kv,
                    matrices=((1, sh.a * (d_n + d_v), r_kv, tp.head_div, 1),))]
    # the absorbed query [q_abs; rope(q_r)] and key [c_kv; rope(k_r)] laid out for the kernel
    # (absorbed_mla.py: rotary embedding and torch.cat): one memory pass
    ops.append(rope_pass("dsa_rope", T, reads=heads * (r_kv + d_r) + d_qk, writes=heads * d_qk + d_qk,
                         rotated=T * (heads + 1) * d_r, e=e))
    # indexer projections: duplicated on every tensor-parallel rank, over all tokens (SP-gathered)
    whole = replace(sh, tp=TensorSplit(mode="1d", size=1, q=1))
    # under sequence parallelism the indexer all-gathers the query latent and the hidden state
    # over the tensor group first (its inputs are detached: no gradient travels back)
    gather = tp.size > 1 and tp.token_div > 1
    for name, k_in, n, gathered in (("dsa_idx_q", m.q_lora_rank, H_I * d_I, m.q_lora_rank),
                                    ("dsa_idx_k", sh.h, d_I, sh.h), ("dsa_idx_w", sh.h, H_I, 0)):
        op = _indexer_projection(matmul(name, T, k_in, n, whole, "column", saved_input=0.0, dtype=dtype,
                                        bias=False), trained)
        if gather and gathered:
            op = replace(op, comm_fwd=(Comm("all_gather", T * gathered * e, "tp", tp.size),))
        ops.append(op)
    norm = replace(vector("dsa_idx_k_norm", T * d_I, whole, (8, 10), params=2 * d_I), param_tensors=2)
    ops.append(norm if trained else replace(norm, flops_bwd=0.0, bytes_bwd=0.0))
    # indexer scores: per head a causal QK^T over d_I whose epilogue (ReLU, head weight, sum over
    # the heads) runs on the CUDA cores, as a flash forward's softmax does; one fp32 logit per pair
    # (a calibrated profile times the whole square: kernels/dsa_indexer_kernel.py, CP 1 only)
    square = (("dsa_index_scores", dict(batch=sh.b, seq=S, heads=H_I, head_dim=d_I, dtype="bf16")),)
    ops.append(Op("dsa_index_scores", "matmul", 2 * H_I * d_I * pairs, 0.0,
                  (T * H_I * d_I + sh.b * S * d_I) * 2 + T * H_I * FP32 + pairs * FP32, 0.0,
                  fused_attention=("scores", 1.0, S, d_I), measure_fwd=square if sh.cp == 1 else ()))
    ops.append(Op("dsa_topk", "vector", pairs, 0.0, pairs * FP32 + T * k * INDEX_BYTES, 0.0,
                  saved_bytes=T * k * INDEX_BYTES))
    fwd = 2 * heads * k_eff * (d_qk + d_lat) * T
    bwd = 2 * heads * k_eff * (3 * d_qk + 2 * d_lat) * T
    q_b, kv_b, o_b = T * heads * d_qk * e, sh.b * S * d_qk * e, T * heads * d_lat * e
    lse = T * heads * FP32
    ops.append(Op(attention_name, "matmul", fwd, bwd, q_b + kv_b + o_b + lse + T * k * INDEX_BYTES,
                  2 * (q_b + kv_b + o_b) + lse + T * k * INDEX_BYTES,
                  saved_bytes=q_b + kv_b + o_b + lse, dgrad_fraction=1.0, fused_attention=("sparse_mla", share)))
    if trained:
        comm = (Comm("all_reduce", T * k * FP32, "tp", tp.size),) if tp.size > 1 else ()
        ops.append(Op("dsa_loss_target", "matmul", 2 * heads * k_eff * d_qk * T, 0.0, q_b + T * k * INDEX_BYTES
                      + T * k * FP32, 0.0, comm_fwd=comm, fused_attention=("sparse_mla", share)))
        grads = (T * H_I * d_I + T * d_I + T * H_I) * e        # dq_I, dk_I, dw: kept for the backward
        ops.append(Op("dsa_indexer_grad", "matmul", 3 * 2 * H_I * d_I * k_eff * T, 0.0,
                      (T * H_I * d_I + sh.b * S * d_I) * 2 + T * k * (INDEX_BYTES + FP32) + grads, 0.0,
                      saved_bytes=grads, fused_attention=("sparse_mla", padded_share(H_I))))
    ops.append(_batched("v_up", heads, T, d_v, r_kv, bf, e, saved=0.0, params=heads * r_kv * d_v))
    # IndexShare: the layers that reuse a top-k build no indexer, compute no scores and no loss
    share = topk_share(s)
    return [_scaled(o, share) if o.name in INDEXER_OPS else o for o in ops]


def check_dsa(s: Scenario, loader) -> None:
    """DeepSeek sparse attention as Megatron-Core runs it (transformer/experimental_attention_variant/
    dsa.py): causal masks only, the indexer reads the normalized query latent (q_lora_rank), and
    context parallelism only as the all-gather of the latent keys (TransformerConfig asserts
    cp_comm_type allgather). Its main kernel is FlashMLA's sparse prefill (SM90 and later)."""
    m = s.model
    if m.attention_variant != "dsa":
        return
    if not m.causal:
        loader.fail("model.attention_variant", f"dsa selects keys under a causal mask; model {m.name!r} is not causal")
    if not m.q_lora_rank:
        loader.fail("model.q_lora_rank", "dsa's indexer projects the compressed query latent: set q_lora_rank "
                    "(DeepSeek-V3.2: 1536)")
    if s.parallel.context > 1 and s.parallel.context_mode != "allgather":
        loader.fail("parallel.context_mode", f"dsa runs context parallelism as the all-gather of the latent keys "
                    f"(Megatron-Core asserts cp_comm_type allgather); got {s.parallel.context_mode!r}")
    if m.dsa_index_topk_freq > 1:
        # Megatron-Core (_validate_dsa_index_share_pipeline_split): a layer reuses the top-k of the
        # last computing layer before it, which must sit in the same model chunk
        first = 1
        for chunk, n in enumerate(s.layers_per_stage()):
            if n and not m.computes_topk(first):
                loader.fail("model.dsa_index_topk_freq", f"model chunk {chunk} starts at layer {first}, which reuses "
                            f"an earlier chunk's top-k (IndexShare cannot cross pipeline stages): start every chunk "
                            f"on a computing layer (parallel.layers_per_stage)")
            first += n
    from pipesim.presets.gpus import curve
    gpu = s.system.gpu
    c = curve(gpu.kernel_curve) if gpu.matmul_efficiency is None else None
    if c is not None and "sparse_mla" not in c:
        loader.fail("model.attention_variant", f"dsa's sparse MLA kernel (FlashMLA / cuDNN) needs SM90 or later; "
                    f"{gpu.name} has no published rate for it")
