"""LoRA fine-tuning (training.lora_rank): the base model's weights frozen, a trainable low-rank
adapter beside each targeted linear (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
Models", Sec. 4.1: h = W0 x + (alpha / r) B A x with A (r x k), B (d x r); only A and B learn).

A frozen linear runs as Transformer Engine runs a Linear whose weight does not require a gradient
(transformer_engine/pytorch/module/linear.py: `backward_needs_input = is_grad_enabled and
weight.requires_grad`, `requires_wgrad = weight_requires_grad`):
  - its backward is the input gradient alone, dX = dY W: the forward's GEMM transposed, which
    reads dY and W and writes dX (the forward's traffic); no weight-gradient GEMM;
  - it keeps no input for the backward (only a weight gradient would read it);
  - its weight has no gradient, optimizer state or data-parallel reduction (costs/stage.py).
The embedding's backward does not run (its output needs no gradient). Norm weights are frozen
too; their backward kernels are costed as before (dgamma is h elements against the kernel's
tokens x h). On a mixture-of-experts model the router and the experts are frozen (grouped
expert GEMMs lose their weight gradients, the all-to-alls stay); fc1 / fc2 put an adapter beside
the shared experts' linears and one beside each routed-expert grouped GEMM, shared by the rank's
local experts (expert_adapter). A hybrid model's Mamba-2 / Gated DeltaNet mixer takes them beside
in_proj (column-parallel) and out_proj (row-parallel).
Not modelled: the first layer's input gradient up to its first adapter is not needed either
(a part of one layer's backward).

The adapter of a target (Megatron-Bridge's ParallelLinearAdapter,
src/megatron/bridge/peft/utils.py, wrapped by LoRALinear in peft/lora_layers.py: output = base(x)
+ adapter(x), the adapter's output scaled by alpha / r) runs in the 16-bit compute dtype:
  - beside a column-parallel base (qkv, fc1): linear_in a ColumnParallelLinear k -> r with
    gather_output (its r/t slice, then an all-gather of T x r), linear_out a ColumnParallelLinear
    r -> n/t; in the backward linear_in's input gradient is all-reduced over the tensor group
    (not under sequence parallelism: disable_grad_reduce);
  - beside a row-parallel base (proj, fc2): linear_in a RowParallelLinear k/t -> r (all-reduce of
    T x r), linear_out a ColumnParallelLinear r -> n with gather_output (an all-gather of T x n;
    under sequence parallelism scattered back, so its backward all-gathers the gradient); the
    backward all-reduces linear_out's input gradient (T x r);
  - beside a duplicated base (multi-head latent attention's q_down and kv_down: the whole weight on
    every rank, on its own tokens; base_linear_is_parallel False): both A's and B's outputs
    gathered (gather_output), on the rank's tokens.
  It keeps its input (shared with the fused attention's output for proj; under sequence
  parallelism the gathered norm output beside a column-parallel base, as Bridge has Transformer
  Engine return it, return_layernorm_output_gathered) and A's output; the scaling and the sum
  with the base output are two elementwise passes each way.
"""
from __future__ import annotations

from dataclasses import replace

from pipesim.costs.ops import Comm, Op, is_wgrad

# linears a LoRA adapter can sit beside -> their tensor-parallel role (costs/layers.py block_ops;
# multi-head latent attention's, costs/mla.py: the down-projections are duplicated over the
# tensor group, each rank on its own tokens)
LORA_TARGETS = {"qkv": "column", "proj": "row", "fc1": "column", "fc2": "row", "q_proj": "column",
                "q_down": "duplicated", "q_up": "column", "kv_down": "duplicated", "kv_up": "column",
                "in_proj": "column", "out_proj": "row",      # a Mamba-2 / Gated DeltaNet mixer's
                "shared_fc1": "column", "shared_fc2": "row"}  # an MoE layer's shared experts
