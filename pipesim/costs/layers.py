"""The transformer as ops: one layer, the embedding and the LM head, per micro-batch per GPU.

Conventions: a matmul of (m x k) @ (k x n) costs 2mnk FLOPs forward and 4mnk backward (input and
weight gradients, 2mnk each) -- Kaplan et al. 2020, Sec. 2.1; Narayanan et al. SC'21, Sec. 5.1.
Saved activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models"), Sec. 4.1, Eq. 1-4: per layer sbh(34 + 5as/h) bytes at 2-byte precision
without parallelism, with 1-byte dropout masks; tensor parallelism divides the attention/MLP
cores by t, sequence parallelism also the norms and dropouts.
Vector-op FLOP counts are per element (norm 8 fwd/ 10 bwd, softmax 5/4, gelu 8/12, dropout 1/1)
and only matter when a roofline is compute bound, which these ops never are.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.costs.documents import with_documents
from pipesim.costs.fp8 import fp8_gathers
from pipesim.costs.lora import with_lora
from pipesim.costs.memory import grad_elem_bytes
from pipesim.costs.ops import Comm, Op
from pipesim.costs.tensor_parallel import TensorSplit, tensor_split
from pipesim.scenario.config import Scenario

MASK_BYTES = 1   # dropout masks are stored as bytes (Korthikanti et al. 2022, Sec. 4.1)
FP32 = 4
# Cross-entropy over the V/t logits of each token by implementation (`training.cross_entropy`):
# (forward, backward) HBM bytes per logit, and bytes per logit kept for the backward.
CE_BYTES = {
    # Megatron-LM's unfused vocab-parallel cross-entropy, pass by pass
    # (megatron/core/tensor_parallel/cross_entropy.py, called on logits.float() by
    # GPTModel.compute_language_model_loss). Forward: cast to fp32 (2 read + 4 written), row max
    # (4), subtract the max (4 + 4), exp in place (4 + 4), row sum (4), divide in place to keep
    # the softmax (4 + 4) = 38. Backward: scale the saved softmax by the loss gradient in place
    # (4 + 4), cast the fp32 gradient back to 16 bits (4 + 2) = 14. Keeps the fp32 softmax.
    "megatron": (38, 14, 4),
    # Megatron-Core's fused one (--cross-entropy-loss-fusion, cross_entropy_fusion_impl native;
    # megatron/core/fusions/fused_cross_entropy.py): the cast fused with the row max (2 + 4), the
    # subtraction fused with the in-place exp (4 + 4), row sum (4), divide in place (4 + 4) = 26;
    # the backward as above.
    "megatron_fused": (26, 14, 4),
    # Transformer Engine's Triton kernels (cross_entropy_fusion_impl te;
    # transformer_engine/pytorch/triton/cross_entropy.py): one online pass for the row max and
    # sum of exponentials (2 read), one pass writing the loss gradient over the 16-bit logits in
    # place (2 + 2); the backward scales it by the per-token loss gradient (2 + 2). Keeps the
    # 16-bit logits, now holding the gradient.
    "te": (6, 4, 2),
    # PyTorch's F.cross_entropy on logits.float() (torchtitan): cast (2 + 4); log_softmax reads
    # the row three times (max, sum of exponentials, the write pass) and writes once (16)
    # (aten/src/ATen/native/cuda/SoftMax.cu, cunn_SoftMaxForward) = 22. Backward: nll_loss
    # zero-fills the fp32 input gradient (4; NLLLoss.cu), log_softmax's backward reads it twice
    # (row sum, then the write pass) with the kept output, writes once (16;
    # cunn_SoftMaxBackward), the cast to 16 bits (4 + 2) = 26. Keeps the fp32 log-softmax.
    "torch": (22, 26, 4),
    # F.cross_entropy on the 16-bit logits, not upcast (NeMo AutoModel's MaskedCrossEntropy with
    # fp32_upcast false): log_softmax reads the row three times and writes once in 16 bits (8);
    # backward: nll_loss's zero-filled input gradient (2), log_softmax's backward reads it twice
    # with the kept output and writes once (8) = 10. Keeps the 16-bit log-softmax.
    "torch_16bit": (8, 10, 2),
    # The same loss under torch.compile (torchtitan compiles loss_fn with --training.compile since
    # 2025, torchtitan/components/loss.py build_cross_entropy_loss): Inductor fuses the cast into
    # the row reductions, reading the 16-bit logits for the max and again for the sum of
    # exponentials (2 + 2), and AOTAutograd's min-cut partitioner
    # (torch/_functorch/partitioners.py min_cut_rematerialization_partition) saves the smallest
    # cut, the 16-bit logits and a per-row statistic, rather than the fp32 log-softmax; the
    # backward recomputes the softmax from them in one kernel writing the 16-bit gradient
    # (2 + 2). Keeps the 16-bit logits.
    "torch_compiled": (4, 4, 2),
    # F.cross_entropy on fp32 logits sharded over the tensor group, as PyTorch's loss_parallel runs
    # it (torch/distributed/tensor/parallel/loss.py; torchtitan with TP): `_log_softmax` casts (2 +
    # 4), takes the row max (4), writes x - max (4 + 4), exp of it (4 + 4), sums it (4) and writes
    # the result (4 + 4) = 38; `_nll_loss_and_log_softmax_backward` zero-fills the gradient (4),
    # computes (grad + exp(x)) * grad_output: exp (4 + 4), add (8 + 4), multiply (4 + 4), and the
    # cast to 16 bits (4 + 2) = 42. Keeps the fp32 log-softmax.
    "torch_loss_parallel": (38, 42, 4),
    # flash-attn's CrossEntropyLoss (flash_attn/losses/cross_entropy.py: the Triton kernels of
    # flash_attn/ops/triton/cross_entropy.py in 2.x, apex's xentropy CUDA kernel in 1.x; MPT's
    # default loss in llm-foundry): the forward reads the 16-bit logits once for the row's log-sum-exp
    # and loss, writing per-row values only (2); the backward reads them again and writes the 16-bit
    # gradient into a new tensor (2 + 2; inplace_backward off by default). Keeps the 16-bit logits.
    "flash_attn": (2, 4, 2),
}


def cross_entropy_of(training) -> str:
    """The cross-entropy implementation: `training.cross_entropy`, or for auto the stack's own:
    PyTorch's for a PyTorch-native stack (kernel_fusion eager), Megatron's unfused one otherwise
    (Megatron-LM's default: --cross-entropy-loss-fusion is off unless given)."""
    if training.cross_entropy != "auto":
        return training.cross_entropy
    return "torch" if training.kernel_fusion == "eager" else "megatron"


@dataclass(frozen=True)
class Shapes:
    b: int          # micro-batch size
    s: int          # sequence length
    h: int          # hidden
    a: int          # heads
    g: int          # kv heads
    d: int          # head dim
    f: int          # ffn hidden
    v: int          # vocab
    e: int          # bytes per element
    tp: TensorSplit
    cp: int = 1     # context parallel size: `s` is the local sequence, seq_length / cp

    @property
    def tokens(self) -> int:
        return self.b * self.s


def shapes_of(s: Scenario) -> Shapes:
    m = s.model
    cp = s.parallel.context
    # Context parallelism shards the sequence: every op outside attention sees seq/CP tokens
    # (Megatron-Core context parallelism; Liu et al. 2023, "Ring Attention", Sec. 3).
    return Shapes(b=s.training.micro_batch_size, s=m.seq_length // cp, h=m.hidden_size, a=m.num_attention_heads,
                  g=m.kv_heads, d=m.head_dim, f=m.ffn, v=m.vocab_size, e=s.bytes_per_element,
                  tp=tensor_split(s.parallel), cp=cp)


def matmul(name: str, tokens: float, k: float, n: float, sh: Shapes, role: str, saved_input: float,
           dtype: str, bias: bool, keeps_gathered: bool = False) -> Op:
    """Linear layer Y[tokens, n] = X[tokens, k] @ W[k, n], sharded per the tensor split.
    `k`, `n` are full sizes; flops and bytes are per GPU (divided by the whole group).
    `keeps_gathered`: a column-parallel linear keeps its all-gathered input for the backward
    (keeps_gathered_input), so it does not gather it again there."""
    t, e = sh.tp.size, sh.e
    a_full, w_full, c_full = tokens * k * e, k * n * e, tokens * n * e
    wdiv = sh.tp.weight_div
    flops = 2 * tokens * k * n / t
    # Roofline traffic (per GPU): read A and W, write C; backward reads dC, A, W, writes dA, dW.
    a_loc, c_loc, w_loc = a_full / _a_div(sh, role), c_full / _c_div(sh, role), w_full / wdiv
    fwd, bwd = sh.tp.matmul_comms(role, a_full, w_full, c_full, regather=not keeps_gathered)
    if dtype == "fp8" and sh.tp.mode == "1d" and sh.tp.sequence_parallel:
        fwd, bwd = fp8_gathers(fwd, bwd, e)
    params = k * n / wdiv + (n / _n_div(sh, role) if bias else 0)
    m_loc, k_loc, n_loc = tokens / sh.tp.token_div, k / _k_div(sh, role), n / _n_div(sh, role)
    shape = dict(m=int(m_loc), k=int(k_loc), n=int(n_loc), dtype=dtype)
    # 1D TP (with or without sequence parallelism) multiplies all tokens: SP gathers them first
    m_gemm = tokens if sh.tp.mode == "1d" else m_loc
    b_loc = (n / _n_div(sh, role)) * e if bias else 0.0       # bias read (and its gradient)
    if dtype == "fp8":
        # the weight-gradient GEMM's input is kept as its FP8 copy (Hopper: the column-wise one),
        # 1 byte per element, not the 16-bit tensor (Transformer Engine Linear; TE issue #1764,
        # maintainer's answer of 2025-06-16: "we cache the FP8 data (on Blackwell) or the FP8
        # transpose data (on Hopper)", half the activation memory of the GEMM inputs)
        saved_input = saved_input / e
    return Op(name, "matmul", flops, 2 * flops, a_loc + w_loc + b_loc + c_loc,
              c_loc + 2 * a_loc + 2 * (w_loc + b_loc),
              saved_bytes=saved_input, params=params, comm_fwd=fwd, comm_bwd=bwd, dgrad_fraction=0.5,
              param_tensors=2 if bias else 1,
              # with a bias, a CPU addmm first broadcasts the bias into Y, and the backward sums dY
              # over the tokens for the bias gradient: one more pass over Y each way
              measure_fwd=(("gemm", shape),) + ((("bias_fwd", dict(rows=shape["m"], cols=shape["n"], dtype=dtype)),)
                                                if bias else ()),
              # forward Y = X W; input grad dX = dY W^T (M x K, over N); weight grad dW = X^T dY (K x N, over M)
              gemms_fwd=((1, m_gemm, n_loc, k_loc, dtype),),
              gemms_bwd=((1, m_gemm, k_loc, n_loc, dtype), (1, k_loc, n_loc, m_gemm, dtype, "wgrad")),
              measure_bwd=(("gemm", dict(m=shape["m"], k=shape["n"], n=shape["k"], dtype=dtype)),
                           ("gemm", dict(m=shape["k"], k=shape["m"], n=shape["n"], dtype=dtype)))
              + ((("bias_bwd", dict(rows=shape["m"], cols=shape["n"], dtype=dtype)),) if bias else ()),
              matrices=((1, n, k, _n_div(sh, role), _k_div(sh, role)),))


def _k_div(sh: Shapes, role: str) -> int:
    if sh.tp.mode == "1d":
        return sh.tp.size if role == "row" else 1
    return sh.tp.q


def _n_div(sh: Shapes, role: str) -> int:
    if sh.tp.mode == "1d":
        return sh.tp.size if role == "column" else 1
    return sh.tp.q


def _a_div(sh: Shapes, role: str) -> float:
    # 1D: the column-parallel input is replicated (or gathered); the row-parallel input is split.
    return sh.tp.token_div * _k_div(sh, role)


def _c_div(sh: Shapes, role: str) -> float:
    return sh.tp.token_div * _n_div(sh, role)


def vector(name: str, elements: float, sh: Shapes, flops_per_elem: tuple[float, float],
           reads: float = 1, writes: float = 1, saved_bytes: float = 0.0, params: float = 0.0,
           mask: bool = False, measure_fwd=(), measure_bwd=()) -> Op:
    """Elementwise/normalisation op over `elements` (already per GPU)."""
    e = sh.e
    extra = elements * MASK_BYTES if mask else 0.0
    return Op(name, "vector", flops_per_elem[0] * elements, flops_per_elem[1] * elements,
              (reads + writes) * elements * e + extra + params * e,
              (reads + writes + 1) * elements * e + extra + 2 * params * e,
              saved_bytes=saved_bytes, params=params, measure_fwd=measure_fwd, measure_bwd=measure_bwd)


def layer_ops(s: Scenario, moe: bool | str = False) -> list[Op]:
    """The ops of one transformer layer (pre-norm GPT/Llama block; BERT's post-norm costs the same).
    moe: True, the MLP is a mixture-of-experts block (pipesim/costs/moe.py); MLA attention replaces
    the q/k/v projections and the attention core (pipesim/costs/mla.py).
    In a hybrid model (model.hybrid_layer_pattern) a layer is one sublayer with its own pre-norm
    and residual, `moe` its kind (ModelConfig.layer_kind): "attention", "mlp", "mamba"
    (pipesim/costs/mamba.py), "gdn" (pipesim/costs/gated_delta.py) or True (MoE).
    Packed documents (training.document_length) shrink the fused attention to the pieces' pairs
    (pipesim/costs/documents.py). LoRA fine-tuning (training.lora_rank) freezes the weights and adds
    the adapters (pipesim/costs/lora.py)."""
    ops = hybrid_layer_ops(s, moe) if s.model.hybrid_layer_pattern else block_ops(s, moe)
    return with_lora(s, with_documents(s, ops))


def hybrid_layer_ops(s: Scenario, kind: bool | str) -> list[Op]:
    """One layer of a hybrid model: the attention or the MLP / MoE half of a transformer block
    (Megatron-Core builds them as separate layers, each norm -> sublayer -> residual), a Mamba-2
    or a Gated DeltaNet mixer."""
    if kind in ("mamba", "gdn"):
        from pipesim.costs.gated_delta import gdn_ops
        from pipesim.costs.mamba import mamba_ops
        sh = shapes_of(s)
        norm = lambda name: replace(vector(name, sh.tokens / sh.tp.token_div * sh.h, sh, (8, 10),
                                           saved_bytes=sh.tokens / sh.tp.token_div * sh.h * sh.e, params=sh.h),
                                    param_tensors=1)
        return (mamba_ops if kind == "mamba" else gdn_ops)(s, sh, norm, vector, matmul)
    ops = block_ops(s, kind is True)
    mlp = [o.name for o in ops].index("ln2")
    return ops[:mlp] if kind == "attention" else ops[mlp:]


def block_ops(s: Scenario, moe: bool = False) -> list[Op]:
    """A transformer block: attention and MLP (or MoE with `moe`), see layer_ops."""
    sh = shapes_of(s)
    m, tr = s.model, s.training
    e, tp = sh.e, sh.tp
    T = sh.tokens
    dtype = tr.precision
    tok = T / tp.token_div                       # tokens held outside the attention/MLP cores
    hd = tp.head_div
    heads, kv = sh.a / hd, max(sh.g / hd, 1)    # heads per GPU (kv replicated when g < split)
    # 2D / 2.5D / 3D tensor parallelism also splits the attention core's samples over the grid's
    # other axis (tp.size / head_div ways), as its activations are
    core_split = tp.size // hd if tp.mode != "1d" else 1
    scores = sh.b * heads * sh.s * sh.s / core_split
    core_sh = replace(sh, b=sh.b / core_split)
    norm_params = sh.h * (2 if m.norm == "layernorm" else 1)
    ops: list[Op] = []

    def norm(name: str) -> Op:
        shape = dict(rows=int(tok), cols=sh.h, dtype=dtype)
        return replace(vector(name, tok * sh.h, sh, (8, 10), saved_bytes=tok * sh.h * e, params=norm_params,
                              measure_fwd=(("layer_norm_fwd", shape),), measure_bwd=(("layer_norm_bwd", shape),)),
                       param_tensors=2 if m.norm == "layernorm" else 1)

    def dropout(name: str, elements: float) -> Op | None:
        if not m.dropout:
            return None
        return vector(name, elements, sh, (1, 1), saved_bytes=elements * MASK_BYTES, mask=True)

    q_dim = sh.a * sh.d                          # = h unless the head dim is set (kv_channels)
    qkv_out = q_dim + 2 * sh.g * sh.d
    ops.append(norm("ln1"))
    attn_start = len(ops)
    kept = column_kept_tokens(s, sh)
    qkv = matmul("qkv", T, sh.h, qkv_out, sh, "column", saved_input=kept * sh.h * e, dtype=dtype, bias=m.bias,
                 keeps_gathered=keeps_gathered_input(s, sh))
    # a matrix optimizer sees Q, K and V apart (Megatron-Core muon_split_qkv, on by default)
    (_, _, _, rdiv, cdiv), = qkv.matrices
    ops.append(replace(qkv, matrices=((1, q_dim, sh.h, rdiv, cdiv), (2, sh.g * sh.d, sh.h, rdiv, cdiv))))
    if m.position == "rotary":
        # rotary embedding of Q and K (Su et al. 2021, "RoFormer", Eq. 34: each pair of features
        # rotated, 2 mul + 1 add per element), one memory-bound pass each way: read Q and K,
        # write them rotated (Megatron-Core's fused RoPE, apply_rope_fusion; the backward rotates
        # the gradients back). Nothing saved but the angle table.
        ops.append(vector("rope", sh.b * sh.s * (heads + kv) * sh.d / (tp.size // hd if tp.mode != "1d" else 1),
                          sh, (3, 3)))
    flash = tr.attention == "flash"
    if sh.cp > 1:        # ring / all-gather attention: blockwise flash kernels (pipesim.costs.context)
        from pipesim.costs.context import context_attention_ops
        ops += context_attention_ops(s, sh, heads, kv, dtype)
    elif flash and m.windowed_share:
        ops += windowed_attention(core_sh, heads, kv, dtype, m.window_size, m.windowed_share, m.window_kind)
    elif flash:
        ops.append(flash_attention(core_sh, heads, kv, dtype, m.causal))
    else:
        qk_saved = sh.b * sh.s * (heads + kv) * sh.d * e / (tp.size // hd if tp.mode != "1d" else 1)
        # batched GEMMs, one per (sample, head): scores[s, s] = Q[s, d] K^T; backward dQ, dK (K = s)
        nb = scores / (sh.s * sh.s) if sh.s else 0.0
        adt = high_precision(dtype)
        # Profile lookups of the eager core (1D split: batch*heads independent matrices), as the
        # CPU emulator runs it: logits = baddbmm(mask, Q, K^T); softmax over rows of s; attend = P V.
        bm = dict(batch=int(sh.b * heads), dtype=dtype, bias=False)
        core = tp.mode == "1d"
        s_, d_ = sh.s, sh.d
        ops.append(Op("logits", "matmul", 2 * scores * sh.d, 4 * scores * sh.d,
                      qk_saved + scores * e, scores * e + 2 * qk_saved, saved_bytes=qk_saved,
                      dgrad_fraction=1.0, attention_core=True,
                      gemms_fwd=((nb, sh.s, sh.s, sh.d, adt),),
                      gemms_bwd=((nb, sh.s, sh.d, sh.s, adt), (nb, sh.s, sh.d, sh.s, adt)),
                      measure_fwd=(("bmm", dict(bm, m=s_, n=s_, k=d_, bias=bool(m.causal))),) if core else (),
                      measure_bwd=(("bmm", dict(bm, m=s_, n=d_, k=s_)),) * 2 if core else ()))
        rows = dict(rows=int(sh.b * heads * s_), cols=s_, dtype=dtype)
        sm = vector("softmax", scores, sh, (5, 4), saved_bytes=scores * e,
                    measure_fwd=(("softmax_fwd", rows),) if core else (),
                    measure_bwd=(("softmax_bwd", rows),) if core else ())
        sm = replace(sm, selective_dropped_bytes=scores * e)
        ops.append(replace(sm, attention_core=True))
        dp = dropout("attn_dropout", scores)
        if dp:
            ops.append(replace(dp, attention_core=True, selective_dropped_bytes=dp.saved_bytes))
        v_saved = sh.b * sh.s * kv * sh.d * e / (tp.size // hd if tp.mode != "1d" else 1)
        # attend saves its probability input: the dropout output, or without dropout the softmax
        # output itself, which softmax already counts.
        probs = scores * e if dp else 0.0
        # part of the core attention selective recompute re-runs: Megatron checkpoints the whole
        # core-attention function, P V included (Korthikanti et al. 2022, Sec. 4.2, Fig. 3)
        ops.append(Op("attend", "matmul", 2 * scores * sh.d, 4 * scores * sh.d,
                      scores * e + 2 * v_saved, 2 * scores * e + 3 * v_saved,
                      saved_bytes=probs + v_saved, dgrad_fraction=1.0, attention_core=True,
                      selective_dropped_bytes=probs,
                      # context[s, d] = P[s, s] V; backward dP = dC V^T (K = d), dV = P^T dC (K = s)
                      gemms_fwd=((nb, sh.s, sh.d, sh.s, adt),),
                      gemms_bwd=((nb, sh.s, sh.s, sh.d, adt), (nb, sh.s, sh.d, sh.s, adt)),
                      measure_fwd=(("bmm", dict(bm, m=s_, n=d_, k=s_)),) if core else (),
                      measure_bwd=(("bmm", dict(bm, m=s_, n=s_, k=d_)), ("bmm", dict(bm, m=s_, n=d_, k=s_)))
                      if core else ()))
    # A fused attention kernel keeps its output O for its own backward, and the out-projection's
    # saved input is that same storage (Megatron-Core / TE Linear save the input tensor itself;
    # PyTorch's SDPA flash returns its (b, s, h, d) output as a transposed view, so torchtitan's
    # .transpose(1, 2).contiguous() copies nothing): held once. Under FP8 the projection keeps its
    # own FP8 copy instead (TE linear.py: saved_inputmat is the quantized input), 1 byte per element.
    fused = flash or sh.cp > 1
    shares_o = fused and dtype != "fp8"
    ops.append(matmul("proj", T, q_dim, sh.h, sh, "row", saved_input=0.0 if shares_o else T * q_dim * e / tp.size,
                      dtype=dtype, bias=m.bias))
    if m.is_mla:
        from pipesim.costs.mla import mla_attention_ops
        ops[attn_start:] = mla_attention_ops(s, sh)
    ops += [o for o in (dropout("dropout1", tok * sh.h),) if o]
    ops.append(vector("residual1", tok * sh.h, sh, (1, 0), reads=2, writes=1))
    ops.append(norm("ln2"))
    mlp_start = len(ops)
    gated = m.activation == "swiglu"
    ffn_out = sh.f * (2 if gated else 1)
    ops.append(matmul("fc1", T, sh.h, ffn_out, sh, "column", saved_input=kept * sh.h * e, dtype=dtype,
                      bias=m.bias, keeps_gathered=keeps_gathered_input(s, sh)))
    act_elems = T * sh.f / tp.size
    shape = dict(numel=int(act_elems), dtype=dtype)
    act = vector("act", act_elems, sh, (8, 12), reads=2 if gated else 1,
                 saved_bytes=act_elems * e * (2 if gated else 1),
                 measure_fwd=(("gelu_fwd", shape),) if not gated else (),
                 measure_bwd=(("gelu_bwd", shape),) if not gated else ())
    if gated:
        # SwiGLU backward reads dY (f) and both saved halves (2f) and writes both input-gradient
        # halves (2f): 5f elements, not the 4f of the generic elementwise rule (Megatron-Core
        # megatron/core/fusions/fused_bias_swiglu.py, swiglu_back: grad and the two halves of y
        # in, torch.cat of the two gradient halves out).
        act = replace(act, bytes_bwd=act.bytes_bwd + act_elems * e)
        if tr.fp8_activation_input:
            # activation_func_fp8_input_store (fused_bias_swiglu.py): the kept input is
            # input.to(torch.float8_e4m3fn), one byte an element, a cast each way (2f read at e
            # bytes and written at one; back again before swiglu_back)
            cast = 2 * act_elems * (e + 1)
            act = replace(act, saved_bytes=2 * act_elems, bytes_fwd=act.bytes_fwd + cast,
                          bytes_bwd=act.bytes_bwd + cast)
    ops.append(act)
    ops.append(matmul("fc2", T, sh.f, sh.h, sh, "row", saved_input=act_elems * e, dtype=dtype, bias=m.bias))
    if moe:
        from pipesim.costs.moe import moe_block_ops
        ops[mlp_start:] = moe_block_ops(s, sh)
    ops += [o for o in (dropout("dropout2", tok * sh.h),) if o]
    ops.append(vector("residual2", tok * sh.h, sh, (1, 0), reads=2, writes=1))
    if tr.kernel_fusion == "eager":
        from pipesim.costs.eager import eager_ops
        per_gpu = tp.size // hd if tp.mode != "1d" else 1
        ops = eager_ops(ops, gated, m.norm == "rmsnorm", kv_elems=sh.b * sh.s * kv * sh.d / per_gpu,
                        rep=max(1, round(heads / kv)),
                        attn_out_elems=0.0 if fused else T * q_dim / tp.size)
    return ops


def high_precision(precision: str) -> str:
    """Ops that stay in BF16 under FP8 training: dot-product attention and the output layer
    (Transformer Engine runs only its Linear GEMMs in FP8; Megatron-Core keeps the output layer
    and attention in BF16 by default -- NVIDIA TE docs, "Using FP8 with Transformer Engine")."""
    return "bf16" if precision == "fp8" else precision


def flash_attention(sh: Shapes, heads: float, kv: float, dtype: str, causal: bool,
                    q_len: int | None = None, kv_len: int | None = None, name: str = "attention",
                    saved: bool = True, mla: bool = False) -> Op:
    """Fused attention (Dao et al. 2022, "FlashAttention", Sec. 3.1 and Thm. 2): forward = the two
    matmuls (4 b a s^2 d FLOPs); backward recomputes the scores and runs four matmuls
    (2.5x forward); only Q, K, V, the output and the fp32 log-sum-exp are kept. Causal masking
    skips half the blocks. `q_len` x `kv_len` (default s x s) is one block of a context-parallel
    attention; a causal block with q_len < kv_len is bottom-right aligned (the queries are the
    last q_len positions), so it computes q·kv - q^2/2 scores. `saved`: whether this block keeps
    the layer's Q, K, V, O and log-sum-exp (one block per layer does). `mla`: multi-head latent
    attention (q/k and v of different widths, `sh.d` their mean), timed by its own measured
    head-dim panel (costs/flash.py head_dim_factor)."""
    b, d, e = sh.b, sh.d, sh.e
    q_len, kv_len = q_len or sh.s, kv_len or sh.s
    pairs = q_len * kv_len - (q_len * q_len / 2 if causal else 0.0)
    fwd = 4 * b * heads * pairs * d
    qkvo = b * d * (2 * heads * q_len + 2 * kv * kv_len) * e
    lse = b * heads * q_len * FP32
    keep = b * sh.s * d * (2 * heads + 2 * kv) * e + b * heads * sh.s * FP32 if saved else 0.0
    io = (b * sh.s * d * (heads + 2 * kv), b * sh.s * d * heads) if saved else ()
    shape = dict(batch=b, heads=int(heads), seq=q_len, head_dim=d, causal=causal, dtype=dtype)
    # Profiles hold square (seq x seq) attention only: a rectangular block is not looked up. The
    # published kernel tables are by sequence length; a block is read at its key length, the
    # inner loop every query tile runs (Dao 2023, "FlashAttention-2", Alg. 1).
    square = q_len == kv_len
    return Op(name, "matmul", fwd, 2.5 * fwd, qkvo, 2 * qkvo + lse,
              saved_bytes=keep, dgrad_fraction=1.0, attention_core=True,
              measure_fwd=(("attention_fwd", shape),) if square else (),
              measure_bwd=(("attention_bwd", shape),) if square else (),
              flash=(b * heads, kv_len, ("mla", d) if mla else d, causal), attention_io=io)


def windowed_attention(sh: Shapes, heads: float, kv: float, dtype: str, window: int, share: float,
                       kind: str = "sliding") -> list[Op]:
    """Fused causal attention of a model whose layers, a `share` of them, attend over a sliding
    window of `window` keys (Megatron-Core window_size; the kernels skip the blocks left of the
    band: cuDNN and FlashAttention-2's local attention) or within chunks of `window` tokens
    (`kind` chunked: Llama 4's local layers, HF Llama4 attention_chunk_size, a block-diagonal
    causal mask). One op per kind of layer, each scaled by its share of the layers, so that every
    layer costs the layer average: a sliding-window query sees min(i + 1, w) keys, s·w - w²/2
    pairs in all; a chunked one the keys of its chunk before it, w²/2 per whole chunk. Either runs
    at the rate the kernel table gives a key length of w (the inner loop each query tile runs;
    below the table's shortest length, its rate there), or, for a sliding window a GPU's window
    kernels were measured at, at that measurement by sequence length (flash.window_tflops). Q, K,
    V, O and the log-sum-exp are kept as by full attention (on the first op)."""
    full = flash_attention(sh, heads, kv, dtype, True)
    w = min(window, sh.s)
    if kind == "chunked":
        chunks, tail = divmod(sh.s, w)
        pairs = chunks * w * w / 2 + tail * tail / 2
    else:
        pairs = sh.s * w - w * w / 2
    fwd = 4 * sh.b * heads * pairs * sh.d
    band = replace(full, name="attention_window", flops_fwd=share * fwd, flops_bwd=share * 2.5 * fwd,
                   bytes_fwd=share * full.bytes_fwd, bytes_bwd=share * full.bytes_bwd, saved_bytes=0.0,
                   measure_fwd=(), measure_bwd=(), flash=(full.flash[0], w, sh.d, True), attention_io=(),
                   window_seq=sh.s if kind == "sliding" else 0.0)
    global_share = 1 - share
    ops = [replace(full, flops_fwd=global_share * full.flops_fwd, flops_bwd=global_share * full.flops_bwd,
                   bytes_fwd=global_share * full.bytes_fwd, bytes_bwd=global_share * full.bytes_bwd,
                   measure_fwd=(), measure_bwd=())] if global_share else []
    if not ops:     # every layer windowed: the band op keeps the layer's tensors
        band = replace(band, saved_bytes=full.saved_bytes, attention_io=full.attention_io)
    return ops + [band]


def embedding_ops(s: Scenario) -> list[Op]:
    """Input embedding (vocab-parallel, Shoeybi et al. 2019 Sec. 3) + learned positions + dropout.
    Backward: PyTorch's embedding_dense_backward zero-fills a dense weight gradient and adds the
    tokens' rows into it; unlike a linear's (a GEMM accumulating into the buffer), that gradient
    is then added into the gradient buffer every micro-batch (Megatron-Core's DDP parameter hook:
    `param.main_grad.add_(param.grad.data)`, distributed_data_parallel.py): read it, read and
    write the buffer's elements."""
    sh = shapes_of(s)
    m = s.model
    tp, e, T = sh.tp, sh.e, sh.tokens
    tok = T / tp.token_div
    params = sh.v * sh.h / tp.weight_div + (m.seq_length * sh.h if m.position == "learned" else 0) + m.extra_params
    comm = ()
    if tp.size > 1 and tp.mode == "1d":
        kind = "reduce_scatter" if tp.sequence_parallel else "all_reduce"
        comm = (Comm(kind, T * sh.h * e, "tp", tp.size),)
    dense_grad = params * (2 * e + 2 * grad_elem_bytes(s.training))    # zero-fill, then the add
    ops = [Op("embedding", "vector", 0.0, T * sh.h, 2 * T * sh.h * e, 2 * T * sh.h * e + dense_grad,
              params=params, comm_fwd=comm, param_tensors=2 if m.position == "learned" else 1)]
    if m.dropout:
        ops.append(vector("embed_dropout", tok * sh.h, sh, (1, 1), saved_bytes=tok * sh.h * MASK_BYTES, mask=True))
    return with_lora(s, ops)


def head_ops(s: Scenario) -> list[Op]:
    """Final norm, LM head (vocab-parallel) and cross-entropy; logits kept in fp32 for the loss
    (Korthikanti et al. 2022, Sec. 4.3: 4sbv/t bytes)."""
    sh = shapes_of(s)
    m = s.model
    tp, e, T = sh.tp, sh.e, sh.tokens
    tok = T / tp.token_div
    norm_params = sh.h * (2 if m.norm == "layernorm" else 1)
    shape = dict(rows=int(tok), cols=sh.h, dtype=s.training.precision)
    ops = [replace(vector("final_norm", tok * sh.h, sh, (8, 10), saved_bytes=tok * sh.h * e, params=norm_params,
                          measure_fwd=(("layer_norm_fwd", shape),), measure_bwd=(("layer_norm_bwd", shape),)),
                   param_tensors=2 if m.norm == "layernorm" else 1)]
    if s.training.kernel_fusion == "eager":
        from pipesim.costs.eager import eager_ops
        ops = eager_ops(ops, gated=False, rmsnorm=m.norm == "rmsnorm")
    head = matmul("lm_head", T, sh.h, sh.v, sh, "column", saved_input=column_kept_tokens(s, sh) * sh.h * e,
                  dtype="fp8" if s.training.fp8_lm_head and s.training.precision == "fp8"
                  else high_precision(s.training.precision), bias=False, keeps_gathered=keeps_gathered_input(s, sh))
    shares_embedding = m.tied_embeddings and s.parallel.pipeline == 1
    if shares_embedding:
        head = replace(head, params=0.0)
    ops.append(head)
    logits = logits_per_gpu(sh)
    loss_comm = (Comm("all_reduce", 2 * T * FP32, "tp", tp.size),) if tp.size > 1 else ()
    ce = dict(tokens=int(T), vocab=int(sh.v / tp.size))
    fwd_bytes, bwd_bytes, kept = CE_BYTES[loss_kernel(s)]
    ops.append(Op("cross_entropy", "vector", 5 * logits, 4 * logits, logits * fwd_bytes, logits * bwd_bytes,
                  saved_bytes=logits * kept, comm_fwd=loss_comm,
                  measure_fwd=(("cross_entropy_fwd", ce),), measure_bwd=(("cross_entropy_bwd", ce),)))
    passes = s.training.logit_metric_passes
    if passes:
        # Metrics over the step's logits (Composer's Trainer._eval_train_metrics after each
        # micro-batch's backward, on the same stream, hence counted with the forward): each an
        # F.cross_entropy under autocast, the forward of CE_BYTES["torch"] with no backward.
        ops.append(Op("logit_metrics", "vector", 5 * logits * passes, 0.0, logits * CE_BYTES["torch"][0] * passes, 0.0))
    return with_lora(s, ops)


def loss_kernel(s: Scenario) -> str:
    """The cross-entropy kernel a scenario runs: its implementation (cross_entropy_of), PyTorch's
    loss_parallel path for F.cross_entropy over tensor-parallel (vocab-sharded) logits."""
    impl = cross_entropy_of(s.training)
    return "torch_loss_parallel" if impl == "torch" and s.parallel.tensor > 1 else impl


def column_kept_tokens(s: Scenario, sh: Shapes) -> float:
    """Tokens of the input a column-parallel linear keeps for its weight gradient: its sequence
    shard (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication and Transformer Engine
    gather it again in the backward), or under training.tp_keeps_gathered_input the all-gathered
    input (PyTorch DTensor TP: torch/distributed/tensor/parallel/style.py ColwiseParallel
    redistributes its input to Replicate in a forward pre-hook, so the linear's autograd saves the
    gathered tensor)."""
    return sh.tokens if keeps_gathered_input(s, sh) else sh.tokens / sh.tp.token_div


def keeps_gathered_input(s: Scenario, sh: Shapes) -> bool:
    """Whether column-parallel linears keep their all-gathered input (column_kept_tokens)."""
    return s.training.tp_keeps_gathered_input and sh.tp.mode == "1d"


def logits_per_gpu(sh: Shapes) -> float:
    """Logits of one micro-batch on one GPU: tokens x vocabulary, the vocabulary split over the
    tensor group (vocab-parallel head)."""
    return sh.tokens * sh.v / sh.tp.size


def mtp_ops(s: Scenario) -> list[Op]:
    """The ops of one multi-token-prediction depth around its transformer block (which the stage
    costs as one more layer of the model's last kind): DeepSeek-V3 (arXiv 2412.19437 Sec. 2.2,
    Eq. 21-22) as Megatron-Core builds it (megatron/core/transformer/multi_token_prediction.py,
    _concat_embeddings): the input embedding of the tokens shifted by one more position, RMSNorm
    of it (enorm) and of the previous depth's hidden state (hnorm), their concatenation through the
    column-parallel projection eh_proj (2h -> h, no bias) whose output is gathered over the tensor
    group, then the block, and the output head with its loss (head_ops) once more. The embedding
    and output weights are the main model's (on the last stage a copy of the embedding when the
    pipeline has several stages, its gradient all-reduced with the first stage's)."""
    sh = shapes_of(s)
    tp, e, T = sh.tp, sh.e, sh.tokens
    tok = T / tp.token_div
    emb = [replace(o, name=f"mtp_{o.name}") for o in embedding_ops(s)]
    if s.parallel.pipeline == 1:
        emb = [replace(o, params=0.0, param_tensors=0) for o in emb]
    norm_params = sh.h * (2 if s.model.norm == "layernorm" else 1)
    norms = [vector(f"mtp_{which}", tok * sh.h, sh, (8, 10), saved_bytes=tok * sh.h * e, params=norm_params)
             for which in ("enorm", "hnorm")]
    proj = matmul("mtp_eh_proj", T, 2 * sh.h, sh.h, sh, "column", saved_input=2 * tok * sh.h * e,
                  dtype=s.training.precision, bias=False)
    if tp.size > 1 and tp.mode == "1d":
        # gather_from_tensor_model_parallel_region of the projection's hidden slices: an all-gather
        # forward; its backward keeps the local slice (the sequence scatter's backward gathers)
        gathered = (Comm("all_gather", T * sh.h * e, "tp", tp.size),)
        proj = replace(proj, comm_fwd=proj.comm_fwd + gathered,
                       comm_bwd=proj.comm_bwd + (gathered if tp.sequence_parallel else ()))
    head = [replace(o, name=f"mtp_{o.name}", params=0.0 if o.name == "lm_head" else o.params) for o in head_ops(s)]
    return emb + norms + [proj] + head
