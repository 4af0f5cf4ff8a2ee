"""The real model the emulator runs, built from the scenario's model section.

The ops are the ones pipesim/costs/layers.py counts, in the same order: a pre-norm GPT block
(norm, QKV, attention core: logits, softmax, dropout, attend; projection, dropout, residual;
norm, fc1, activation, fc2, dropout, residual), the vocab-parallel embedding with learned
positions and dropout, and the head: final norm, LM head, cross-entropy. Tensor parallelism is
Megatron's 1D split (Shoeybi et al. 2019, Sec. 3): QKV and fc1 column-parallel, proj and fc2
row-parallel, embedding and LM head split over the vocabulary.

Weights are drawn per global parameter name from a seeded generator at full size and then
sliced, so any layout (pipeline, tensor, data) holds exactly the same model as one process.
"""
from __future__ import annotations

import functools
import math
import zlib

import torch
import torch.nn.functional as F

from pipesim.emulator.layers import Linear, TPGroup, WeightGradStore, column, exit_tp, recompute
from pipesim.emulator.lora import adapters as lora_adapters
from pipesim.emulator.lora import freeze_base, with_adapter
from pipesim.errors import ScenarioError

DROPOUT_P = 0.1      # GPT-2/GPT-3 dropout rate (Radford et al. 2019; Brown et al. 2020, Sec. 2.3)
INIT_STD = 0.02      # GPT-2 initialisation std (Radford et al. 2019, Sec. 2.3)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
          "tf32": torch.float32}        # TF32: fp32 tensors (tensor-core math is a runtime setting)


def full_tensor(seed: int, name: str, shape, kind: str = "normal") -> torch.Tensor:
    """The full-size initial value of parameter `name` (independent of the layout)."""
    if kind == "ones":
        return torch.ones(shape)
    g = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
    t = torch.randn(shape, generator=g)
    return t * (INIT_STD if kind == "normal" else 0.01)   # "small": biases, norm shifts


def shard(t: torch.Tensor, dim: int | None, rank: int, size: int) -> torch.Tensor:
    if dim is None or size == 1:
        return t.clone()
    return t.chunk(size, dim=dim)[rank].clone()


class Builder:
    """Creates parameters by global name and remembers how each is sharded (for reassembly)."""

    def __init__(self, scenario, tp: TPGroup, store: WeightGradStore, seed: int, dtype):
        self.s, self.tp, self.store, self.seed, self.dtype = scenario, tp, store, seed, dtype
        self.layout: dict[str, object] = {}    # name -> how it is sharded (None: replicated)
        self.names: dict[int, str] = {}        # id(parameter) -> global name
        self.params_by_id: dict[int, torch.nn.Parameter] = {}

    def param(self, name, tensor, seq_sharded_grad: bool = False) -> torch.nn.Parameter:
        """`seq_sharded_grad`: replicated over the TP group but used on a sequence shard under
        sequence parallelism, so its gradient must be all-reduced over the group."""
        p = torch.nn.Parameter(tensor)
        p.sequence_parallel_grad = seq_sharded_grad
        self.names[id(p)] = name
        self.params_by_id[id(p)] = p
        return p

    def tensor(self, name, shape, dim=None, kind="normal", seq_sharded_grad=False) -> torch.nn.Parameter:
        self.layout[name] = ("parts", dim, (shape[dim],)) if (self.tp.size > 1 and dim is not None) else None
        t = shard(full_tensor(self.seed, name, shape, kind), dim, self.tp.rank, self.tp.size).to(self.dtype)
        return self.param(name, t, seq_sharded_grad)

    def linear(self, name, n_in, n_out, split: str, bias: bool, parts=None) -> Linear:
        """split: "column" (output rows sharded), "row" (input columns sharded) or "duplicated"
        (the whole weight on every rank, on the rank's own tokens: its gradient is all-reduced
        over the group under sequence parallelism). `parts` splits a fused output (QKV) so that
        each part is sharded on its own."""
        bias = bias and self.s.model.bias
        if split == "duplicated":
            self.layout[f"{name}.weight"] = None
            w = full_tensor(self.seed, f"{name}.weight.0", (n_out, n_in))
            return Linear(self.param(f"{name}.weight", w.to(self.dtype), seq_sharded_grad=True), None, self.store)
        if split == "column":
            parts = parts or [n_out]
            ws = [shard(full_tensor(self.seed, f"{name}.weight.{i}", (p, n_in)), 0, self.tp.rank, self.tp.size)
                  for i, p in enumerate(parts)]
            bs = [shard(full_tensor(self.seed, f"{name}.bias.{i}", (p,), "small"), 0, self.tp.rank, self.tp.size)
                  for i, p in enumerate(parts)] if bias else None
            w, b = torch.cat(ws, 0), (torch.cat(bs, 0) if bias else None)
            self.layout[f"{name}.weight"] = ("parts", 0, tuple(parts)) if self.tp.size > 1 else None
            if bias:
                self.layout[f"{name}.bias"] = ("parts", 0, tuple(parts)) if self.tp.size > 1 else None
        else:
            w = shard(full_tensor(self.seed, f"{name}.weight.0", (n_out, n_in)), 1, self.tp.rank, self.tp.size)
            b = full_tensor(self.seed, f"{name}.bias.0", (n_out,), "small") if bias else None
            self.layout[f"{name}.weight"] = ("parts", 1, (n_in,)) if self.tp.size > 1 else None
            if bias:
                self.layout[f"{name}.bias"] = None
        return Linear(self.param(f"{name}.weight", w.to(self.dtype)),
                      None if b is None else self.param(f"{name}.bias", b.to(self.dtype),
                                                        seq_sharded_grad=split == "row"), self.store,
                      bias_after_reduce=split == "row" and self.tp.size > 1)