# an MoE layer's linears -> the target that names them (Bridge matches linear_fc1 / linear_fc2 in the
# routed and the shared experts alike)
MOE_TARGET = {"shared_fc1": "fc1", "shared_fc2": "fc2", "expert_fc1": "fc1", "expert_fc2": "fc2"}


def model_linears(m) -> tuple[str, ...]:
    """The linears of model `m`'s layers an adapter can sit beside (lora_targets)."""
    if m.is_mla:
        attention = ("q_down", "q_up", "kv_down", "kv_up", "proj") if m.q_lora_rank else ("q_proj", "kv_down", "kv_up",
                                                                                          "proj")
    else:
        attention = ("qkv", "proj")
    if not m.hybrid_layer_pattern:
        return attention + ("fc1", "fc2")
    kinds = set(m.hybrid_layer_pattern)
    return ((attention if "*" in kinds else ()) + (("fc1", "fc2") if kinds & set("-E") else ())
            + (("in_proj", "out_proj") if kinds & set("MG") else ()))


def with_lora(s, ops: list[Op]) -> list[Op]:
    """`ops` with every weight frozen and an adapter after each targeted linear (unchanged
    without training.lora_rank)."""
    tr = s.training
    if not tr.lora_rank:
        return ops
    from pipesim.costs.layers import shapes_of       # layers builds its ops through this module
    sh = shapes_of(s)
    shares_o = any(o.flash for o in ops)        # a fused attention keeps O, proj's input
    # MLA's two down-projections read the same normed input: one tensor, kept once
    shared = {"proj": shares_o, "kv_down": "q_down" in tr.lora_targets and any(o.name == "q_down" for o in ops)}
    # Transformer Engine gathers a column-parallel base's input in 16 bits when it must return the
    # gathered norm output to the adapter (layernorm_linear.py: "Perform all-gather in high
    # precision if gathered norm output will be returned"), not in FP8 (fp8.fp8_gathers)
    wide_gather = sh.tp.sequence_parallel and not tr.lora_sp_regather
    out = []
    for op in ops:
        targeted = MOE_TARGET.get(op.name, op.name) in tr.lora_targets
        base = frozen(op) if op.params else op
        if targeted and wide_gather and LORA_TARGETS.get(op.name) == "column" and base.gemms_fwd \
                and base.gemms_fwd[0][4] == "fp8":
            base = replace(base, comm_fwd=tuple(replace(c, bytes=c.bytes * sh.e) if c.kind == "all_gather" else c
                                                for c in base.comm_fwd))
        out.append(base)
        if not targeted:
            continue
        if op.name.startswith("expert_"):
            out.append(expert_adapter(op, sh, tr))
        else:
            out.append(adapter(op, sh, tr, LORA_TARGETS[op.name], shares_input=shared.get(op.name, False)))
    return out


def frozen(op: Op) -> Op:
    """`op` with its weights frozen (module docstring). A linear (a grouped expert GEMM too) is
    recognised by its weight-gradient GEMMs (layers.matmul, moe.grouped_gemm), and its profile
    lookups by their order: each input gradient's followed by its weight gradient's."""
    if any(map(is_wgrad, op.gemms_bwd)):
        wgrad_flops = op.flops_bwd * (1 - op.dgrad_fraction)
        lookups = [m for m in op.measure_bwd if m[0] == "gemm"]
        return replace(op, flops_bwd=op.flops_bwd - wgrad_flops, bytes_bwd=op.bytes_fwd, saved_bytes=0.0,
                       dgrad_fraction=1.0, frozen=True, comm_bwd=tuple(c for c in op.comm_bwd if not c.wgrad_input),
                       gemms_bwd=tuple(g for g in op.gemms_bwd if not is_wgrad(g)),
                       measure_bwd=tuple(lookups[0::2]))
    if op.name == "embedding":
        return replace(op, flops_bwd=0.0, bytes_bwd=0.0, comm_bwd=(), frozen=True)
    return replace(op, frozen=True)


