"""Context parallelism in the emulator: each rank holds a share of every sequence and computes
attention with a real exchange of K/V (isend/irecv), forward and backward: a ring, an all-gather
or an all-to-all (`parallel.context_mode`).

Layout (`parallel.context_layout`): balanced cuts the sequence into 2·CP chunks and gives rank r
chunks r and 2CP-1-r (causal load balancing, as Megatron-Core); contiguous gives rank r chunk r.
The causal mask is built from the global positions of the local queries and of the visiting
keys, so the result is exact for any layout; so is the document mask of packed sequences
(training.document_length: a key of another document is hidden too).

Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers", Sec. 3; the
blockwise softmax of Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"):
forward, for CP steps: post the send of the current K/V block to the next rank and the receive
of the next block from the previous one, attend to the current block, merge the block's output
into the running output with log-sum-exp weights, wait. Backward (Dao 2023, "FlashAttention-2",
Alg. 2 per block, with the saved log-sum-exp): K/V circulate again; the dK/dV accumulated for a
block travel with it, and after the last step each block's dK/dV reach their owner one hop later.
The exchange waits are logged (phase cp_fwd / cp_bwd) as communication inside the compute action,
which is what the simulator calls exposed CP communication.

All-gather (`context_mode: allgather`; Llama 3 Sec. 3.3.2, TransformerEngine
AttnFuncWithCPAndKVAllGather): every rank receives every member's K/V, attends its local queries
to the whole sequence, and in the backward sends each member the dK/dV of its block, summed where
they arrive (a reduce-scatter). All-to-all (`a2a`; DeepSpeed Ulysses, Jacobs et al. 2023, Sec.
3.1): Q, K and V go from sequence shards to head shards (rank m gets heads m·H/CP... of every
member's tokens), attention runs over the whole sequence on those heads, the output comes back;
the backward moves dO one way and dQ, dK, dV the other. Both are built from point-to-point
messages (gloo has no all-to-all) and logged like the ring's waits. Hierarchical (`a2a+p2p`, USP):
the all-to-all inside groups of `context_a2a` adjacent members, then the ring over the groups on
the head shards, and the all-to-all back.

Every rank holds all weights: their gradients are summed over data x context (worker.py), with
each rank's loss the mean over its own tokens scaled by 1/CP (executor.py).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

CP_TAG = 1 << 24          # gloo tag of ring messages (pipeline tags stay far below)
MASKED = -1e30            # finite "minus infinity": fully masked blocks get zero weight


def chunk_positions(seq: int, cp: int, rank: int, layout: str) -> torch.Tensor:
    """Global positions of the tokens rank `rank` holds, in its local order."""
    if layout == "balanced":
        c = seq // (2 * cp)
        first, second = rank, 2 * cp - 1 - rank
        return torch.cat([torch.arange(first * c, (first + 1) * c), torch.arange(second * c, (second + 1) * c)])
    c = seq // cp
    return torch.arange(rank * c, (rank + 1) * c)


class ContextGroup:
    """This rank's place in its context-parallel ring and the positions of every member."""

    def __init__(self, size: int, rank: int, ranks: list[int], seq: int, layout: str, causal: bool, scale: float,
                 log: list | None = None, mode: str = "ring", a2a: int = 1, positions: list | None = None,
                 docs: torch.Tensor | None = None):
        self.size, self.rank, self.ranks, self.mode = size, rank, ranks, mode
        self.docs = docs      # the document of every global position (packed documents), or None
        self.next, self.prev = ranks[(rank + 1) % size], ranks[(rank - 1) % size]
        self.all_positions = positions or [chunk_positions(seq, size, r, layout) for r in range(size)]
        self.positions = self.all_positions[rank]
        self.causal, self.scale = causal, scale
        self.log = log if log is not None else []     # (phase, start, end, bytes), like TPGroup.log
        self.inner = self.outer = None
        if mode == "a2a+p2p":
            # the all-to-all inside groups of `a2a` adjacent members, then a ring over the groups on
            # the head shards, each group's tokens in the inner member order (costs/topology.py)
            base, j = rank - rank % a2a, rank // a2a
            self.inner = ContextGroup(a2a, rank % a2a, ranks[base:base + a2a], seq, layout, causal, scale, self.log,
                                      positions=self.all_positions[base:base + a2a], docs=docs)
            groups = [torch.cat(self.all_positions[g * a2a:(g + 1) * a2a]) for g in range(size // a2a)]
            self.outer = ContextGroup(size // a2a, j, ranks[rank % a2a::a2a], seq, layout, causal, scale, self.log,
                                      positions=groups, docs=docs)

    def attention(self, q, k, v, heads: int = 1, group: int = 1):
        """q: [batch*heads, local seq, head dim], k and v: [batch*heads/group, ...] (one key/value
        head per `group` query heads, exchanged as such and shared after the exchange) -> attention
        output of the local queries."""
        if self.mode == "allgather":
            return _AllGatherAttention.apply(q, k, v, self, group)
        if self.mode in ("a2a", "a2a+p2p"):
            # sequence shards -> head shards over the all-to-all group, attention over what the
            # group holds (a2a: the whole sequence; a2a+p2p: a ring over the groups), and back
            inner, kv_heads = self if self.mode == "a2a" else self.inner, heads // group
            qh = _Reshard.apply(q, inner, heads, True)
            kh, vh = _Reshard.apply(k, inner, kv_heads, True), _Reshard.apply(v, inner, kv_heads, True)
            if self.mode == "a2a":
                oh = _WholeSequenceAttention.apply(qh, kh, vh, self, group)
            else:
                oh = _RingAttention.apply(qh, kh, vh, self.outer, group)
            return _Reshard.apply(oh, inner, heads, False)
        return _RingAttention.apply(q, k, v, self, group)

    def swap(self, parts: list, phase: str) -> list:
        """Send parts[m] to member m and receive member m's part for this rank, for every member
        (one's own part stays): the point-to-point form of an all-to-all. -> received parts."""
        works, recvs, nbytes = [], [], 0
        for m in range(self.size):
            if m == self.rank:
                recvs.append(parts[m])
                continue
            send = parts[m].contiguous()
            recv = torch.empty_like(send)
            works += [dist.isend(send, dst=self.ranks[m], tag=CP_TAG), dist.irecv(recv, src=self.ranks[m], tag=CP_TAG)]
            recvs.append(recv)
            nbytes += send.numel() * send.element_size()
        start = time.perf_counter()
        for w in works:
            w.wait()
        self.log.append((phase, start, time.perf_counter(), nbytes))
        return recvs

    def key_positions(self) -> torch.Tensor:
        """Global positions of the whole sequence in member order (the gathered keys)."""
        return torch.cat(self.all_positions)

    def exchange(self, send: torch.Tensor, phase: str):
        """Post send-to-next and receive-from-previous of one block; returns (recv buffer, waiter)."""
        send = send.contiguous()
        recv = torch.empty_like(send)
        works = [dist.isend(send, dst=self.next, tag=CP_TAG), dist.irecv(recv, src=self.prev, tag=CP_TAG)]
        nbytes = send.numel() * send.element_size()

        def wait():
            start = time.perf_counter()
            for w in works:
                w.wait()
            self.log.append((phase, start, time.perf_counter(), nbytes))
            return recv
        return recv, wait

    def mask(self, owner: int, like: torch.Tensor) -> torch.Tensor | None:
        """Additive mask of the local queries against the keys of rank `owner`."""
        return self.mask_between(self.positions, self.all_positions[owner], like)

    def mask_between(self, qpos: torch.Tensor, kpos: torch.Tensor, like: torch.Tensor) -> torch.Tensor | None:
        """Additive mask of queries at global positions `qpos` against keys at `kpos`: the causal
        one, and keys of another document hidden (packed documents); None when nothing is hidden."""
        if not self.causal and self.docs is None:
            return None
        hidden = (qpos[:, None] < kpos[None, :]) if self.causal else torch.zeros(len(qpos), len(kpos), dtype=torch.bool)
        if self.docs is not None:
            hidden = hidden | (self.docs[qpos][:, None] != self.docs[kpos][None, :])
        return additive(hidden, like)


def causal_mask(qpos: torch.Tensor, kpos: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Additive mask hiding the keys after each query (global positions qpos, kpos)."""
    return additive(qpos[:, None] < kpos[None, :], like)


def additive(hidden: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """0 where a key is seen, MASKED where `hidden`, in `like`'s dtype and device."""
    hidden = hidden.to(like.device)
    return torch.zeros(hidden.shape, dtype=like.dtype, device=like.device).masked_fill_(hidden, MASKED)


def _scores(q, k, scale, mask):
    s = torch.matmul(q, k.transpose(1, 2)) * scale
    return s if mask is None else s + mask


def block_forward(q, k, v, scale: float, mask):
    """One ring step's attention of the local queries to one K/V block: (output normalised over
    the block, its log-sum-exp). The CPU calibration times this same function
    (pipesim/calibrate/ops.py, profile key ring_block_fwd)."""
    s = _scores(q, k, scale, mask)
    blse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.exp(s - blse.unsqueeze(-1)), v), blse


def packed(k, v):
    """K and V as one tensor to send ([..., head dim of K + head dim of V]: MLA's differ)."""
    return torch.cat((k, v), dim=-1)


def unpacked(kv, k_dim: int):
    return kv[..., :k_dim], kv[..., k_dim:]


def shared(x, group: int):
    """Key/value heads repeated for the `group` query heads sharing each (grouped-query attention)."""
    return x if group == 1 else x.repeat_interleave(group, dim=0)


def summed(dx, group: int):
    """The gradient of `shared`: the query heads' parts summed per key/value head."""
    return dx if group == 1 else dx.reshape(-1, group, *dx.shape[1:]).sum(1)


def output_grad(dout, out):
    """The output gradient made contiguous and rowsum(dO ∘ O), the softmax backward's delta
    (FlashAttention-2 Alg. 2), shared by every block of a layer's backward."""
    dout = dout.contiguous()
    return dout, (dout * out).sum(-1, keepdim=True)


def block_backward(q, k, v, dout, lse, delta, scale: float, mask):
    """One ring step's backward against one K/V block (FlashAttention-2 Alg. 2 for the block,
    the scores recomputed): (dQ part, dK, dV). Timed as ring_block_bwd."""
    p = torch.exp(_scores(q, k, scale, mask) - lse.unsqueeze(-1))
    ds = p * (torch.matmul(dout, v.transpose(1, 2)) - delta)
    return (torch.matmul(ds, k) * scale, torch.matmul(ds.transpose(1, 2), q) * scale,
            torch.matmul(p.transpose(1, 2), dout))


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g: ContextGroup, group: int):
        kv, kd = packed(k, v), k.shape[-1]
        out = lse = None
        for i in range(g.size):
            owner = (g.rank - i) % g.size
            waiter = g.exchange(kv, "cp_fwd")[1] if i < g.size - 1 else None
            kb, vb = unpacked(kv, kd)
            bout, blse = block_forward(q, shared(kb, group), shared(vb, group), g.scale, g.mask(owner, q))
            if out is None:
                out, lse = bout, blse
            else:       # merge two normalised partial softmaxes by their log-sum-exp weights
                new = torch.logaddexp(lse, blse)
                out = out * torch.exp(lse - new).unsqueeze(-1) + bout * torch.exp(blse - new).unsqueeze(-1)
                lse = new
            if waiter is not None:
                kv = waiter()
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.shared = g, group
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        g, group = ctx.group, ctx.shared
        dout, delta = output_grad(dout, out)
        dq = torch.zeros_like(q)
        kv, kd = packed(k, v), k.shape[-1]
        dkv, dkv_wait = torch.zeros_like(kv), None
        for i in range(g.size):
            owner = (g.rank - i) % g.size
            kv_wait = g.exchange(kv, "cp_bwd")[1] if i < g.size - 1 else None
            kb, vb = unpacked(kv, kd)
            dq_part, dk, dv = block_backward(q, shared(kb, group), shared(vb, group), dout, lse, delta,
                                             g.scale, g.mask(owner, q))
            dk, dv = summed(dk, group), summed(dv, group)
            dq += dq_part
            # the accumulated dK/dV of the block this rank now holds travelled during the block's
            # compute (posted at the end of the previous step, as TransformerEngine's
            # AttnFuncWithCPAndKVP2P overlaps it); add this rank's part and pass them on
            if dkv_wait is not None:
                dkv = dkv_wait()
            dkv_wait = g.exchange(dkv + packed(dk, dv), "cp_bwd")[1]
            if kv_wait is not None:
                kv = kv_wait()
        dkv = dkv_wait()            # after the last step each block's dK/dV reach their owner
        return dq, *unpacked(dkv, kd), None, None


class _AllGatherAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g: ContextGroup, group: int):
        kd = k.shape[-1]
        kv = torch.cat(g.swap([packed(k, v)] * g.size, "cp_fwd"), dim=1)     # [B·kv, S, dk + dv]
        mask = g.mask_between(g.positions, g.key_positions(), q)
        kb, vb = unpacked(kv, kd)
        out, lse = block_forward(q, shared(kb, group), shared(vb, group), g.scale, mask)
        ctx.save_for_backward(q, kv, out, lse)
        ctx.group, ctx.shared, ctx.kd = g, group, kd
        return out

    @staticmethod
    def backward(ctx, dout):
        q, kv, out, lse = ctx.saved_tensors
        g, group, kd = ctx.group, ctx.shared, ctx.kd
        dout, delta = output_grad(dout, out)
        mask = g.mask_between(g.positions, g.key_positions(), q)
        kb, vb = unpacked(kv, kd)
        dq, dk, dv = block_backward(q, shared(kb, group), shared(vb, group), dout, lse, delta, g.scale, mask)
        # each member's block of dK/dV goes home and is summed there (a reduce-scatter)
        sizes = [len(p) for p in g.all_positions]
        blocks = packed(summed(dk, group), summed(dv, group)).split(sizes, dim=1)
        mine = sum(g.swap(list(blocks), "cp_bwd"))
        return dq, *unpacked(mine, kd), None, None