class Norm(torch.nn.Module):
    def __init__(self, b: Builder, name: str):
        super().__init__()
        h = b.s.model.hidden_size
        self.rms = b.s.model.norm == "rmsnorm"
        self.weight = b.tensor(f"{name}.weight", (h,), kind="ones", seq_sharded_grad=True)
        self.bias = None if self.rms else b.tensor(f"{name}.bias", (h,), kind="small", seq_sharded_grad=True)

    def forward(self, x):
        if self.rms:
            return F.rms_norm(x, (x.shape[-1],), self.weight, eps=1e-5)
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, eps=1e-5)


def dropout(x, on: bool, training: bool = True):
    return F.dropout(x, DROPOUT_P, training) if on else x


def rotary(x, base: float = 10000.0, positions=None):
    """Rotary position embedding (Su et al. 2021, "RoFormer", Eq. 34) on [batch*heads, s, d];
    `positions`: global positions of the s tokens (context parallelism), default 0..s-1."""
    s, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    pos = torch.arange(s, device=x.device) if positions is None else positions.to(x.device)
    ang = torch.outer(pos.to(torch.float32), inv)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def document_tensor(scenario) -> torch.Tensor | None:
    """The document of every position of a packed sequence (training.document_length; the same
    seeded draw on every rank and in the single-process reference), or None."""
    tr = scenario.training
    if tr.document_length is None:
        return None
    from pipesim.costs.documents import document_ids
    return torch.from_numpy(document_ids(scenario.model.seq_length, tr.document_length, tr.document_length_cv))