def adapter(base: Op, sh, tr, role: str, shares_input: bool) -> Op:
    """The LoRA adapter of linear `base` (module docstring), per GPU and micro-batch."""
    r = tr.lora_rank
    t, e, T = sh.tp.size, sh.e, sh.tokens
    # the base's forward GEMM (1, tokens, n, k) on this GPU (layers.matmul, 1-D tensor parallelism):
    # its output columns are split beside a column-parallel base, its input beside a row one
    _, _, n_base, k_loc, *_ = base.gemms_fwd[0]
    n = n_base * t if role == "column" else n_base
    k = k_loc * t if role == "row" else k_loc
    if role == "duplicated":            # on the rank's own tokens (a slice of them under SP)
        T = T / sh.tp.token_div
    r_in = r if role == "row" else r / t                     # A's output columns per GPU
    x, mid = T * k_loc * e, T * r * e
    # the adapter's output as the scaling and the sum with the base pass over it: gathered beside
    # a row-parallel base (scattered again under sequence parallelism) or a duplicated one
    out = T * n * e / (t if role == "column" or (role == "row" and sh.tp.sequence_parallel) else 1)
    comm_f, comm_b = _adapter_comms(sh, role, mid, T * k * e, T * n * e, tr.lora_a2a)
    kept = x
    if role == "column" and tr.lora_sp_regather and sh.tp.sequence_parallel:
        # Bridge's sequence_parallel_input_regather: A keeps its sequence shard and all-gathers it
        # again before its weight gradient (issued ahead of its input gradient, which is too small
        # to hide it: counted whole)
        kept = x / t
        comm_b = comm_b + (Comm("all_gather", x, "tp", t),)
    # B is column-parallel either way: n / t output columns a GPU
    return _adapter_op(f"lora_{base.name}", base, tr, e, T, k_loc, r_in, n / t, out,
                       0.0 if shares_input else kept, kept, (comm_f, comm_b), lookups=True)


def expert_adapter(base: Op, sh, tr) -> Op:
    """The adapter beside a routed-expert grouped GEMM (moe.grouped_gemm), one shared by the rank's
    local experts (Megatron-Bridge's default, share_expert_adapters: one A and one B over all the
    rows the rank's experts received). It is an expert weight (`expert_` named): sharded by expert
    parallelism, its gradient reduced over expert-data parallelism; no tensor-group collective
    (expert tensor parallelism 1)."""
    groups = base.matrices[0][0]
    _, m_e, n, k, *_ = base.gemms_fwd[0]
    rows = groups * m_e
    x = rows * k * sh.e
    return _adapter_op(f"expert_lora_{base.name[len('expert_'):]}", base, tr, sh.e, rows, k, tr.lora_rank, n,
                       rows * n * sh.e, x, x, ((), ()), lookups=False)