def _to_heads(x, g: ContextGroup, heads: int, phase: str):
    """[batch*heads, local seq, d] sequence shard -> [batch*heads/CP, whole seq (member order), d]."""
    bh, L, d = x.shape
    parts = x.reshape(bh // heads, heads, L, d).chunk(g.size, dim=1)
    got = g.swap([p.reshape(-1, L, d) for p in parts], phase)
    return torch.cat(got, dim=1)


def _to_sequence(y, g: ContextGroup, heads: int, phase: str):
    """[batch*heads/CP, whole seq, d] head shard -> [batch*heads, local seq, d]."""
    sizes = [len(p) for p in g.all_positions]
    got = g.swap(list(y.split(sizes, dim=1)), phase)              # this rank's tokens, per head share
    local = heads // g.size
    L, d = got[0].shape[1], got[0].shape[2]
    return torch.cat([p.reshape(-1, local, L, d) for p in got], dim=1).reshape(-1, L, d)


class _Reshard(torch.autograd.Function):
    """Sequence shard <-> head shard over the group (`to_heads`); the backward goes the other way."""
    @staticmethod
    def forward(ctx, x, g: ContextGroup, heads: int, to_heads: bool):
        ctx.g, ctx.heads, ctx.to_heads = g, heads, to_heads
        return (_to_heads if to_heads else _to_sequence)(x, g, heads, "cp_fwd")

    @staticmethod
    def backward(ctx, dy):
        back = _to_sequence if ctx.to_heads else _to_heads
        return back(dy.contiguous(), ctx.g, ctx.heads, "cp_bwd"), None, None, None


class _WholeSequenceAttention(torch.autograd.Function):
    """Attention of head shards over the whole sequence (member order), after the all-to-all."""
    @staticmethod
    def forward(ctx, q, k, v, g: ContextGroup, group: int):
        pos = g.key_positions()
        mask = g.mask_between(pos, pos, q)
        out, lse = block_forward(q, shared(k, group), shared(v, group), g.scale, mask)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.group, ctx.shared, ctx.mask = g, group, mask
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        g, group = ctx.group, ctx.shared
        dout, delta = output_grad(dout, out)
        dq, dk, dv = block_backward(q, shared(k, group), shared(v, group), dout, lse, delta, g.scale, ctx.mask)
        return dq, summed(dk, group), summed(dv, group), None, None


def attach(stages: dict, group: ContextGroup) -> None:
    """Make every attention block and position embedding of these stages context parallel."""
    for model in stages.values():
        if model.embedding is not None:
            model.embedding.cp = group
        for layer in model.layers:
            layer.cp = group


def local_tokens(mb: torch.Tensor, group: ContextGroup | None):
    """(inputs, targets) of this rank from a [micro_batch, seq+1] token block."""
    x, y = mb[:, :-1], mb[:, 1:]
    if group is None:
        return x, y
    idx = group.positions.to(mb.device)
    return x[:, idx], y[:, idx]