class AttentionCore(torch.nn.Module):
    """Eager: logits (one baddbmm with the 1/sqrt(d) scale and the causal mask folded in, as
    Megatron's scale-mask-softmax), softmax, dropout, attend (bmm); or one fused
    scaled_dot_product_attention (flash). q, k, v: [batch*heads, s, d], strided views allowed.
    Packed documents (training.document_length) hide the keys of other documents as well."""

    def __init__(self, scenario, heads: int):
        super().__init__()
        m = scenario.model
        self.causal, self.drop, self.heads = m.causal, m.dropout, heads
        self.flash = scenario.training.attention == "flash"
        self.scale = 1.0 / math.sqrt(m.head_dim)
        self.docs = document_tensor(scenario)
        self.masked = self.causal or self.docs is not None
        self._bias: dict = {}

    def bias(self, s: int, like):
        key = (s, like.device, like.dtype)
        if key not in self._bias:
            b = torch.zeros(s, s, dtype=like.dtype, device=like.device)
            hidden = torch.zeros(s, s, dtype=torch.bool, device=like.device)
            if self.causal:
                hidden |= torch.ones(s, s, dtype=torch.bool, device=like.device).triu_(1)
            if self.docs is not None:
                docs = self.docs[:s].to(like.device)
                hidden |= docs[:, None] != docs[None, :]
            self._bias[key] = b.masked_fill_(hidden, float("-inf"))
        return self._bias[key]

    def forward(self, q, k, v):
        if self.flash:
            B, s, d = q.shape
            shape = (B // self.heads, self.heads, s, d)
            mask = self.bias(s, q) if self.docs is not None else None
            o = F.scaled_dot_product_attention(q.view(shape), k.view(shape), v.view(shape), attn_mask=mask,
                                               dropout_p=DROPOUT_P if self.drop else 0.0,
                                               is_causal=self.causal and mask is None)
            return o.view(B, s, d)
        s = q.shape[1]
        scores = torch.baddbmm(self.bias(s, q), q, k.transpose(1, 2), beta=1.0 if self.masked else 0.0,
                               alpha=self.scale)
        probs = dropout(torch.softmax(scores, dim=-1), self.drop)
        return torch.bmm(probs, v)


class Block(torch.nn.Module):
    """Pre-norm transformer layer on [s, b, h] activations (Megatron's layout, so the per-head
    attention operands are strided views of the QKV output, not copies)."""

    def __init__(self, b: Builder, i: int, recompute: str):
        super().__init__()
        m, tp = b.s.model, b.tp
        h, a, g, d = m.hidden_size, m.num_attention_heads, m.kv_heads, m.head_dim
        self.tp, self.recompute = tp, recompute
        self.cp = None       # emulator.context.ContextGroup when context parallel
        self.heads, self.kv = a // tp.size, g // tp.size
        self.per_group = a // g                       # query heads sharing one key/value head
        self.d, self.drop, self.rope = d, m.dropout, m.position == "rotary"
        self.gated = m.activation == "swiglu"
        self.act = m.activation
        # a hybrid model's layer is one sublayer: attention, mlp or mamba (costs/layers.py)
        self.kind = m.layer_kind(i) if m.hybrid_layer_pattern else "block"
        p = f"layers.{i}"
        if self.kind in ("block", "attention", "mamba", "gdn"):
            self.ln1 = Norm(b, f"{p}.ln1")
        if self.kind == "mamba":
            from pipesim.emulator.mamba import Mamba
            self.mixer = Mamba(b, f"{p}.mixer")
        if self.kind == "gdn":
            from pipesim.emulator.gated_delta import GatedDeltaNet
            self.mixer = GatedDeltaNet(b, f"{p}.mixer")
        self.latent = None
        if self.kind in ("block", "attention") and m.is_mla:
            from pipesim.emulator.mla import LatentAttention
            self.latent = LatentAttention(b, p, recompute, rotary)
        elif self.kind in ("block", "attention"):
            # QKV rows grouped per key/value head: [q heads of the group | k | v] (Megatron's GQA
            # layout), so a tensor-parallel split of the rows hands each rank whole groups.
            self.qkv = b.linear(f"{p}.qkv", h, h + 2 * g * d, "column", True)
            self.core = AttentionCore(b.s, self.heads)
            self.proj = b.linear(f"{p}.proj", h, h, "row", True)
        if self.kind in ("block", "mlp"):
            self.ln2 = Norm(b, f"{p}.ln2")
            ffn = m.ffn * (2 if self.gated else 1)
            self.fc1 = b.linear(f"{p}.fc1", h, ffn, "column", True, parts=[m.ffn, m.ffn] if self.gated else None)
            self.fc2 = b.linear(f"{p}.fc2", m.ffn, h, "row", True)
        # LoRA (training.lora_rank): an adapter beside each targeted linear (pipesim/emulator/lora.py)
        self.adapters = None
        if self.kind == "block" and self.latent is None:
            ffn_parts = [m.ffn, m.ffn] if self.gated else None
            self.adapters = lora_adapters(b, p, {"qkv": (h, h + 2 * g * d, None), "proj": (h, h, None),
                                                 "fc1": (h, m.ffn * (2 if self.gated else 1), ffn_parts),
                                                 "fc2": (m.ffn, h, None)})

    def attention(self, x):
        if self.latent is not None:
            return dropout(self.latent(self.ln1(x), self.cp), self.drop)
        s, bsz, _ = x.shape
        r, d, kv = self.per_group, self.d, self.kv
        qkv = column(self.qkv, self.ln1(x), self.tp, self.adapters, "qkv")
        s = qkv.shape[0]                             # the whole sequence (gathered under SP)
        qkv = qkv.view(s, bsz, kv, (r + 2) * d)
        q, k, v = qkv.split([r * d, d, d], dim=-1)
        if r == 1:      # one query head per group: [s, b*heads, d] views, no copies
            q, k, v = (t.view(s, bsz * kv, d).transpose(0, 1) for t in (q, k, v))
        else:           # grouped-query attention: share each kv head among its r query heads
            q = q.reshape(s, bsz * self.heads, d).transpose(0, 1)
            k, v = (t.reshape(s, bsz * kv, d).transpose(0, 1) for t in (k, v))
            if self.cp is None:     # under CP the exchange moves the kv heads; shared after it
                k, v = k.repeat_interleave(r, dim=0), v.repeat_interleave(r, dim=0)
        if self.rope:
            pos = self.cp.positions if self.cp is not None else None
            q, k = rotary(q, positions=pos), rotary(k, positions=pos)
        # context parallel attention (ring, all-gather or all-to-all) under CP
        core = self.core if self.cp is None else functools.partial(self.cp.attention, heads=self.heads, group=r)
        if self.recompute == "selective":
            # Korthikanti et al. 2022, Sec. 4.2: re-run only the attention core in the backward.
            o = recompute(core, q, k, v)
        else:
            o = core(q, k, v)
        o = o.transpose(0, 1).reshape(s, bsz, self.heads * d)
        out = with_adapter(self.adapters, "proj", o, self.proj.add_bias(exit_tp(self.proj(o), self.tp)))
        return dropout(out, self.drop)

    def mlp(self, x):
        y = column(self.fc1, self.ln2(x), self.tp, self.adapters, "fc1")
        if self.gated:
            gate, up = y.chunk(2, dim=-1)
            y = F.silu(gate) * up
        elif self.act == "gelu":
            y = F.gelu(y)
        else:
            y = F.relu(y)
            y = y * y if self.act == "squared_relu" else y          # Nemotron-H's squared ReLU
        return dropout(with_adapter(self.adapters, "fc2", y, self.fc2.add_bias(exit_tp(self.fc2(y), self.tp))),
                       self.drop)

    def body(self, x):
        if self.kind in ("mamba", "gdn"):
            return x + self.mixer(self.ln1(x))
        if self.kind != "mlp":
            x = x + self.attention(x)
        return x if self.kind == "attention" else x + self.mlp(x)

    def forward(self, x):
        if self.recompute == "full":
            # Korthikanti et al. 2022, Sec. 4.3: keep the layer input, re-run the layer in the backward.
            return recompute(self.body, x)
        return self.body(x)


class Embedding(torch.nn.Module):
    """Vocab-parallel word embedding (Shoeybi et al. 2019, Sec. 3) + learned positions + dropout."""

    def __init__(self, b: Builder):
        super().__init__()
        m, tp = b.s.model, b.tp
        self.tp, self.drop = tp, m.dropout
        self.cp = None       # emulator.context.ContextGroup when context parallel
        self.vocab_start = tp.rank * (m.vocab_size // tp.size)
        self.word = b.tensor("embedding.word", (m.vocab_size, m.hidden_size), dim=0)
        self.pos = (b.tensor("embedding.position", (m.seq_length, m.hidden_size), seq_sharded_grad=True)
                    if m.position == "learned" else None)

    def forward(self, tokens):
        tokens = tokens.t()                         # [s, b]: activations are [s, b, h]
        if self.tp.size > 1:
            local = tokens - self.vocab_start
            outside = (local < 0) | (local >= self.word.shape[0])
            x = F.embedding(local.masked_fill(outside, 0), self.word)
            x = exit_tp(x.masked_fill(outside.unsqueeze(-1), 0.0), self.tp)
        else:
            x = F.embedding(tokens, self.word)
        if self.pos is not None:
            pos = self.pos[: tokens.shape[0]] if self.cp is None else self.pos[self.cp.positions.to(tokens.device)]
            if self.tp.sp:           # this rank's slice of the sequence
                pos = pos.chunk(self.tp.size, 0)[self.tp.rank]
            x = x + pos.unsqueeze(1)
        return dropout(x, self.drop)


class _VocabParallelCE(torch.autograd.Function):
    """Cross-entropy over vocab-sharded logits (Shoeybi et al. 2019, Sec. 3: the max and the
    sum of exponentials are all-reduced, 2 x tokens floats, instead of gathering the logits)."""

    @staticmethod
    def forward(ctx, logits, target, tp, vocab_start):
        import torch.distributed as dist
        lmax = logits.max(dim=-1).values
        tp.all_reduce(lmax, "fwd", op=dist.ReduceOp.MAX)
        shifted = logits - lmax.unsqueeze(-1)
        local = target - vocab_start
        outside = (local < 0) | (local >= logits.shape[-1])
        picked = shifted.gather(-1, local.masked_fill(outside, 0).unsqueeze(-1)).squeeze(-1)
        picked = picked.masked_fill(outside, 0.0)
        exp = shifted.exp()
        sums = torch.stack((exp.sum(-1), picked))
        tp.all_reduce(sums, "fwd")
        loss = sums[0].log() - sums[1]
        exp.div_(sums[0].unsqueeze(-1))              # softmax, kept for the backward
        ctx.save_for_backward(exp, local, outside)
        return loss.mean()

    @staticmethod
    def backward(ctx, g):
        softmax, local, outside = ctx.saved_tensors
        grad = softmax.clone()
        rows = grad.view(-1, grad.shape[-1])
        idx = local.masked_fill(outside, 0).view(-1)
        hit = (~outside).view(-1).to(grad.dtype)
        rows[torch.arange(rows.shape[0], device=rows.device), idx] -= hit
        return grad * (g / local.numel()), None, None, None


class Head(torch.nn.Module):
    def __init__(self, b: Builder, tied_to: Embedding | None):
        super().__init__()
        m, tp = b.s.model, b.tp
        self.tp = tp
        self.norm = Norm(b, "final_norm")
        self.vocab_start = tp.rank * (m.vocab_size // tp.size)
        weight = tied_to.word if tied_to is not None else b.tensor("head.weight", (m.vocab_size, m.hidden_size), dim=0)
        self.lin = Linear(weight, None, b.store)

    def forward(self, x, target):
        """x: [s, b, h]; target: [b, s] token ids."""
        logits = column(self.lin, self.norm(x), self.tp)
        target = target.t().contiguous()
        if self.tp.size > 1:
            return _VocabParallelCE.apply(logits.float(), target, self.tp, self.vocab_start)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), target.reshape(-1))


class StageModel(torch.nn.Module):
    """One model stage: [embedding] + its layers + [head and loss]."""

    def __init__(self, b: Builder, stage: int, first_layer: int, n_layers: int, first: bool, last: bool,
                 tie_with: Embedding | None = None, tie: bool = False):
        super().__init__()
        self.stage, self.first, self.last = stage, first, last
        rc, limit = b.s.training.recompute, b.s.training.recompute_num_layers
        self.embedding = Embedding(b) if first else None
        # Megatron's block method: only the chunk's first `limit` layers recompute
        self.layers = torch.nn.ModuleList(Block(b, first_layer + i, rc if limit is None or i < limit else "none")
                                          for i in range(n_layers))
        if tie and tie_with is None:
            tie_with = self.embedding
        self.head = Head(b, tie_with if tie else None) if last else None

    def forward(self, x, target=None):
        if self.embedding is not None:
            x = self.embedding(x)
        for layer in self.layers:
            x = layer(x)
        if self.head is not None:
            return self.head(x, target)
        return x


def check_supported(s) -> None:
    """Raise ScenarioError for layouts the emulator does not run."""
    p, m = s.parallel, s.model
    where = s.source
    if p.tensor_mode != "1d":
        raise ScenarioError(f"{where}: parallel.tensor_mode={p.tensor_mode!r}: the emulator runs 1d tensor "
                            f"parallelism only (the simulator models 2d/2.5d/3d)")
    if p.sequence_parallel and p.tensor > 1 and m.seq_length % p.tensor:
        raise ScenarioError(f"{where}: model.seq_length={m.seq_length} is not divisible by parallel.tensor="
                            f"{p.tensor} (sequence parallelism splits the sequence)")
    if s.training.zero_stage:
        raise ScenarioError(f"{where}: training.zero_stage={s.training.zero_stage}: the emulator runs "
                            f"zero_stage 0 only")
    if p.context > 1 and m.dropout:
        raise ScenarioError(f"{where}: parallel.context={p.context}: the emulator's ring attention has no "
                            f"attention dropout; set model.dropout: false")
    if s.training.precision == "fp8":
        raise ScenarioError(f"{where}: training.precision fp8 is not emulated; use fp32, bf16 or fp16")
    if s.training.moe_shared_expert_overlap:
        raise ScenarioError(f"{where}: training.moe_shared_expert_overlap: the emulator runs the shared experts in "
                            f"line (a CPU rank has no second stream); set it to false")
    if s.training.recompute == "selective_op":
        raise ScenarioError(f"{where}: training.recompute selective_op is not emulated; use none, selective or full")
    odd = sorted(set(m.hybrid_layer_pattern) - set("MG*-"))
    if odd:
        raise ScenarioError(f"{where}: model.hybrid_layer_pattern: the emulator runs Mamba (M), Gated DeltaNet (G), "
                            f"attention (*) and MLP (-) layers, not {odd}")
    if "G" in m.hybrid_layer_pattern and p.tensor > 1:
        raise ScenarioError(f"{where}: parallel.tensor={p.tensor}: the emulator runs Gated DeltaNet layers on one "
                            f"tensor rank (pipeline and data parallelism only)")
    if m.hybrid_layer_pattern and p.context > 1:
        raise ScenarioError(f"{where}: parallel.context={p.context}: the emulator runs hybrid models without "
                            f"context parallelism")
    if s.training.optimizer == "muon" and p.tensor > 1 and s.training.muon_tp_mode == "duplicated":
        raise ScenarioError(f"{where}: training.muon_tp_mode duplicated: the emulator orthogonalises each rank's "
                            f"shard (blockwise) with tensor parallelism; set it to blockwise or tensor to 1")
    if m.mtp_layers:
        raise ScenarioError(f"{where}: model.mtp_layers={m.mtp_layers}: the emulator runs no multi-token "
                            f"prediction; set it to 0")
    if m.attention_variant == "dsa" and m.dsa_indexer_loss != "none":
        raise ScenarioError(f"{where}: model.dsa_indexer_loss={m.dsa_indexer_loss}: the emulator runs DeepSeek sparse "
                            f"attention with a frozen indexer; set it to none")
    if m.attention_variant == "dsa" and p.context > 1:
        raise ScenarioError(f"{where}: parallel.context={p.context}: the emulator runs DeepSeek sparse attention "
                            f"without context parallelism")
    if m.window_size:
        raise ScenarioError(f"{where}: model.window_size={m.window_size}: the emulator's attention is full "
                            f"causal; set it to 0")
    if s.training.document_length is not None and m.is_mla:
        raise ScenarioError(f"{where}: training.document_length={s.training.document_length}: the emulator masks "
                            f"packed documents in grouped-query attention only, not {m.attention_variant}")
    if s.training.lora_rank and (m.is_moe or m.is_mla or m.hybrid_layer_pattern):
        raise ScenarioError(f"{where}: training.lora_rank={s.training.lora_rank}: the emulator runs LoRA on dense "
                            f"grouped-query-attention blocks, not on mixture-of-experts, latent-attention or "
                            f"hybrid models")
    if s.training.lora_dropout:
        raise ScenarioError(f"{where}: training.lora_dropout={s.training.lora_dropout}: the emulator's adapters run "
                            f"without dropout; set it to 0")
    if s.training.recompute_modules != ("core_attn",):
        raise ScenarioError(f"{where}: training.recompute_modules: the emulator re-runs the attention core "
                            f"(selective) or whole layers (full) only")
    t = p.tensor
    for key, v in (("model.num_attention_heads", m.num_attention_heads), ("model.num_kv_heads", m.kv_heads),
                   ("model.ffn_hidden_size", m.ffn), ("model.vocab_size", m.vocab_size)):
        if v % t:
            raise ScenarioError(f"{where}: {key}={v} is not divisible by parallel.tensor={t}")


def stage_layer_ranges(s) -> list[tuple[int, int]]:
    """(first global layer, number of layers) of every model stage."""
    out, start = [], 0
    for n in s.layers_per_stage():
        out.append((start, n))
        start += n
    if start != s.model.num_layers:
        raise ScenarioError(f"{s.source}: layers per stage {list(s.layers_per_stage())} sum to {start}, "
                            f"model.num_layers is {s.model.num_layers}")
    return out


def build_stages(s, stages, tp: TPGroup, store: WeightGradStore, seed: int, dtype, tie: bool):
    """Build the given model stages; returns ({stage: StageModel}, Builder). `tie`: the LM head
    shares the embedding (only when stage 0 and the last stage live on this process)."""
    b = Builder(s, tp, store, seed, dtype)
    ranges = stage_layer_ranges(s)
    n = len(ranges)
    out: dict[int, StageModel] = {}
    for k in sorted(stages):
        first, last = k == 0, k == n - 1
        tie_with = out[0].embedding if (last and tie and 0 in out) else None
        out[k] = StageModel(b, k, ranges[k][0], ranges[k][1], first, last, tie_with=tie_with, tie=tie and last)
    if s.training.lora_rank:
        freeze_base(b)
    return out, b
