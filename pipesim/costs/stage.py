"""StageCosts: what one model stage (a pipeline rank's chunk) costs per micro-batch on one GPU.

This is the hand-off from the cost model to the simulator, the emulator comparison and the
partitioner. Times are seconds on a nominal-speed GPU; the simulator applies per-rank speed factors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipesim.costs.collectives import collective_time
from pipesim.costs.flash import attention_kernel_of
from pipesim.costs.fp8 import fp8_gemm_params, low_precision, low_precision_params, weight_copy_bytes
from pipesim.costs.context import context_comm
from pipesim.costs.fsdp_copies import copy_out_seconds
from pipesim.costs.layers import FP32, embedding_ops, head_ops, layer_ops, mtp_ops, shapes_of
from pipesim.costs.memory import StaticMemory, elem_of, frozen_memory, grad_elem_bytes, static_memory
from pipesim.costs.moe_interference import op_seconds_beside_comm
from pipesim.costs.muon import is_expert, muon_split
from pipesim.costs.nccl_channels import dp_collective_sms
from pipesim.costs.norm_kernels import waiting_norms
from pipesim.costs.ops import Comm, Op, is_norm
from pipesim.costs.optimizer import optimizer_bytes
from pipesim.costs.recompute_modules import module_recompute
from pipesim.costs.roofline import CostModel
from pipesim.costs.step_ops import step_fixed_ops
from pipesim.costs.topology import placement
from pipesim.costs.tp_overlap import column_backward_block, forward_block, row_backward_block, uses_userbuffers
from pipesim.costs.workspace import Workspace, stage_workspace
from pipesim.costs.zero_groups import shard_size
from pipesim.scenario.config import Scenario

# Adam update traffic per parameter of the CNN path (pipesim/partition/cnn_stages.py): read fp32
# master, m, v and the gradient, write master, m, v and the half-precision weight (4*3*2 + 2 + 2).
# Transformer stages count Megatron's optimizer kernels one by one (pipesim/costs/optimizer.py).
ADAM_BYTES_PER_PARAM = 28.0
QUANT_GROUP = 128        # elements per quantization scale (pipesim.kernels.quantize default)


@dataclass(frozen=True)
class StageCosts:
    stage: int
    layers: int
    has_embedding: bool
    has_head: bool
    forward: float            # F: compute + inline TP/SP communication
    backward: float           # B = input_grad + weight_grad
    input_grad: float         # I (includes recompute and backward TP communication)
    weight_grad: float        # W
    recompute: float          # forward work re-done during the backward (inside I and B)
    tp_comm_fwd: float        # TP/SP collectives inside F (seconds, part of forward)
    tp_comm_bwd: float
    tp_bytes_fwd: float
    tp_bytes_bwd: float
    send_bytes: float         # activation bytes sent forward per micro-batch, per GPU (compressed)
    grad_send_bytes: float    # activation-gradient bytes sent backward (not compressed)
    quantize: float           # seconds on the sender when compressing (0 at 16 bits)
    dequantize: float
    params: float             # parameters held by this GPU for this stage
    static: StaticMemory      # weights, gradients, optimizer (after ZeRO sharding)
    grad_bytes: float         # gradient bytes reduced over data parallel per step
    activation_bytes: float   # saved per micro-batch after the recompute policy
    recompute_working_bytes: float   # transient during a recomputed backward (one layer's activations)
    optimizer_step: float     # seconds
    flops: float              # model FLOPs per micro-batch on this GPU (fwd + bwd, no recompute)
    sources: dict = field(default_factory=dict)   # cost source -> seconds attributed
    param_tensors: int = 0    # parameter tensors held (ZeRO-3 gathers them one collective each)
    # per-step fixed work after the last backward, in order, as (timeline name, seconds); the
    # optimizer step is `optimizer_step` above and is listed here too
    step_ops: tuple = ()
    ep_comm_fwd: float = 0.0  # MoE all-to-all (dispatch + combine) seconds inside F (pipesim/costs/moe.py)
    ep_comm_bwd: float = 0.0  # ... inside B (and I)
    ep_bytes_fwd: float = 0.0
    ep_bytes_bwd: float = 0.0
    moe_layers: int = 0
    expert_params: float = 0.0   # of `params`: routed-expert parameters (sharded by EP·ETP)
    gather_params: float | None = None   # data-parallel-equivalent parameters of ZeRO weight
                                         # all-gathers (experts gather over EDP); None = params
    fp8_params: float = 0.0   # of `params`: weights of FP8 GEMMs (precision fp8)
    trainable_params: float | None = None   # of `params`: those that learn (LoRA); None = all
    workspace: Workspace = Workspace()   # bytes its passes hold beyond the kept activations (costs/workspace.py)
    moe_block_fwd: float = 0.0   # compute seconds of the MoE blocks (router .. unpermute) inside F
    moe_block_bwd: float = 0.0   # ... inside B (the A2A overlap pairs them with attention, a2a_overlap.py)
    cp_comm_fwd: float = 0.0  # context-parallel K/V exchange not hidden by attention (inside F), seconds
    cp_comm_bwd: float = 0.0  # ... inside the backward (B and I)
    # exposed TP inside I when the weight gradient is its own pass (W): without the wgrad GEMM
    # beside it, training.tp_grad_overlap hides nothing (= tp_comm_bwd when that is off)
    tp_comm_input_grad: float = 0.0
    cp_comm_hidden: float = 0.0   # CP transfer seconds overlapped with attention (fwd + bwd)
    cp_bytes: float = 0.0     # CP bytes sent per micro-batch per GPU (fwd + bwd)
    cp_buffer_fwd: float = 0.0    # transient K/V receive buffers while F runs
    cp_buffer_bwd: float = 0.0    # K/V + dK/dV buffers while the backward runs
    recv_gather: float = 0.0      # TP all-gather of a received activation / gradient (scatter/gather)
    offload_bytes: float = 0.0    # of activation_bytes: kept in host memory between F and B (offloading)
    offload_window: float = 0.0   # of offload_bytes: one layer's, on the GPU while it is being copied
    offload_fwd: float = 0.0      # of forward: the copy out that outlasts it (host link, not GPU speed)
    offload_bwd: float = 0.0      # of backward and input_grad: the copy back that outlasts them
    moe_host_fwd: float = 0.0    # of moe_block_fwd: host time exposed after the dispatchers' count sync
    moe_block_wgrad: float = 0.0     # of moe_block_bwd: weight gradients
    # (attention, MoE block) time beside an overlapped all-to-all / alone (moe_interference.py)
    moe_overlap_slow_fwd: tuple = (1.0, 1.0)
    moe_overlap_slow_bwd: tuple = (1.0, 1.0)
    # compute time beside an overlapped data-parallel collective / alone, F and the backward
    # (nccl_channels.dp_collective_sms, moe_interference.py; sim/interference.py applies it)
    dp_overlap_slow_fwd: float = 1.0
    dp_overlap_slow_bwd: float = 1.0
    # norm kernels per micro-batch forward / backward that wait for an overlapped DP collective:
    # cooperative ones (costs/norm_kernels.py) beside more SMs than training.norm_sm_margin
    # leaves (sim/interference.py); 0: they never wait
    dp_norm_waits_fwd: int = 0
    dp_norm_waits_bwd: int = 0

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__
               if k not in ("static", "sources", "step_ops", "workspace")}
        out["step_ops"] = {name: sec for name, sec in self.step_ops}
        out["workspace_bytes"] = {"forward": self.workspace.forward(),
                                  "backward": self.workspace.backward(self.recompute_working_bytes)}
        out.update(weights_bytes=self.static.weights, grads_bytes=self.static.gradients,
                   optimizer_bytes=self.static.optimizer, sources=dict(self.sources))
        return out


def load_profile_for(s: Scenario):
    if s.costs.profile is None:
        return None
    from pipesim.costs.profile import load_profile
    from pipesim.errors import ProfileError
    profile = load_profile(s.costs.profile)
    reason = profile.mismatch(s.system.gpu.name)
    if reason:
        raise ProfileError(f"{reason}; calibrate this device (pipesim calibrate) or set costs.profile: null")
    return profile


def cost_model_for(s: Scenario, profile=None) -> CostModel:
    if profile is None:
        profile = load_profile_for(s)
    from pipesim.errors import ScenarioError
    try:
        cm = CostModel(s.system.gpu, s.training.precision, profile, grad_elem_bytes(s.training),
                       attention_kernel_of(s), s.training.fp8_recipe, s.training.gemm_sm_margin)
    except ScenarioError as err:          # the cost model cannot name the file: add it
        raise ScenarioError(f"{s.source}: {err}") from None
    margin = s.training.norm_sm_margin
    if margin is not None and cm.curve is not None and margin >= cm.curve["sms"]:
        raise ScenarioError(f"{s.source}: training.norm_sm_margin: {margin} leaves no SM of "
                            f"{s.system.gpu.name}'s {cm.curve['sms']} to the norm kernels")
    if cm.curve is not None:
        for name, ub in s.training.tp_overlap_cfg.items():
            if ub.num_sm is not None and ub.num_sm + s.training.gemm_sm_margin >= cm.curve["sms"]:
                raise ScenarioError(f"{s.source}: training.tp_overlap_cfg.{name}.num_sm: {ub.num_sm} (with "
                                    f"gemm_sm_margin {s.training.gemm_sm_margin}) leaves no SM of "
                                    f"{s.system.gpu.name}'s {cm.curve['sms']} to the GEMM")
    return cm


@dataclass
class _Acc:
    fwd: float = 0.0
    bwd: float = 0.0
    dgrad: float = 0.0
    wgrad: float = 0.0
    tp_fwd: float = 0.0
    tp_bwd: float = 0.0
    tp_bwd_alone: float = 0.0     # the backward's exposed TP with no weight-gradient GEMM beside it
    tp_bytes_fwd: float = 0.0
    tp_bytes_bwd: float = 0.0
    contention_fwd: float = 0.0   # seconds fwd would add with a data-parallel collective beside it throughout
    contention_bwd: float = 0.0
    sources: dict = field(default_factory=dict)

    def add(self, s: Scenario, cm: CostModel, ops: list[Op], times: int, memo: dict | None = None,
            held: int = 0) -> None:
        """Add `times` x the ops' costs; `held`: SMs an overlapped data-parallel collective takes
        (nccl_channels.dp_collective_sms). `memo` (id(op) -> its timed terms) lets the stages of one
        scenario time each op once; the sums below are unchanged."""
        for op in ops:
            hit = memo.get(id(op)) if memo is not None else None
            if hit is None:
                hit = op_terms(s, cm, op, held)
                if memo is not None:
                    memo[id(op)] = hit
            fs, fsrc, bs, bsrc, tpf, tpb, tpi, bytes_f, bytes_b, w_share, beside_f, beside_b = hit
            self.fwd += times * fs
            self.bwd += times * bs
            self.contention_fwd += times * (beside_f - fs)
            self.contention_bwd += times * (beside_b - bs)
            self.dgrad += times * bs * (1 - w_share)
            self.wgrad += times * bs * w_share
            for src, sec in ((fsrc, fs), (bsrc, bs)):
                self.sources[src] = self.sources.get(src, 0.0) + times * sec
            self.tp_fwd += times * tpf
            self.tp_bwd += times * tpb
            self.tp_bwd_alone += times * tpi
            self.tp_bytes_fwd += times * bytes_f
            self.tp_bytes_bwd += times * bytes_b


def op_terms(s: Scenario, cm: CostModel, op: Op, held: int = 0) -> tuple:
    """One op's (fwd seconds, source, bwd seconds, source, exposed TP fwd, bwd, bwd without its
    weight-gradient GEMM beside it (a split W), TP bytes fwd, bwd, weight-gradient share of the
    backward, fwd and bwd seconds beside a collective holding `held` SMs)."""
    f, b = cm.time(op, "fwd"), cm.time(op, "bwd")
    w_share = cm.wgrad_share(op)
    beside_f = op_seconds_beside_comm(cm, op, "fwd", held, f.seconds)[1] if held else f.seconds
    beside_b = op_seconds_beside_comm(cm, op, "bwd", held, b.seconds)[1] if held else b.seconds
    return (f.seconds, f.source, b.seconds, b.source,
            exposed_tp_forward(s, cm, op, f.seconds),
            *exposed_tp_backward(s, cm, op, b.seconds, w_share),
            sum(c.total_bytes for c in op.comm_fwd), sum(c.total_bytes for c in op.comm_bwd),
            w_share, beside_f, beside_b)


def exposed_tp_forward(s: Scenario, cm: CostModel, op: Op, seconds: float) -> float:
    """The forward's exposed TP communication: as Transformer Engine's Userbuffers runs a layer's
    linears (costs/tp_overlap.py), else `exposed_tp`."""
    comm = comm_seconds(s, op.comm_fwd, cm.profile)
    if comm > 0 and uses_userbuffers(s):
        ub = forward_block(cm, s.training, s.parallel.tensor, op, comm)
        if ub is not None:
            return ub
    return exposed_tp(s, comm, seconds, op.gemms_fwd)


def exposed_tp_backward(s: Scenario, cm: CostModel, op: Op, seconds: float, w_share: float) -> tuple[float, float]:
    """The backward's exposed TP communication. A column-parallel linear's sequence-parallel input,
    gathered again for its weight gradient (Comm.wgrad_input), is issued asynchronously before the
    input-gradient GEMM and waited for after it (Korthikanti et al. 2022, Sec. 4.2.2: "overlapped
    with the computation of the gradient of the input"; Megatron-Core
    LinearWithGradAccumulationAndAsyncCommunication.backward; Transformer Engine's bulk overlap of
    qkv_dgrad / fc1_dgrad, module/base.py initialize_ub): only what outlasts that GEMM is exposed.
    Its input-gradient reduce-scatter (or all-reduce) then runs beside the weight-gradient GEMM:
    with `training.tp_grad_overlap` (Megatron's async handle: the reduce-scatter with
    async_op=True, then the wgrad GEMM, then handle.wait(); megatron/mpu/layers.py at 739cb43 of
    2022, megatron/core/tensor_parallel/layers.py today) or the Userbuffers overlap (Transformer
    Engine's bulk overlap of qkv_wgrad / fc1_wgrad), only what outlasts that GEMM is exposed;
    otherwise all of it. A row-parallel linear's gradient all-gather precedes both its GEMMs:
    exposed, or pipelined with them by the Userbuffers overlap (`exposed_tp`), as is a frozen
    column-parallel linear's scatter (no weight gradient beside it). Returns (exposed in
    B, exposed in I): a zero-bubble schedule's I pass has no weight-gradient GEMM beside it (its W
    runs apart) and keeps the reduce-scatter whole."""
    again = [c for c in op.comm_bwd if c.wgrad_input]
    comms = [c for c in op.comm_bwd if not c.wgrad_input]
    comm = comm_seconds(s, comms, cm.profile)
    if comm > 0 and uses_userbuffers(s):
        if again:
            ub = column_backward_block(cm, s.training, op, comm_seconds(s, again, cm.profile), comm)
        else:
            row = row_backward_block(cm, s.training, s.parallel.tensor, op, comm)
            ub = None if row is None else (row, row)
        if ub is not None:
            return ub
    regather = max(0.0, comm_seconds(s, again, cm.profile) - seconds * (1 - w_share)) if again else 0.0
    grad_reduce = [c for c in comms if c.kind in ("reduce_scatter", "all_reduce")]
    # beside the weight gradient: Userbuffers' bulk overlap (a linear gathering its input again);
    # Userbuffers pipelines anything else (a row-parallel gather, a frozen linear's scatter) with
    # the input-gradient GEMM (exposed_tp)
    beside_wgrad = bool(again) if s.training.overlap_tp_comm else s.training.tp_grad_overlap
    if not beside_wgrad or not grad_reduce or comm <= 0:
        exposed = exposed_tp(s, comm, seconds, op.gemms_bwd)
        return regather + exposed, regather + exposed
    hidden = comm_seconds(s, grad_reduce, cm.profile)
    return regather + comm - hidden + max(0.0, hidden - seconds * w_share), regather + comm


def exposed_tp(s: Scenario, comm: float, gemm: float, gemms) -> float:
    """TP communication left on the critical path. Without overlap: all of it. With
    `training.overlap_tp_comm` (Megatron --tp-comm-overlap, Transformer Engine userbuffers) the
    all-gather / reduce-scatter is split into tp chunks pipelined with the GEMM that consumes or
    produces them (Wang et al. 2022, "Overlap Communication with Dependent Computation via
    Decomposition", Sec. 3): the first chunk, and whatever outlasts the GEMM, stay exposed."""
    if comm <= 0 or not s.training.overlap_tp_comm or not gemms:
        return comm
    return comm / s.parallel.tensor + max(0.0, comm - gemm)


def comm_seconds(s: Scenario, comms, profile=None) -> float:
    """Seconds of the collectives `comms`; a collective whose kind the profile's CPU host model
    measured for a group of its size (pipesim/calibrate/host.py) takes the measured time."""
    if profile is not None:
        from pipesim.calibrate.host import host_collective_seconds
    total = 0.0
    for c in comms:
        t = host_collective_seconds(profile, c.kind, c.bytes, c.size) if profile is not None else None
        if t is None:
            t = collective_time(c.kind, c.bytes, placement(s, c.group), s.parallel.collective)
        total += c.count * t
    return total


def layer_recompute(s: Scenario, cm: CostModel, ops: list[Op], cp_fwd: float = 0.0,
                    policy: str | None = None) -> tuple[float, float, float]:
    """(recompute seconds, saved bytes, working bytes) of one layer under the recompute policy
    (`policy`, default training.recompute); `cp_fwd`: the layer's exposed context-parallel
    exchange, re-run by full recompute and by a selective one of the fused core attention."""
    policy = policy or s.training.recompute
    saved_all = sum(o.saved_bytes for o in ops)
    if policy == "none":
        return 0.0, saved_all, 0.0
    if policy == "selective":
        # Korthikanti et al. 2022, Sec. 4.2: re-run the attention core, keep everything else
        # (core_attn); the other submodules of Megatron-Core's recompute_modules on top. A fused
        # kernel is the core too: Megatron-Core hands checkpoint_core_attention to Transformer
        # Engine's DotProductAttention, which runs the kernel's forward again in the backward (with
        # context parallelism its exchanges too).
        modules = s.training.recompute_modules
        core = [o for o in ops if o.attention_core] if "core_attn" in modules else []
        t = sum(cm.time(o, "fwd").seconds for o in core) + (cp_fwd if any(o.flash for o in core) else 0.0)
        dropped = sum(o.selective_dropped_bytes for o in core)
        more_t, comms, more_dropped = module_recompute(s, cm, ops, modules)
        dropped = min(saved_all, dropped + more_dropped)
        return t + more_t + comm_seconds(s, comms, cm.profile), saved_all - dropped, dropped
    sh = shapes_of(s)
    checkpoint = sh.tokens * sh.h * sh.e / sh.tp.token_div
    if policy == "selective_op":
        return selective_op_recompute(s, cm, ops, checkpoint, saved_all)
    # full: keep only the layer input (Korthikanti et al. 2022, Sec. 4.3: 2sbh per layer, /t with
    # sequence parallelism) and re-run the whole forward, including its TP communication.
    t = sum(cm.time(o, "fwd").seconds for o in ops) + comm_seconds(s, [c for o in ops for c in o.comm_fwd], cm.profile) + cp_fwd
    return t, checkpoint, saved_all


# torchtitan's per-op policy saves "every second mm" (the count runs on across a block's forward
# passes, so which half alternates; half of them on average).
OP_SAC_SAVED_MATMULS = 0.5


def selective_op_recompute(s: Scenario, cm: CostModel, ops: list[Op], checkpoint: float,
                           saved_all: float) -> tuple[float, float, float]:
    """torchtitan's selective per-op checkpointing (torchtitan parallelize_llama.py, 2024-25:
    `_save_list` = aten.mm, the SDPA flash / efficient kernels, the functional reduce-scatter and
    abs/max; `_custom_policy` returns MUST_SAVE for those ops' outputs "except every second mm", and
    PREFER_RECOMPUTE for every other op). Kept per layer: its input, the attention output (and its
    log-sum-exp), and half the matmul outputs; re-run in the backward: the other half of the
    matmuls and every memory-bound op (norms, rotary, activation, residual adds, casts) - not the
    attention kernel. Of the tensor-parallel collectives the reduce-scatters' outputs are saved; the
    all-gathers (sequence parallelism) are not in the list and run again.
    Returns (recompute seconds, kept bytes, bytes re-created in the backward)."""
    sh = shapes_of(s)
    redo = keep = 0.0
    attention = False
    for o in ops:
        if o.attention_core:        # the SDPA kernel: its outputs are saved
            attention = True
            continue
        fwd = cm.time(o, "fwd").seconds
        if o.kind == "matmul":
            redo += (1 - OP_SAC_SAVED_MATMULS) * fwd
            keep += OP_SAC_SAVED_MATMULS * sum(g[0] * g[1] * g[2] for g in o.gemms_fwd) * sh.e
        else:
            redo += fwd
    redo += comm_seconds(s, [c for o in ops for c in o.comm_fwd if c.kind == "all_gather"], cm.profile)
    # attention heads are split over the tensor group; every token of the micro-batch attends
    heads_local = sh.a / sh.tp.size
    attention_out = sh.tokens * heads_local * sh.d * sh.e if attention else 0.0
    lse = sh.b * heads_local * sh.s * FP32 if attention else 0.0
    kept = min(checkpoint + keep + attention_out + lse, saved_all)
    return redo, kept, saved_all - kept


def costed_layer_ops(s: Scenario, moe: bool = False) -> list[Op]:
    """The ops of one layer (an MoE layer with `moe`) as they run: under FP8 (FP4), plus the cast
    op of every low-precision GEMM."""
    return low_precision(s, layer_ops(s, moe))


def costed_mtp_ops(s: Scenario) -> list[Op]:
    """One multi-token-prediction depth's ops outside its block (layers.mtp_ops) as they run:
    Megatron-Core runs the projection under the FP8 context too, with its cast (in BF16 under
    training.bf16_mtp)."""
    if s.training.bf16_mtp and s.training.precision == "fp8":
        return mtp_ops(bf16_variant(s))
    return low_precision(s, mtp_ops(s))


def stage_costs(s: Scenario, profile=None) -> list[StageCosts]:
    """Costs of every model stage (pipeline * virtual_stages of them), per micro-batch."""
    if s.model.arch != "transformer":
        from pipesim.errors import ScenarioError
        raise ScenarioError(f"{s.source}: model.arch: {s.model.arch!r} stage costs come from "
                            "pipesim.model_stages.stage_costs_for, not the transformer cost model")
    cm = cost_model_for(s, profile)
    kinds = dense_kinds(s)
    # the block whose attention the CP exchange is timed against: a hybrid model's attention layer
    layer = next((ops for kind, ops in kinds if kind == "attention"), kinds[0][1])
    host_action, copy_fwd, copy_bwd = 0.0, 0.0, 0.0
    if cm.profile is not None:
        # A CPU profile's host model: the emulator's executor cost per compute action
        # (calibrate/host.py), its eager layout copies and eager ring attention (CPU emulator only)
        from pipesim.calibrate.host import action_seconds
        from pipesim.costs.eager_copies import layer_copy_seconds
        from pipesim.costs.eager_ring import layer_seconds as ring_seconds
        host_action = action_seconds(cm.profile)
        copy_fwd, copy_bwd = layer_copy_seconds(s, cm)
        ring_fwd, ring_bwd = ring_seconds(s, cm, layer)
        copy_fwd, copy_bwd = copy_fwd + ring_fwd, copy_bwd + ring_bwd
    tr = s.training
    emb, head = embedding_ops(s), low_precision(s, head_ops(s))     # an FP8 LM head (fp8_lm_head) casts too
    mtp = costed_mtp_ops(s) * s.model.mtp_layers if s.model.mtp_layers else []     # the last stage's MTP
    cpc = context_comm(s, cm, layer)
    from pipesim.costs.mamba import cp_all_to_all
    ssm_cp = {k: cp_all_to_all(s, shapes_of(s), k) for k, _ in kinds if k in ("mamba", "gdn")}
    # recompute_num_layers (Megatron's block method): only the first N layers of a chunk recompute
    rc_limit = tr.recompute_num_layers
    dense = [_DenseKind.build(s, cm, kind, ops, cpc.fwd_exposed, rc_limit is not None) for kind, ops in kinds]
    sh = shapes_of(s)
    moe = moe_stage_parts(s, cm, sh) if s.model.is_moe else None
    moe_keep = moe_stage_parts(s, cm, sh, "none") if moe is not None and rc_limit is not None else moe
    # MoE layers by precision: (count key, parts, parts without recompute); the BF16-kept ones of an
    # FP8 / FP4 run (Scenario.layer_cost_kind) cost the BF16 variant's ops
    moe_kinds = [(True, moe, moe_keep)] if moe is not None else []
    if moe is not None and ("bf16", True) in s.cost_kinds:
        s16 = bf16_variant(s)
        moe16 = moe_stage_parts(s16, cm, sh)
        moe_kinds.append((("bf16", True), moe16,
                          moe_stage_parts(s16, cm, sh, "none") if rc_limit is not None else moe16))
    n_stages = s.num_model_stages
    bits = tr.activation_compression_bits
    # Activations sent between stages: with tensor parallelism each GPU sends its 1/t slice
    # (Narayanan et al. SC'21, Sec. 4.1 scatter/gather optimisation; already sharded under SP).
    elems = sh.tokens * sh.h / sh.tp.size
    # Compressed sends carry bits/8 bytes per element plus one fp32 absmax scale per group of
    # QUANT_GROUP elements (pipesim.kernels.quantize; seed 004); 16 bits means uncompressed.
    send_bytes = elems * sh.e if bits >= 16 else elems * bits / 8 + 4 * math.ceil(elems / QUANT_GROUP)
    if bits < 16:
        q_time, q_src = cm.quantize_time(elems, bits, "quantize")
        dq_time, _ = cm.quantize_time(elems, bits, "dequantize")
    else:
        q_time = dq_time = 0.0
    # ... and the receiving TP group all-gathers the slices before using them, over its own links
    # (SC'21 Sec. 4.1: "an all-gather over NVLink"; Megatron gather_split_1d_tensor; the emulator's
    # Executor._gather_slices). Under sequence parallelism the tensor stays sharded.
    recv_gather = 0.0
    if sh.tp.size > 1 and sh.tp.mode == "1d" and not sh.tp.sequence_parallel and bits >= 16:
        recv_gather = comm_seconds(s, [Comm("all_gather", sh.tokens * sh.h * sh.e, "tp", sh.tp.size)], cm.profile)
    out = []
    first_layer = 0
    memo: dict = {}       # id(op) -> its timed terms: every stage repeats the same layer ops
    held = dp_collective_sms(s, placement(s, "dp_cp"))
    norm_waits = waiting_norms(s, held)      # the norm kernels of F / B wait for them (sim/interference.py)
    for k, stage_layers in enumerate(s.layers_per_stage()):
        first, last = k == 0, k == n_stages - 1
        counts = s.cost_kinds[first_layer:first_layer + stage_layers]
        first_layer += stage_layers
        # the MTP blocks (built like the last layer, or as mtp_hybrid_pattern); repeated depths
        # share one block's weights: `dup` of them add compute and activations, not weights
        dup = s.model.mtp_layers - s.model.mtp_weight_depths if last else 0
        if last and s.model.mtp_layers:
            counts += s.mtp_cost_kinds * s.model.mtp_layers
        dup_kinds = s.mtp_cost_kinds * dup
        n_by_moe = [counts.count(key) for key, _, _ in moe_kinds]
        n_moe = sum(n_by_moe)
        n_by_kind = [counts.count(d.kind) for d in dense]
        w_by_kind = [n - dup_kinds.count(d.kind) for d, n in zip(dense, n_by_kind)]      # with weights
        w_by_moe = [n - dup_kinds.count(key) for (key, _, _), n in zip(moe_kinds, n_by_moe)]
        n_layers = sum(n_by_kind)
        base = [k[1] if isinstance(k, tuple) else k for k in counts]     # BF16-kept layers by their kind
        # every layer's attention exchanges K/V under context parallelism
        n_cp = base.count("attention") if s.model.hybrid_layer_pattern else len(counts)
        # ... and a Mamba / Gated DeltaNet layer runs its all-to-alls (pipesim/costs/mamba.py)
        cp_f = n_cp * cpc.fwd_exposed + sum(base.count(k) * ssm_cp[k][0] for k in ssm_cp)
        cp_b = n_cp * cpc.bwd_exposed + sum(base.count(k) * ssm_cp[k][0] for k in ssm_cp)
        cp_bytes = n_cp * (cpc.bytes_fwd + cpc.bytes_bwd) + sum(base.count(k) * 2 * ssm_cp[k][1] for k in ssm_cp)
        acc = _Acc()
        for d, n in zip(dense, n_by_kind):
            acc.add(s, cm, d.ops, n, memo, held)
        acc.fwd += n_cp * copy_fwd
        acc.bwd += n_cp * copy_bwd
        acc.dgrad += n_cp * copy_bwd
        extras = (emb if first else []) + (head + mtp if last else [])
        acc.add(s, cm, extras, 1, memo, held)
        norms = (sum(n * sum(map(is_norm, d.ops)) for d, n in zip(dense, n_by_kind))
                 + n_moe * sum(map(is_norm, moe.ops if moe else ())) + sum(map(is_norm, extras))
                 if any(norm_waits) else 0)
        if cm.profile is not None:                                          # CPU host model only
            from pipesim.calibrate.host import stage_extra_seconds
            host_fwd, host_bwd = stage_extra_seconds(cm.profile, first, last)
            acc.fwd += host_fwd
            acc.bwd += host_bwd
            acc.dgrad += host_bwd
        params = sum(n * d.params for d, n in zip(dense, w_by_kind)) + sum(o.params for o in extras) \
            - dup * sum(o.params for o in mtp[:len(mtp) // max(1, s.model.mtp_layers)])
        # CP ranks hold the same weights: gradients reduce, and ZeRO shards, over data x context
        dp_cp = s.parallel.data * s.parallel.context
        fp8_params = sum(n * low_precision_params(d.ops) for d, n in zip(dense, w_by_kind)) + \
            (low_precision_params(head) if last else 0.0)
        # of them, FP8 GEMMs inside an NVFP4 run (training.mxfp8_gemms): MXFP8 copies and casts
        mx_params = sum(n * fp8_gemm_params(d.ops) for d, n in zip(dense, w_by_kind)) if tr.mxfp8_gemms else 0.0
        # the chunk's first n_rc dense layers (kind by kind), then its MoE layers, recompute
        left = n_layers if rc_limit is None else rc_limit
        activation = sum(o.saved_bytes for o in extras)
        recompute, working = 0.0, 0.0
        for d, n in zip(dense, n_by_kind):
            n_rc = min(left, n)
            left -= n_rc
            activation += n_rc * d.rc_saved + (n - n_rc) * d.keep_saved
            recompute += n_rc * d.rc_time
            working = max(working, d.rc_working if n_rc else 0.0)
        n_rc_moe = n_moe if rc_limit is None else min(max(rc_limit - n_layers, 0), n_moe)
        flops = sum(n * d.flops for d, n in zip(dense, n_by_kind)) + sum(o.flops_fwd + o.flops_bwd for o in extras)
        ep = _MoEStage()
        frozen_moe = 0.0         # LoRA: the MoE layers' frozen weights outside the routed experts
        experts_learn = 0.0      # the routed experts' weights that learn (a LoRA run's: their adapters)
        left_rc = n_rc_moe
        for (_, part, keep), n, w in zip(moe_kinds, n_by_moe, w_by_moe):
            if not n:
                continue
            rc = min(left_rc, n)         # recompute_num_layers: the chunk's first MoE layers
            left_rc -= rc
            acc.add(s, cm, part.ops, n, memo, held)
            params += w * sum(o.params for o in part.ops)
            frozen_moe += w * sum(o.params for o in part.ops if o.frozen and not is_expert(o))
            experts_learn += w * sum(o.params for o in part.ops if is_expert(o) and not o.frozen)
            fp8_params += w * low_precision_params(part.ops)
            mx_params += w * fp8_gemm_params(part.ops) if tr.mxfp8_gemms else 0.0
            activation += rc * part.saved + (n - rc) * keep.saved
            recompute += rc * part.recompute
            flops += n * sum(o.flops_fwd + o.flops_bwd for o in part.ops)
            ep = _MoEStage(ep.fwd + n * part.a2a.fwd, ep.bwd + n * part.a2a.bwd,
                           ep.bytes_fwd + n * part.a2a.bytes_fwd, ep.bytes_bwd + n * part.a2a.bytes_bwd,
                           ep.params + w * part.expert_params, ep.block_fwd + n * part.block_fwd,
                           ep.block_bwd + n * part.block_bwd, ep.host_fwd + n * part.host_fwd,
                           ep.block_wgrad + n * part.block_wgrad)
            working = max(working, part.working if rc else 0.0)
        # routed-expert weights, gradients and optimizer states are sharded over expert-data
        # parallelism, the dense ones over data parallelism (pipesim/costs/moe_parallel.py)
        dense_params = params - ep.params
        # LoRA (costs/lora.py): frozen weights are held (and ZeRO-3-sharded) but have no gradient or
        # optimizer state; `learn` of the dense parameters do
        frozen = sum(n * d.frozen for d, n in zip(dense, w_by_kind)) + sum(o.params for o in extras if o.frozen) \
            + frozen_moe
        learn = dense_params - frozen
        resident = not tr.reshard_after_forward
        edp = 1
        if ep.params:
            from pipesim.costs.moe_parallel import expert_data_size
            edp = expert_data_size(s)

        # ZeRO shards over one replica of the group (training.zero_replicas, costs/zero_groups.py)
        dp_shard, edp_shard = shard_size(dp_cp, tr.zero_replicas), shard_size(edp, tr.zero_replicas)

        def shard(group: int) -> int:       # ZeRO-1 and up shard the optimizer over the group
            return group if tr.zero_stage >= 1 else 1
        muon_parts = muon_split(s, cm, [(d.ops, n) for d, n in zip(dense, n_by_kind)], extras, moe, n_moe,
                                shard(dp_shard), shard(edp_shard))
        adam_dense, adam_expert = muon_parts.adam_params(learn, experts_learn)
        fsdp2 = tr.fsdp2
        static = static_memory(learn, tr.precision, tr.optimizer, tr.zero_stage, dp_shard, resident,
                               adam_dense, s.moment_bytes, fsdp2, s.master_bytes)
        if frozen:
            static = static.plus(frozen_memory(frozen, elem_of(tr), tr.zero_stage, dp_shard, resident))
        local_params = learn / shard(dp_shard)
        adam_local = adam_dense / shard(dp_shard) + adam_expert / shard(edp_shard)
        if experts_learn:
            static = static.plus(static_memory(experts_learn, tr.precision, tr.optimizer, tr.zero_stage, edp_shard,
                                               resident, adam_expert, s.moment_bytes, fsdp2, s.master_bytes))
            local_params += experts_learn / shard(edp_shard)
        if ep.params - experts_learn > 0.5:
            static = static.plus(frozen_memory(ep.params - experts_learn, elem_of(tr), tr.zero_stage, edp_shard,
                                               resident))
        if tr.grad_reduce_in_fp32 and elem_of(tr) < 4 and not fsdp2:
            static = StaticMemory(static.weights, static.gradients * 4 / elem_of(tr), static.optimizer)
        if s.fsdp2_deferred_grad_sync:
            # unsharded gradients accumulated over the micro-batches, in the reduce dtype, in place
            # of the fp32 shards (created only by the last reduce-scatter, after the accumulators)
            acc_elem = 4 if tr.grad_reduce_in_fp32 else elem_of(tr)
            static = StaticMemory(static.weights, (learn + experts_learn) * acc_elem, static.optimizer)
        if fp8_params:
            # FP8 weight copies (row- and column-wise; row-wise only for per-tensor FP8 on Blackwell);
            # under ZeRO-3 / FSDP they are sharded like the weights (gathered per layer in FP8, as
            # the ZeRO-3 gathers are costed: 1 byte per parameter)
            copy = weight_copy_bytes(tr.fp8_recipe, s.system.gpu.kernel_curve)
            shards = dp_shard if tr.zero_stage >= 3 and not resident else 1
            # FP8 parameter storage drops their 16-bit copy (the fp32 master is optimizer state)
            dropped = fp8_params * elem_of(tr) if tr.fp8_param_gather else 0.0
            copies = (fp8_params - mx_params) * copy + mx_params * weight_copy_bytes("mxfp8", s.system.gpu.kernel_curve)
            static = StaticMemory(static.weights + (copies - dropped) / shards, static.gradients,
                                  static.optimizer)
        elem = grad_elem_bytes(tr)                                # gradient bytes per parameter
        trainable = learn + experts_learn
        opt_step = cm.memory_time(optimizer_bytes(tr.optimizer, tr.precision, elem, local_params, trainable,
                                                  adam_local, s.moment_bytes, s.master_bytes))
        steps = step_fixed_ops(s, cm, k, params, local_params, fp8_params, elem, opt_step, muon_parts, mx_params)
        grad_bytes = (learn + experts_learn * (moe.grad_ratio if moe else 1.0)) * elem
        # FSDP2 copies each all-gathered layer into its parameters on the compute stream
        gather_f, gather_b = copy_out_seconds(s, cm, params, fp8_params, elem_of(tr))
        if gather_f:
            acc.sources["memory-roofline"] = acc.sources.get("memory-roofline", 0.0) + gather_f + gather_b
        forward = acc.fwd + acc.tp_fwd + ep.fwd + ep.host_fwd + host_action + cp_f + gather_f
        backward = acc.bwd + acc.tp_bwd + recompute + ep.bwd + host_action + cp_b + gather_b
        offload, window, off_f, off_b = activation_offload(s, activation - sum(o.saved_bytes for o in extras),
                                                           n_layers + n_moe, forward, backward)
        out.append(StageCosts(
            stage=k, layers=n_layers + n_moe, has_embedding=first, has_head=last,
            forward=forward + off_f,
            backward=backward + off_b,
            input_grad=acc.dgrad + acc.tp_bwd_alone + recompute + ep.bwd + host_action + cp_b + gather_b
            + off_b,
            weight_grad=acc.wgrad + host_action,
            recompute=recompute,
            tp_comm_fwd=acc.tp_fwd, tp_comm_bwd=acc.tp_bwd, tp_comm_input_grad=acc.tp_bwd_alone,
            tp_bytes_fwd=acc.tp_bytes_fwd, tp_bytes_bwd=acc.tp_bytes_bwd,
            send_bytes=0.0 if last else send_bytes,
            grad_send_bytes=0.0 if first else elems * sh.e,
            quantize=0.0 if last else q_time, dequantize=0.0 if first else dq_time,
            params=params, static=static, grad_bytes=grad_bytes,
            activation_bytes=activation,
            recompute_working_bytes=working if n_layers + n_moe else 0.0,
            workspace=stage_workspace(s, emb if first else [], head if last else [], dp_shard),
            optimizer_step=opt_step, flops=flops,
            sources=acc.sources,
            param_tensors=sum(n * sum(o.param_tensors for o in d.ops) for d, n in zip(dense, n_by_kind))
            + n_moe * sum(o.param_tensors for o in (moe.ops if moe else ())) + sum(o.param_tensors for o in extras),
            step_ops=steps,
            cp_comm_fwd=cp_f, cp_comm_bwd=cp_b,
            cp_comm_hidden=n_cp * (cpc.fwd_hidden + cpc.bwd_hidden),
            cp_bytes=cp_bytes,
            cp_buffer_fwd=cpc.buffer_fwd if n_cp else 0.0, cp_buffer_bwd=cpc.buffer_bwd if n_cp else 0.0,
            recv_gather=recv_gather, offload_bytes=offload, offload_window=window, offload_fwd=off_f,
            offload_bwd=off_b,
            ep_comm_fwd=ep.fwd, ep_comm_bwd=ep.bwd, ep_bytes_fwd=ep.bytes_fwd, ep_bytes_bwd=ep.bytes_bwd,
            moe_layers=n_moe, expert_params=ep.params, moe_block_fwd=ep.block_fwd, moe_block_bwd=ep.block_bwd,
            moe_host_fwd=ep.host_fwd, moe_block_wgrad=ep.block_wgrad, moe_overlap_slow_fwd=moe.slow_fwd if n_moe else (1.0, 1.0),
            moe_overlap_slow_bwd=moe.slow_bwd if n_moe else (1.0, 1.0),
            dp_overlap_slow_fwd=1.0 + acc.contention_fwd / acc.fwd if acc.fwd > 0 else 1.0,
            dp_overlap_slow_bwd=1.0 + acc.contention_bwd / acc.bwd if acc.bwd > 0 else 1.0,
            dp_norm_waits_fwd=norm_waits[0] * norms, dp_norm_waits_bwd=norm_waits[1] * norms,
            gather_params=dense_params + ep.params * moe.gather_ratio if ep.params else None,
            fp8_params=fp8_params, trainable_params=trainable if tr.lora_rank else None))
    return out


def activation_offload(s: Scenario, layers_saved: float, layers: int, forward: float,
                       backward: float) -> tuple[float, float, float, float]:
    """(bytes kept in host memory per micro-batch, of them one layer's, exposed seconds in F, in B)
    of a stage under training.offload_activation_layers: that many of its layers' saved
    activations are copied to the host while the forward goes on and copied back while the
    backward goes on (Transformer Engine's CPU offload: a layer's tensors leave during the next
    layers' compute and return ahead of its backward, one layer at a time), each way at the
    system's measured host-copy rate; only what outlasts the pass is exposed."""
    n = min(s.training.offload_activation_layers, layers)
    if n <= 0 or layers_saved <= 0:
        return 0.0, 0.0, 0.0, 0.0
    offload = layers_saved * n / layers
    copy = offload / (s.system.host_link_GBps * 1e9)
    return offload, offload / n, max(0.0, copy - forward), max(0.0, copy - backward)


def dense_kinds(s: Scenario) -> list[tuple]:
    """[(kind, costed ops)] of the model's non-MoE layers: one transformer block (kind False), or
    each sublayer kind of a hybrid model that it has ("mamba", "attention", "mlp"); and ("bf16",
    kind) for those of them an FP8 / FP4 run keeps in BF16 (Scenario.layer_cost_kind)."""
    if not s.model.hybrid_layer_pattern:
        out = [(False, costed_layer_ops(s))]
    else:
        from pipesim.costs.summary import layer_counts
        out = [(kind, costed_layer_ops(s, kind)) for kind, _ in layer_counts(s) if kind is not True]
        out = out or [("attention", costed_layer_ops(s, "attention"))]     # an all-MoE pattern
    kept = dict.fromkeys(k for k in s.cost_kinds if isinstance(k, tuple) and k[1] is not True)   # BF16 MoE: moe_kinds
    if kept:
        s16 = bf16_variant(s)
        out += [(k, costed_layer_ops(s16, k[1])) for k in kept]
    return out


def bf16_variant(s: Scenario) -> Scenario:
    """The scenario with its GEMMs in BF16: the ops of the layers an FP8 recipe keeps in BF16."""
    from dataclasses import replace
    return replace(s, training=replace(s.training, precision="bf16", fp8_param_gather=False, bf16_layers_start=0,
                                       bf16_layers_end=0, bf16_gemms=()))


@dataclass(frozen=True)
class _DenseKind:
    """One non-MoE layer kind's per-layer terms under the recompute policy."""
    kind: object
    ops: list
    rc_time: float
    rc_saved: float
    rc_working: float
    keep_saved: float         # saved bytes without recompute (recompute_num_layers)
    params: float
    flops: float
    frozen: float             # of params: frozen ones (LoRA)

    @classmethod
    def build(cls, s: Scenario, cm: CostModel, kind, ops: list, cp_fwd: float, limited: bool) -> "_DenseKind":
        rc_time, rc_saved, rc_working = layer_recompute(s, cm, ops, cp_fwd)
        keep = layer_recompute(s, cm, ops, policy="none")[1] if limited else rc_saved
        return cls(kind, ops, rc_time, rc_saved, rc_working, keep, sum(o.params for o in ops),
                   sum(o.flops_fwd + o.flops_bwd for o in ops), sum(o.params for o in ops if o.frozen))


@dataclass(frozen=True)
class _MoEStage:
    fwd: float = 0.0
    bwd: float = 0.0
    bytes_fwd: float = 0.0
    bytes_bwd: float = 0.0
    params: float = 0.0
    block_fwd: float = 0.0
    block_bwd: float = 0.0
    host_fwd: float = 0.0
    block_wgrad: float = 0.0


def moe_stage_parts(s: Scenario, cm: CostModel, sh, policy: str | None = None):
    """One MoE layer's ops, all-to-all, recompute and expert parameters (pipesim/costs/moe.py),
    under the recompute `policy` (default training.recompute)."""
    from pipesim.costs.moe import MoELayerCosts
    return MoELayerCosts.build(s, cm, sh, lambda *a: layer_recompute(*a, policy=policy))