def _adapter_op(name: str, base: Op, tr, e: int, T: float, k_loc: float, r_in: float, n_loc: float, out: float,
                kept_input: float, input_copy: float, comms: tuple, lookups: bool) -> Op:
    """An adapter's op: A [T x k_loc] -> r_in columns, B [T x r] -> n_loc, in the 16-bit compute
    dtype. `out`: the bytes of the output the scaling and the sum with the base pass over;
    `kept_input`: the input bytes it keeps for A's weight gradient (0 when another op keeps the
    tensor), `input_copy`: what a dropout copy of it takes; `lookups`: profile lookups of the GEMMs."""
    r = tr.lora_rank
    dtype = "bf16" if base.gemms_fwd[0][4] in ("fp8", "fp4") else base.gemms_fwd[0][4]
    params = k_loc * r_in + r * n_loc
    flops = 2 * T * params
    x, mid = T * k_loc * e, T * r * e
    # A reads X and writes its r columns, B reads them and writes its n/t; the scaling (a read and a
    # write) and the sum (two reads, a write). Backward: the scaling's gradient; B's input and
    # weight gradients (dY in, its input read again, dmid out); A's (dmid in, X read again, dX
    # out); the weight gradients written; the adapter's dX added into the base's.
    fwd_bytes = x + T * r_in * e + mid + T * n_loc * e + params * e + 5 * out
    bwd_bytes = 2 * out + (T * n_loc * e + 2 * mid) + (mid + 2 * x) + 2 * params * e + 3 * x
    saved = kept_input + mid
    if tr.lora_dropout:
        # dropout (position pre) writes a masked copy of X, kept with its 1-byte mask for A's weight
        # gradient; its backward masks A's input gradient (a read of each and a write)
        fwd_bytes += 2 * x + x / e
        bwd_bytes += 2 * x + x / e
        saved = input_copy * (1 + 1 / e) + mid
    measure_fwd, measure_bwd = (), ()
    if lookups:
        # profile lookups (a calibrated profile times the small GEMMs with their framework
        # overhead): each GEMM (m, k, n) forward, then its input gradient (m, n, k) and weight
        # gradient (k, m, n)
        fwd_shapes = ((T, k_loc, r_in), (T, r, n_loc))
        gemm = lambda m_, k_, n_: ("gemm", dict(m=int(m_), k=int(k_), n=int(n_), dtype=dtype))
        measure_fwd = tuple(gemm(*g) for g in fwd_shapes)
        measure_bwd = tuple(g for m_, k_, n_ in reversed(fwd_shapes) for g in (gemm(m_, n_, k_), gemm(k_, m_, n_)))
    comm_f, comm_b = comms
    return Op(name, "matmul", flops, 2 * flops, fwd_bytes, bwd_bytes, saved_bytes=saved,
              params=params, comm_fwd=comm_f, comm_bwd=comm_b, dgrad_fraction=0.5, param_tensors=2,
              measure_fwd=measure_fwd, measure_bwd=measure_bwd,
              gemms_fwd=((1, T, r_in, k_loc, dtype), (1, T, n_loc, r, dtype)),
              gemms_bwd=((1, T, r, n_loc, dtype), (1, r, n_loc, T, dtype, "wgrad"),
                         (1, T, k_loc, r_in, dtype), (1, k_loc, r_in, T, dtype, "wgrad")))


def _adapter_comms(sh, role: str, mid: float, x: float, y: float, a2a: bool) -> tuple[tuple, tuple]:
    """(forward, backward) tensor-group collectives of an adapter (module docstring); `a2a`: the
    row-parallel adapter's output reaches the sequence split by one all-to-all of its n/t columns
    (Megatron-Bridge's all2all_hp2sp) instead of the gather."""
    t = sh.tp.size
    if t == 1:
        return (), ()
    sp = sh.tp.sequence_parallel
    if role == "duplicated":    # A's r/t gathered, B's n/t gathered to the whole width (gather_output)
        return ((Comm("all_gather", mid, "tp", t), Comm("all_gather", y, "tp", t)),
                (Comm("all_reduce", mid, "tp", t),) + (() if sp else (Comm("all_reduce", x, "tp", t),)))
    if role == "column":
        return (Comm("all_gather", mid, "tp", t),), (() if sp else (Comm("all_reduce", x, "tp", t),))
    if sp and a2a:
        swap = Comm("all_to_all", y / t, "tp", t)
        return (Comm("all_reduce", mid, "tp", t), swap), (Comm("all_reduce", mid, "tp", t), swap)
    fwd = (Comm("all_reduce", mid, "tp", t), Comm("all_gather", y, "tp", t))
    return fwd, (Comm("all_reduce", mid, "tp", t),) + ((Comm("all_gather", y, "tp", t),) if sp else ())


def lora_clause(s) -> str:
    """", LoRA rank r on qkv, proj (x % of the weights learn)" for a summary line, empty without
    LoRA."""
    tr = s.training
    if not tr.lora_rank:
        return ""
    from pipesim.costs.summary import total_params
    share = total_params(s, learning=True) / total_params(s)
    return f", LoRA rank {tr.lora_rank} on {', '.join(tr.lora_targets)} ({100 * share:.2g} % of the weights learn)"
