"""Context parallelism (CP): attention over a sequence split across CP GPUs.

Every op outside attention sees seq/CP tokens (pipesim.costs.layers.shapes_of); attention needs
the keys and values of the whole sequence, which CP provides in one of two ways
(`parallel.context_mode`):

ring      Each rank keeps its queries and passes K/V blocks to its ring neighbour for CP-1 steps;
          the transfer of the next block runs on a communication stream while the attention
          kernel works on the current one (Liu et al. 2023, "Ring Attention with Blockwise
          Transformers", Sec. 3; Megatron-Core / TransformerEngine `cp_comm_type="p2p"`,
          AttnFuncWithCPAndKVP2P). The backward circulates K/V again and sends the accumulated
          dK/dV back along the ring; the last dK/dV hop is exposed.
allgather K/V of the whole sequence are all-gathered before attention and dK/dV reduce-scattered
          after it, not overlapped (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.2:
          "the all-gather communication latency is exposed in the critical path";
          TransformerEngine AttnFuncWithCPAndKVAllGather). The backward gathers K/V again.
a2a       All-to-alls turn the sequence-sharded Q, K, V into head shards of the whole sequence,
          attention runs on heads/CP heads, and one more all-to-all turns the output back; the
          backward does the same with dO and dQ, dK, dV (Jacobs et al. 2023, "DeepSpeed Ulysses",
          Sec. 3.1; TransformerEngine AttnFuncWithCPAndQKVOA2A, `cp_comm_type="a2a"`). Nothing
          overlaps them, and every rank computes whole-sequence causal attention: no imbalance.
a2a+p2p   Both at once (Fang & Zhao 2024, "USP: A Unified Sequence Parallelism Approach", Sec. 3;
          Megatron-Core --hierarchical-context-parallel-sizes, TE `cp_comm_type="a2a+p2p"`): the
          all-to-all inside groups of `context_a2a` adjacent ranks (an NVLink island), then a ring
          over CP/context_a2a of them on the head shards; the ring's blocks are as large as
          plain ring attention's (sequence / ring size x heads / context_a2a).

Layouts (`parallel.context_layout`). balanced: the sequence is cut into 2·CP chunks and rank r
holds chunks r and 2CP-1-r, so under a causal mask every rank does the same work (Megatron-Core
context parallelism; Llama 3 Sec. 3.3.2). Ring step 0 is causal attention of the local 2c tokens
on themselves (2c^2 query-key pairs, c = seq/2CP); each later step is a full c x 2c block
(either both local query chunks against the first chunk of the visiting K/V, or the second query
chunk against both), so the per-rank work is exactly causal/CP. contiguous: rank r holds chunk r;
under a causal mask the ranks work unevenly and, in lock-step, each ring step lasts as long as
the busiest rank's full block.

The overlap is resolved inside the stage cost: per ring step max(block compute, transfer); the
part of the transfers not hidden is reported as exposed CP communication and is blocking
communication for the simulator (like TP collectives). The blocks are ordinary attention ops
with their real (query, key) lengths, so the cost model times them like any attention kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.costs.collectives import collective_time, p2p_time
from pipesim.costs.fp8 import attention_dtype
from pipesim.costs.layers import Shapes, flash_attention
from pipesim.costs.ops import Op
from pipesim.scenario.config import Scenario

PREFIX = "attention.cp"


def context_attention_ops(s: Scenario, sh: Shapes, heads: float, kv: float, dtype: str) -> list[Op]:
    """The attention blocks one CP rank computes per layer (the critical rank for uneven layouts),
    in ring-step order; the first keeps the layer's Q, K, V, O and log-sum-exp."""
    par, causal = s.parallel, s.model.causal
    S = s.model.seq_length
    a2a, cp = par.context_levels
    if a2a > 1:             # after the all-to-all: S / ring tokens of heads / a2a heads
        sh, heads, kv = replace(sh, s=S // cp), heads / a2a, kv / a2a
    L = sh.s                                             # L: tokens per sample on this rank
    blocks: list[tuple[int, int, bool]] = []             # (query length, key length, causal)
    balanced = par.context_layout == "balanced"
    if cp == 1:                                          # a2a: the whole sequence, a head share
        blocks.append((S, S, causal))
    elif par.context_mode != "allgather":                # ring, or the ring level of a2a+p2p
        blocks.append((L, L, causal))
        # later steps: balanced -> a c x 2c block (c = L/2); contiguous -> a full L x L block
        blocks += [(L // 2, L, False) if balanced else (L, L, False)] * (cp - 1)
    elif balanced:
        # all-gather: local chunks r and 2CP-1-r against the keys up to their end (rank 0 shown;
        # every rank's two chunks attend to 2CP·c keys in all, the same work)
        c = L // 2
        blocks += [(c, c, True), (c, S, True)]
    else:
        blocks.append((L, S, causal))                     # the last rank sees every key
    # A causal block with fewer queries than keys (bottom-right aligned) is a dense block over the
    # earlier keys plus a causal square on the diagonal: only the square has masked tiles, so each
    # part is timed as the kernel runs it.
    split: list[tuple[int, int, bool]] = []
    for q, k, cz in blocks:
        split += [(q, k - q, False), (q, q, True)] if cz and q < k else [(q, k, cz)]
    mla = s.model.attention_variant == "mla"
    return [flash_attention(sh, heads, kv, dtype, cz, q_len=q, kv_len=k, name=f"{PREFIX}{i}", saved=i == 0, mla=mla)
            for i, (q, k, cz) in enumerate(split)]


@dataclass(frozen=True)
class ContextComm:
    """CP communication of one layer for one micro-batch on one GPU."""
    fwd_exposed: float = 0.0     # seconds added to the forward (not hidden behind attention)
    bwd_exposed: float = 0.0
    fwd_hidden: float = 0.0      # transfer seconds overlapped with attention blocks
    bwd_hidden: float = 0.0
    bytes_fwd: float = 0.0       # bytes sent per GPU
    bytes_bwd: float = 0.0
    buffer_fwd: float = 0.0      # transient K/V receive buffers during the forward
    buffer_bwd: float = 0.0      # K/V and dK/dV buffers during the backward


@dataclass(frozen=True)
class HeadBytes:
    """Bytes per local token on one GPU (heads split by tensor parallelism) of Q, K, V and O."""
    q: float
    k: float
    v: float
    o: float


def head_bytes(s: Scenario, sh: Shapes) -> HeadBytes:
    """GQA: every head of width head_dim, kv heads shared; MLA: the up-projected heads, Q and K
    of qk_nope + qk_rope, V and O of v_head_dim, one K/V per query head (pipesim.costs.mla); DSA:
    the absorbed latent key shared by the heads, with the indexer's key."""
    m, e = s.model, sh.e
    heads = sh.a / sh.tp.head_div
    if m.attention_variant == "dsa":
        # absorbed MLA: one latent key per token (its first kv_lora_rank channels are the value)
        # and the indexer's key, all-gathered together (pipesim.costs.dsa)
        qk = m.kv_lora_rank + m.qk_rope_head_dim
        return HeadBytes(q=heads * qk * e, k=(qk + m.dsa_index_head_dim) * e, v=0.0, o=heads * m.kv_lora_rank * e)
    if m.attention_variant == "mla":
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        return HeadBytes(q=heads * qk * e, k=heads * qk * e, v=heads * m.v_head_dim * e, o=heads * m.v_head_dim * e)
    kvh = max(sh.g / sh.tp.head_div, 1)
    return HeadBytes(q=heads * sh.d * e, k=kvh * sh.d * e, v=kvh * sh.d * e, o=heads * sh.d * e)


def all_to_all_comm(s: Scenario, sh: Shapes, hb: HeadBytes) -> tuple[float, float]:
    """(seconds each way, bytes sent each way) of one layer's all-to-alls over the all-to-all
    group: Q, K, V in and O out in the forward; dO in and dQ, dK, dV out in the backward. Each
    rank keeps 1/a2a of what it holds."""
    from pipesim.costs.topology import placement
    group, algo = placement(s, "cp_a2a"), s.parallel.collective
    tokens = sh.b * sh.s                              # local tokens (S / CP per sample)
    sizes = [tokens * x for x in (hb.q, hb.k, hb.v, hb.o)]
    seconds = sum(collective_time("all_to_all", n, group, algo) for n in sizes)
    return seconds, sum(sizes) * (group.size - 1) / group.size


def context_comm(s: Scenario, cost_model, ops: list[Op]) -> ContextComm:
    """Time the CP exchange of a layer against its attention blocks (`ops` from layer_ops)."""
    blocks = [o for o in ops if o.name.startswith(PREFIX)]
    if not blocks:
        return ContextComm()
    from pipesim.costs.layers import shapes_of
    from pipesim.costs.topology import placement
    sh = shapes_of(s)
    hb = head_bytes(s, sh)
    a2a, cp = s.parallel.context_levels
    # K and V of the local tokens; under a2a+p2p a ring block is the same size (S/ring tokens of
    # 1/a2a of the heads). `grads`: their gradients, dK and dV, in 16 bits; under FP8 attention with
    # per-tensor scaling K and V travel as their FP8 bytes (Transformer Engine context_parallel.py:
    # "FP8DS/CS attention: q, k, v: torch.uint8" in the P2P and all-gather paths; MXFP8 moves 16 bits)
    grads = sh.b * sh.s * (hb.k + hb.v)
    local = grads / sh.e if attention_dtype(s.training) == "fp8" else grads
    a2a_s, a2a_bytes = all_to_all_comm(s, sh, hb) if a2a > 1 else (0.0, 0.0)
    # the all-to-all's receive buffer: Q, K, V (forward), and dO with them (backward)
    a2a_buf = sh.b * sh.s * (hb.q + hb.k + hb.v) if a2a > 1 else 0.0
    if cp == 1:
        return ContextComm(fwd_exposed=a2a_s, bwd_exposed=a2a_s, bytes_fwd=a2a_bytes, bytes_bwd=a2a_bytes,
                           buffer_fwd=a2a_buf, buffer_bwd=a2a_buf + sh.b * sh.s * hb.o)
    group = placement(s, "cp_ring" if a2a > 1 else "cp")
    if s.parallel.context_mode == "allgather":
        full, full_grads = local * cp, grads * cp
        ag = collective_time("all_gather", full, group, s.parallel.collective)
        rs = collective_time("reduce_scatter", full_grads, group, s.parallel.collective)
        share = (cp - 1) / cp
        return ContextComm(fwd_exposed=ag, bwd_exposed=ag + rs, bytes_fwd=share * full,
                           bytes_bwd=share * (full + full_grads), buffer_fwd=full, buffer_bwd=full + full_grads)
    link = group.bottleneck
    hop = p2p_time(local, link)                 # one K/V block to the next rank
    fwd = [cost_model.time(o, "fwd").seconds for o in blocks]
    bwd = [cost_model.time(o, "bwd").seconds for o in blocks]
    # forward: step i computes block i while block i+1 arrives (none after the last)
    f_total = sum(max(t, hop if i < cp - 1 else 0.0) for i, t in enumerate(fwd))
    # backward: K/V for the next step and the dK/dV of this one travel together (2 blocks);
    # the dK/dV of the last step returns to its owner after the loop, exposed
    hop2 = p2p_time(local + grads, link)
    last = p2p_time(grads, link)
    b_total = sum(max(t, hop2 if i < cp - 1 else 0.0) for i, t in enumerate(bwd)) + last
    f_exposed, b_exposed = f_total - sum(fwd), b_total - sum(bwd)
    return ContextComm(fwd_exposed=f_exposed + a2a_s, bwd_exposed=b_exposed + a2a_s,
                       fwd_hidden=(cp - 1) * hop - f_exposed, bwd_hidden=(cp - 1) * hop2 + last - b_exposed,
                       bytes_fwd=(cp - 1) * local + a2a_bytes,
                       bytes_bwd=(cp - 1) * (local + grads) + grads + a2a_bytes,
                       # a block being sent and the next one received; in the backward also dK/dV
                       buffer_fwd=2 * local + a2a_buf, buffer_bwd=2 * (local + grads) + a2a_buf)
