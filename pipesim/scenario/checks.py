"""The cross-key checks of a loaded scenario: each names the key at fault and what was expected
(pipesim/scenario/load.py builds the scenario, then calls check_scenario)."""
from __future__ import annotations

from pathlib import Path

from pipesim.errors import ScenarioError
from pipesim.scenario.config import ParallelConfig, Scenario
from pipesim.scenario.schema import Loader
from pipesim.scenario.stage_split import embedding_loss_split

# Pipeline actions simulated per step (model stages x micro-batches): 16x the largest published
# schedule we model (8 stages x 1,536 micro-batches = 12,288), low enough to finish in seconds.
MAX_ACTIONS = 200_000
# attention_kernel values that are Transformer Engine's cuDNN path (the only FP8 attention kernel)
TE_CUDNN_KERNELS = ("auto", "cudnn", "cudnn-2024", "cudnn-9.13", "cudnn-9.17", "cudnn-9.19")


def check_scenario(s: Scenario, loader: Loader) -> None:
    """Cross-field checks; each message shows the arithmetic."""
    m, par, tr = s.model, s.parallel, s.training
    t, p, d, v = par.tensor, par.pipeline, par.data, par.virtual_stages
    if tr.optimizer == "muon" and m.arch == "cnn":
        loader.fail("training.optimizer", "muon is modelled for transformer weights; a CNN's convolutions are "
                    "not 2-D matrices (use adam or sgd)")
    if m.arch == "cnn":
        if tr.document_length is not None:
            loader.fail("training.document_length", "packed documents mask a transformer's attention; a CNN has none")
        if tr.lora_rank:
            loader.fail("training.lora_rank", "LoRA adapters sit beside a transformer's linears; a CNN has none")
        _check_cnn(s, loader)
        return
    _check_kernel_fusion(s, loader)
    if m.hidden_size % m.num_attention_heads and m.kv_channels is None and m.attention_variant == "gqa":
        loader.fail("model", f"hidden_size({m.hidden_size}) is not divisible by num_attention_heads"
                    f"({m.num_attention_heads}); give model.kv_channels for a separate head dimension")
    if m.num_attention_heads % m.kv_heads:
        loader.fail("model", f"num_attention_heads({m.num_attention_heads}) is not divisible by "
                    f"num_kv_heads({m.kv_heads})")
    _check_window(s, loader)
    _check_hybrid(s, loader)
    _check_router_groups(s, loader)
    _check_dispatcher_sms(s, loader)
    tp_split = {"1d": t, "2d": _root(t, 2), "2.5d": _root(t // par.tensor_depth, 2), "3d": _root(t, 3)}
    _check_tensor_shape(par, loader)
    q = tp_split[par.tensor_mode]
    if m.num_attention_heads % q:
        loader.fail("parallel.tensor", f"num_attention_heads({m.num_attention_heads}) is not divisible "
                    f"by the tensor split ({q})")
    if m.kv_heads % q and q % m.kv_heads:
        loader.fail("parallel.tensor", f"num_kv_heads({m.kv_heads}) and tensor split ({q}) do not divide "
                    "one another")
    if m.ffn % q:
        loader.fail("parallel.tensor", f"ffn_hidden_size({m.ffn}) is not divisible by the tensor split ({q})")
    _check_context(s, loader)
    _check_documents(s, loader)
    _check_lora(s, loader)
    if tr.fp8_activation_input and m.activation != "swiglu":
        loader.fail("training.fp8_activation_input", f"Megatron-Core stores the activation input in FP8 for SwiGLU "
                    f"only; model.activation is {m.activation}")
    if tr.fp8_activation_input and (m.is_moe or m.hybrid_layer_pattern):
        loader.fail("training.fp8_activation_input", "is modelled for the dense transformer MLP (not experts or hybrid "
                    "layers)")
    gpu = s.system.gpu
    if tr.precision == "fp8" and gpu.peak_fp8 is None:
        loader.fail("training.precision", f"fp8 needs FP8 tensor cores (Hopper, Ada, Blackwell; Transformer Engine "
                    f"requires compute capability 8.9); {gpu.name} has none: use bf16 or fp16")
    if tr.master_weights == "remainders" and (refusal := master_remainders_refusal(tr)):
        loader.fail("training.master_weights", refusal)
    if tr.software_date is not None:      # before the FP8 attention check, which resolves the kernel
        from pipesim.costs.flash import parse_software_date
        try:
            parse_software_date(tr.software_date)
        except ValueError as exc:
            loader.fail("training.software_date", str(exc))
    _check_fp8_attention(s, loader)
    if tr.fp8_lm_head and (tr.precision, tr.fp8_recipe) != ("fp8", "mxfp8"):
        # Megatron-Core runs the MXFP8 output layer only under the MXFP8 recipe
        # (megatron/core/fp8_utils.py is_mxfp8_output_proj_active); elsewhere the flag does nothing
        loader.fail("training.fp8_lm_head", f"the FP8 output layer is Megatron-Core's MXFP8 one: needs precision "
                                            f"fp8 with fp8_recipe mxfp8, got {tr.precision} / {tr.fp8_recipe}")
    if tr.fp8_param_gather and tr.precision != "fp8":
        loader.fail("training.fp8_param_gather", f"FP8 parameter storage and all-gather need precision: fp8, "
                    f"got precision: {tr.precision}")
    if tr.recompute_modules != ("core_attn",) and tr.recompute != "selective":
        loader.fail("training.recompute_modules", f"submodules are re-run by recompute: selective, got "
                    f"recompute: {tr.recompute}")
    if tr.optimizer == "muon" and tr.zero_stage == 3:
        loader.fail("training.optimizer", "muon orthogonalises whole matrices: Megatron-Core runs it with "
                    "ZeRO-1/2 (its layer-wise distributed optimizer), not with sharded weights; set zero_stage "
                    "to 0, 1 or 2")
    if not tr.reshard_after_forward and tr.zero_stage != 3:
        loader.fail("training.reshard_after_forward", f"keeping gathered weights from forward to backward "
                    f"is a ZeRO-3 / FSDP choice, got zero_stage: {tr.zero_stage}")
    if tr.fsdp2_ends_in_root and not tr.fsdp2:
        loader.fail("training.fsdp2_ends_in_root", f"says how FSDP2 wraps the embedding and the output layer: needs "
                    f"zero_stage 3 with zero3_collectives fsdp2, got zero_stage: {tr.zero_stage}, "
                    f"zero3_collectives: {tr.zero3_collectives}")
    if tr.tp_keeps_gathered_input and not (s.parallel.sequence_parallel and s.parallel.tensor > 1):
        loader.fail("training.tp_keeps_gathered_input", f"keeps the all-gathered sequence-parallel input: needs "
                    f"parallel.sequence_parallel with tensor > 1, got sequence_parallel: "
                    f"{s.parallel.sequence_parallel}, tensor: {s.parallel.tensor}")
    _check_zero_replicas(s, loader)
    _check_bf16_layers(s, loader)
    _check_bf16_gemms(s, loader)
    if tr.optimizer_state_dtype == "bf16" and (tr.optimizer == "sgd" or tr.precision in ("fp32", "tf32")):
        loader.fail("training.optimizer_state_dtype", f"bf16 states are Adam's moments in mixed-precision training "
                    f"(Megatron-Core's precision-aware optimizer); got optimizer: {tr.optimizer}, precision: "
                    f"{tr.precision}")
    if tr.zero3_collectives != "tensor" and tr.zero_stage != 3:
        loader.fail("training.zero3_collectives", f"per-layer weight gathers are a ZeRO-3 / FSDP choice, got "
                    f"zero_stage: {tr.zero_stage}")
    if par.sequence_parallel and m.seq_length % (t * par.context):
        loader.fail("parallel.sequence_parallel", f"seq_length({m.seq_length}) is not divisible by "
                    f"tensor({t})·context({par.context}) = {t * par.context}")
    if par.sequence_parallel and m.seq_length % t:
        loader.fail("parallel.sequence_parallel", f"seq_length({m.seq_length}) is not divisible by "
                    f"tensor({t})")
    if par.sequence_parallel and par.tensor_mode != "1d":
        loader.fail("parallel.sequence_parallel", f"sequence parallelism is defined for 1d tensor "
                    f"parallelism (Korthikanti et al. 2022), not {par.tensor_mode}")
    per = tr.micro_batch_size * d
    if tr.global_batch_size % per:
        loader.fail("training.global_batch_size", f"global_batch_size({tr.global_batch_size}) is not "
                    f"divisible by micro_batch_size({tr.micro_batch_size})·data({d}) = {per}")
    stages = p * v
    if par.layers_per_stage is not None:
        lps = par.layers_per_stage
        if len(lps) != stages:
            loader.fail("parallel.layers_per_stage", f"{len(lps)} entries ≠ pipeline({p})·"
                        f"virtual_stages({v}) = {stages} stages")
        if sum(lps) != m.num_layers or min(lps) < 0:
            loader.fail("parallel.layers_per_stage", f"sum {'+'.join(map(str, lps))} = {sum(lps)} ≠ "
                        f"num_layers({m.num_layers})")
    elif m.num_layers % stages:
        split = embedding_loss_split(m.num_layers, stages)
        hint = f", e.g. {list(split)} (Megatron's split counting the embedding and the loss as layers)" \
            if split and stages <= 24 else ""
        loader.fail("parallel", f"num_layers({m.num_layers}) is not divisible by pipeline({p})·"
                    f"virtual_stages({v}) = {stages}; give parallel.layers_per_stage for uneven stages{hint}")
    actions = s.num_microbatches * stages
    if actions > MAX_ACTIONS:
        loader.fail("training.global_batch_size", f"global_batch_size({tr.global_batch_size}) / (micro_batch_size("
                    f"{tr.micro_batch_size})·data({d})) = {s.num_microbatches:,} micro-batches × {stages} model stages "
                    f"= {actions:,} pipeline actions per step; at most {MAX_ACTIONS:,} are simulated")
    if tr.schedule.endswith(".csv"):
        if not Path(tr.schedule).exists():
            loader.fail("training.schedule", f"schedule CSV not found: {tr.schedule}")
    else:
        _check_schedule_name(s, loader)
    _check_microbatch_group(s, loader)
    if tr.offload_activation_layers and s.system.host_link_GBps is None:
        loader.fail("training.offload_activation_layers", f"offloading activations needs system.host_link_GBps "
                    f"(the GPU-host copy rate per GPU); system {s.system.name!r} gives none")
    if tr.p2p_sync and p > 1 and tr.schedule not in P2P_SYNC_SCHEDULES:     # canonical names (load.py)
        loader.fail("training.p2p_sync", f"blocking, batched P2P is Megatron's exchange and is modelled for the "
                    f"schedules {', '.join(P2P_SYNC_SCHEDULES)}; got schedule: {tr.schedule}")
    from pipesim.costs.moe_parallel import check_moe
    check_moe(s, loader)
    from pipesim.costs.dsa import check_dsa
    check_dsa(s, loader)
    if s.costs.profile is not None and not Path(s.costs.profile).exists():
        loader.fail("costs.profile", f"profile not found: {s.costs.profile}")


def master_remainders_refusal(tr) -> str | None:
    """Why `training.master_weights: remainders` does not apply to training config `tr`, or None.
    16-bit master remainders are Transformer Engine FusedAdam's (or Apex's) beside BF16
    parameters under Megatron's distributed optimizer; Megatron-Core keeps fp32 masters itself
    under FP8 recipes other than delayed scaling (optimizer_config.py
    use_precision_aware_optimizer_no_fp8_or_ds_fp8)."""
    if tr.optimizer != "adam":
        return f"remainders are Adam's (TE FusedAdam store_param_remainders); optimizer is {tr.optimizer}"
    if tr.zero_stage >= 3:
        return ("remainders live in Megatron's distributed optimizer (zero_stage <= 2); under ZeRO-3 / "
                "FSDP the fp32 shard is the master")
    if tr.precision == "fp8" and tr.fp8_recipe != "delayed":
        return (f"under fp8_recipe {tr.fp8_recipe} Megatron-Core keeps fp32 masters itself; remainders "
                f"take precision bf16 or fp8 with fp8_recipe delayed")
    if tr.precision not in ("bf16", "fp8"):
        return (f"remainders complete BF16 parameters to fp32: needs precision bf16 (or fp8 with "
                f"delayed scaling), got {tr.precision}")
    return None


def _check_fp8_attention(s: Scenario, loader: Loader) -> None:
    """FP8 attention is Transformer Engine's cuDNN FP8 kernel, under an FP8 recipe it supports, on a
    GPU with a published FP8 attention table."""
    from pipesim.costs.flash import attention_kernel_of
    from pipesim.costs.fp8 import ATTENTION_FP8_RECIPES, BLACKWELL_CURVES, attention_dtype, attention_recipe
    from pipesim.presets.gpus import KERNEL_CURVES
    tr = s.training
    if not tr.fp8_attention:
        if tr.fp8_attention_recipe is not None:
            loader.fail("training.fp8_attention_recipe", "the recipe of FP8 attention: needs fp8_attention: true")
        return
    key = "training.fp8_attention"
    if tr.precision != "fp8":
        loader.fail(key, f"FP8 attention runs under FP8 training: needs precision: fp8, got {tr.precision}")
    if attention_recipe(tr) not in ATTENTION_FP8_RECIPES:
        loader.fail(key, f"Transformer Engine's FP8 attention takes fp8_recipe {', '.join(ATTENTION_FP8_RECIPES)}; "
                         f"got {tr.fp8_recipe} (give training.fp8_attention_recipe for another attention recipe)")
    kernel = attention_kernel_of(s)
    if tr.attention == "eager" or kernel not in TE_CUDNN_KERNELS:
        loader.fail(key, f"FP8 attention is cuDNN's fused kernel (Transformer Engine): needs attention flash "
                         f"with attention_kernel auto (kernel_fusion fused) or one of "
                         f"{', '.join(TE_CUDNN_KERNELS[1:])}; got attention "
                         f"{tr.attention}, attention_kernel {kernel}")
    kind = attention_dtype(tr)
    if kind == "mxfp8" and s.system.gpu.kernel_curve not in BLACKWELL_CURVES:
        return                       # training.fp8_recipe's own error (Blackwell only) names the cause
    curve = KERNEL_CURVES.get(s.system.gpu.kernel_curve or "", {})
    if s.system.gpu.matmul_efficiency is None and kind not in curve.get("attention_fp8", {}):
        loader.fail(key, f"no published {kind} attention table on {s.system.gpu.name} (kernel_curve "
                         f"{s.system.gpu.kernel_curve!r}); known on Hopper (per-tensor) and Blackwell")


def _check_router_groups(s: Scenario, loader: Loader) -> None:
    """Group-limited routing: whole groups of experts, each token's k experts within group_topk.
    A dense model has no router: the keys (e.g. left by an MoE preset made dense) are ignored."""
    m = s.model
    groups, top = m.moe_router_num_groups, m.moe_router_group_topk
    if not m.is_moe or (not groups and not top):
        return
    if groups <= 0 or top <= 0:
        loader.fail("model.moe_router_group_topk" if groups > 0 else "model.moe_router_num_groups",
                    f"group-limited routing needs both moe_router_num_groups and moe_router_group_topk > 0, "
                    f"got {groups} and {top}")
    if m.num_experts % groups:
        loader.fail("model.moe_router_num_groups", f"num_experts({m.num_experts}) is not divisible into "
                    f"moe_router_num_groups({groups}) groups")
    if top > groups:
        loader.fail("model.moe_router_group_topk", f"moe_router_group_topk({top}) > moe_router_num_groups({groups})")
    if m.moe_top_k > top * m.num_experts // groups:
        loader.fail("model.moe_router_group_topk", f"moe_top_k({m.moe_top_k}) experts do not fit in "
                    f"moe_router_group_topk({top}) groups of {m.num_experts // groups}")


def _check_dispatcher_sms(s: Scenario, loader: Loader) -> None:
    """The fused dispatcher's kernels run on SMs of the GPU: no more than it has."""
    from pipesim.presets.gpus import curve
    sms = s.training.moe_dispatcher_sms
    if sms is None:
        return
    if s.training.moe_dispatcher == "alltoall":
        loader.fail("training.moe_dispatcher_sms", "sets the SMs of a fused dispatcher (deepep or hybridep); "
                    "moe_dispatcher is alltoall (NCCL's channels)")
    known = (curve(s.system.gpu.kernel_curve) or {}).get("sms")
    if known and sms >= known:
        loader.fail("training.moe_dispatcher_sms", f"{sms} SMs of the {s.system.gpu.name}'s {known} leave "
                    f"none for compute; expected fewer than {known}")


def _check_hybrid(s: Scenario, loader: Loader) -> None:
    """Hybrid Mamba models (pipesim/costs/mamba.py): the pattern's MoE layers need experts and the
    other way round; Mamba heads and groups split over the tensor and context groups (Megatron
    MambaMixer and MambaContextParallel asserts); MTP and sliding windows are not modelled with them."""
    m, par = s.model, s.parallel
    pattern = m.hybrid_layer_pattern
    if not pattern:
        return
    key = "model.hybrid_layer_pattern"
    if ("E" in pattern) != m.is_moe:
        loader.fail(key, "MoE layers (E) need model.num_experts > 0" if "E" in pattern else
                    f"model.num_experts is {m.num_experts} but the pattern has no MoE layer (E)")
    if m.window_size:
        loader.fail("model.window_size", f"not modelled for hybrid models (a hybrid_layer_pattern is set); got "
                    f"{m.window_size}")
    if m.mtp_layers and not m.mtp_hybrid_pattern:
        loader.fail("model.mtp_layers", f"a hybrid model's MTP depth needs its layers: give model.mtp_hybrid_pattern "
                    f"(e.g. \"*E\"); got mtp_layers {m.mtp_layers}")
    t, cp = par.tensor, par.context
    if "M" in pattern:
        heads, groups = m.mamba_heads, m.mamba_num_groups
        if heads % groups:
            loader.fail("model.mamba_num_groups", f"mamba heads({heads}) are not divisible by mamba_num_groups({groups})")
        if heads % t or groups % t:
            loader.fail("parallel.tensor", f"mamba heads({heads}) and mamba_num_groups({groups}) must both be "
                        f"divisible by tensor({t})")
        # Megatron MambaContextParallel: heads split over CP; groups too, or CP a multiple of them
        local = groups // t
        if heads // t % cp or (local % cp and cp % local):
            loader.fail("parallel.context", f"mamba heads({heads}) / tensor({t}) must be divisible by context({cp}), "
                        f"and mamba_num_groups({groups}) / tensor({t}) divide or be divided by it")
    if "G" in pattern:
        hk, hv = m.gdn_num_key_heads, m.gdn_num_value_heads
        if hv % hk:
            loader.fail("model.gdn_num_value_heads", f"gdn_num_value_heads({hv}) is not a multiple of "
                        f"gdn_num_key_heads({hk})")
        if hk % (t * cp):
            loader.fail("parallel.tensor", f"gdn_num_key_heads({hk}) is not divisible by tensor({t})·context({cp})")
    if par.tensor_mode != "1d":
        loader.fail("parallel.tensor_mode", "hybrid models are modelled with 1d tensor parallelism")


def _check_window(s: Scenario, loader: Loader) -> None:
    """Sliding-window attention (pipesim.costs.layers.windowed_attention): causal GQA attention
    without context parallelism."""
    m = s.model
    if m.window_attn_skip_freq and not m.window_size:
        loader.fail("model.window_attn_skip_freq", "full-attention layers among windowed ones need "
                    "model.window_size > 0")
    if not m.window_size:
        return
    if not m.causal:
        loader.fail("model.window_size", f"the sliding window is a causal band; model {m.name!r} is not causal")
    if m.attention_variant != "gqa":
        loader.fail("model.window_size", f"sliding windows are modelled for gqa attention, not "
                    f"{m.attention_variant}")
    if s.parallel.context > 1:
        loader.fail("model.window_size", f"sliding-window attention with context parallelism "
                    f"(context {s.parallel.context}) is not modelled")


def _check_context(s: Scenario, loader: Loader) -> None:
    """Context parallelism (pipesim.costs.context): the sequence splits into CP (contiguous) or
    2·CP (balanced, Megatron/TransformerEngine's causal load balancing) equal chunks."""
    m, par = s.model, s.parallel
    cp = par.context
    if cp == 1:
        return
    if par.tensor_mode != "1d":
        loader.fail("parallel.context", f"context parallelism is combined with 1d tensor parallelism only, "
                    f"not {par.tensor_mode}")
    if par.context_layout == "balanced":
        if not m.causal:
            loader.fail("parallel.context_layout", f"the balanced layout pairs causal chunks; model "
                        f"{m.name!r} is not causal (causal: false) - use context_layout: contiguous")
        if m.seq_length % (2 * cp):
            loader.fail("parallel.context", f"seq_length({m.seq_length}) is not divisible into 2·context"
                        f"({cp}) = {2 * cp} load-balanced chunks")
    elif m.seq_length % cp:
        loader.fail("parallel.context", f"seq_length({m.seq_length}) is not divisible by context({cp})")
    _check_context_a2a(s, loader)


def _check_documents(s: Scenario, loader: Loader) -> None:
    """Packed documents (pipesim.costs.documents): a fused kernel skips the pairs across
    documents (eager attention computes every score under the mask and costs the same); the
    cases below would cost something other than what runs."""
    m, par, tr = s.model, s.parallel, s.training
    if tr.document_length is None:
        return
    if m.attention_variant == "dsa":
        loader.fail("training.document_length", "DeepSeek sparse attention over packed documents is not modelled")
    if par.context > 1 and par.context_layout != "balanced":
        loader.fail("training.document_length", f"context parallelism over packed documents is modelled with "
                    f"every document cut into the 2·CP balanced chunks (Transformer Engine's THD layout); "
                    f"context_layout is {par.context_layout}")


def _check_lora(s: Scenario, loader: Loader) -> None:
    """LoRA (pipesim.costs.lora) is modelled on transformer blocks with grouped-query or latent
    attention, dense or mixture-of-experts (adapters on the attention), and on hybrid models' Mamba /
    Gated DeltaNet mixers, with 1-D tensor parallelism and Adam / SGD; elsewhere the frozen weights
    and adapters would not be costed."""
    m, par, tr = s.model, s.parallel, s.training
    if not tr.lora_rank:
        for key, on in (("lora_dropout", tr.lora_dropout), ("lora_a2a", tr.lora_a2a),
                        ("lora_sp_regather", tr.lora_sp_regather)):
            if on:
                loader.fail(f"training.{key}", "shapes the LoRA adapters; set training.lora_rank to fine-tune with them")
        return
    if m.is_moe and {"fc1", "fc2"} & set(tr.lora_targets) and par.expert_tensor > 1:
        loader.fail("training.lora_targets", f"adapters on the experts are modelled without expert tensor "
                    f"parallelism; parallel.expert_tensor is {par.expert_tensor} (or target the attention's linears)")
    from pipesim.costs.lora import model_linears
    linears = model_linears(m)
    missing = [n for n in tr.lora_targets if n not in linears]
    if missing:
        loader.fail("training.lora_targets", f"{', '.join(missing)}: not a linear of this model's layers; it has "
                    f"{', '.join(linears)}")
    unmodelled = [(m.attention_variant == "dsa", "DeepSeek sparse attention"),
                  (bool(m.mtp_layers), "multi-token prediction"),
                  (par.tensor_mode != "1d", f"tensor_mode {par.tensor_mode}"),
                  (tr.optimizer == "muon", "the muon optimizer")]
    for hit, what in unmodelled:
        if hit:
            loader.fail("training.lora_rank", f"LoRA is not modelled with {what} (it is on transformer blocks with "
                        f"grouped-query or latent attention, dense, mixture-of-experts or hybrid, 1-D tensor "
                        f"parallelism, adam or sgd)")
    if tr.lora_sp_regather and not (par.sequence_parallel and par.tensor > 1):
        loader.fail("training.lora_sp_regather", f"re-gathers a sequence-parallel shard: needs "
                    f"parallel.sequence_parallel with tensor > 1 (tensor {par.tensor})")
    if tr.lora_sp_regather and (tr.cuda_graphs != "none" or tr.recompute == "full"):
        # Bridge's _sequence_parallel_input_regather_eligibility falls back to the gathered input
        loader.fail("training.lora_sp_regather", f"Megatron-Bridge keeps the gathered input instead under CUDA "
                    f"graphs or full recompute (cuda_graphs {tr.cuda_graphs}, recompute {tr.recompute}); unset it")
    if tr.lora_rank > m.hidden_size:
        loader.fail("training.lora_rank", f"{tr.lora_rank} is above hidden_size({m.hidden_size}): a low-rank "
                    f"adapter's rank is at most its linear's smaller side")


def _check_context_a2a(s: Scenario, loader: Loader) -> None:
    """The all-to-all CP modes hand each rank a share of the heads: TransformerEngine's
    AttnFuncWithCPAndQKVOA2A asserts that the query and the key/value heads divide by its group."""
    m, par = s.model, s.parallel
    mode, cp, a = par.context_mode, par.context, par.context_a2a
    if a is not None and mode != "a2a+p2p":
        loader.fail("parallel.context_a2a", f"is the all-to-all level of context_mode a2a+p2p; context_mode is "
                    f"{mode!r}")
    if mode == "a2a+p2p":
        if a is None:
            loader.fail("parallel.context_a2a", f"context_mode a2a+p2p needs the all-to-all group size (a divisor "
                        f"of context({cp}) between 2 and {cp // 2})")
        if cp % a or not 1 < a < cp:
            loader.fail("parallel.context_a2a", f"{a} must divide context({cp}) and lie between 2 and {cp // 2} "
                        f"(a2a for the whole group is context_mode a2a)")
    group, _ = par.context_levels
    if group <= 1:
        return
    key = "parallel.context" if mode == "a2a" else "parallel.context_a2a"
    t = par.tensor
    kv = m.num_attention_heads if m.is_mla else m.kv_heads
    for name, heads in (("num_attention_heads", m.num_attention_heads), ("num_kv_heads", kv)):
        if heads % t or (heads // t) % group:
            loader.fail(key, f"the all-to-all gives each of its {group} ranks a share of the heads: "
                        f"model.{name}({heads}) / tensor({t}) is not divisible by {group}")


def schedule_error(s: Scenario, exc: Exception) -> ScenarioError:
    """A schedule generator's constraint error (P, M, V) restated with the scenario keys."""
    p, v = s.parallel.pipeline, s.parallel.virtual_stages
    return ScenarioError(f"{s.source}: training.schedule: {exc}; here P = parallel.pipeline({p}), "
                         f"V = parallel.virtual_stages({v}), M = {s.num_microbatches} micro-batches "
                         f"(global_batch_size / (micro_batch_size·data))")


def _check_kernel_fusion(s: Scenario, loader: Loader) -> None:
    """The eager op counts (pipesim/costs/eager.py) are for 16-bit activations cast up to fp32
    inside the norms and rotary, as torchtitan runs them."""
    tr = s.training
    if tr.kernel_fusion == "eager" and tr.precision in ("fp32", "tf32"):
        loader.fail("training.kernel_fusion", f"eager is costed for 16-bit or fp8 training (bf16 activations "
                    f"cast to fp32 in the norms and rotary); precision is {tr.precision}")


def _check_cnn(s: Scenario, loader: Loader) -> None:
    """CNN presets are data/pipeline parallel only; their stage split is checked when built."""
    par, tr = s.parallel, s.training
    if par.context != 1:
        loader.fail("parallel.context", f"CNN models have no sequence to split: context must be 1, got {par.context}")
    if par.tensor != 1:
        loader.fail("parallel.tensor", f"CNN models are not tensor parallel: tensor must be 1, got {par.tensor}")
    if par.virtual_stages != 1:
        loader.fail("parallel.virtual_stages", "CNN models support one stage per pipeline rank")
    if tr.recompute in ("selective", "selective_op"):
        loader.fail("training.recompute", f"{tr.recompute} recompute is defined for transformers; use none or full")
    for key, value, plain in (("optimizer_state_dtype", tr.optimizer_state_dtype, "fp32"),
                              ("zero_replicas", tr.zero_replicas, 1)):
        if value != plain:
            loader.fail(f"training.{key}", f"the CNN cost path keeps fp32 Adam states over one data-parallel "
                        f"group; {key} must be {plain}, got {value}")
    per = tr.micro_batch_size * par.data
    if tr.global_batch_size % per:
        loader.fail("training.global_batch_size", f"global_batch_size({tr.global_batch_size}) is not "
                    f"divisible by micro_batch_size({tr.micro_batch_size})·data({par.data}) = {per}")
    _check_schedule_name(s, loader)


# Schedules whose exchanges sim/p2p_sync.py batches as Megatron does; the zero-bubble and V-shaped
# generators' exchanges need receives posted further ahead than one batch (they deadlock when
# blocking), and their frameworks use asynchronous P2P.
P2P_SYNC_SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check_bf16_gemms(s: Scenario, loader: Loader) -> None:
    """Per-module precision of an FP8 / FP4 recipe (pipesim/costs/fp8.py BF16_GEMM_GROUPS)."""
    tr = s.training
    for key, value in (("bf16_gemms", tr.bf16_gemms), ("bf16_mtp", tr.bf16_mtp)):
        if value and tr.precision != "fp8":
            loader.fail(f"training.{key}", f"keeping GEMMs in BF16 is an FP8 / FP4 recipe's choice; got "
                        f"precision: {tr.precision}")
    if not tr.mxfp8_gemms:
        return
    if tr.precision != "fp8" or tr.fp8_recipe != "nvfp4":
        loader.fail("training.mxfp8_gemms", f"MXFP8 groups inside an NVFP4 run need fp8_recipe: nvfp4; got "
                    f"precision: {tr.precision}, fp8_recipe: {tr.fp8_recipe}")
    if tr.fp8_param_gather:
        loader.fail("training.mxfp8_gemms", "mixed MXFP8 / NVFP4 weights with fp8_param_gather are not modelled; "
                    "set fp8_param_gather: false")
    both = sorted(set(tr.mxfp8_gemms) & set(tr.bf16_gemms))
    if both:
        loader.fail("training.mxfp8_gemms", f"{', '.join(both)} also in training.bf16_gemms")


def _check_bf16_layers(s: Scenario, loader: Loader) -> None:
    """BF16 layers at the ends of an FP8 / FP4 model: within its layers."""
    tr, m = s.training, s.model
    n = tr.bf16_layers_start + tr.bf16_layers_end
    if not n:
        return
    key = "training.bf16_layers_start" if tr.bf16_layers_start else "training.bf16_layers_end"
    if tr.precision != "fp8":
        loader.fail(key, f"BF16 layers at the ends are an FP8 / FP4 recipe's; got precision: {tr.precision}")
    if tr.bf16_layers_start < 0 or tr.bf16_layers_end < 0 or n > m.num_layers:
        loader.fail(key, f"start({tr.bf16_layers_start}) + end({tr.bf16_layers_end}) must be between 0 and "
                    f"num_layers({m.num_layers})")


def _check_zero_replicas(s: Scenario, loader: Loader) -> None:
    """Replicas split the gradient group evenly (Megatron-Core asserts it for the dense and the
    expert data-parallel groups) and only mean something when the states are sharded."""
    r, par, tr = s.training.zero_replicas, s.parallel, s.training
    if r == 1:
        return
    if tr.zero_stage < 1:
        loader.fail("training.zero_replicas", f"replicas of a sharded state need zero_stage >= 1, got zero_stage: "
                    f"{tr.zero_stage}")
    group = par.data * par.context
    if group % r:
        loader.fail("training.zero_replicas", f"{r} replicas do not split data({par.data})·context({par.context}) "
                    f"= {group} ranks evenly")
    if s.model.is_moe:
        from pipesim.costs.moe_parallel import expert_data_size
        edp = expert_data_size(s)
        if edp % r:
            loader.fail("training.zero_replicas", f"{r} replicas do not split the expert-data-parallel group "
                        f"({edp} ranks) evenly")


def _check_microbatch_group(s: Scenario, loader: Loader) -> None:
    """Megatron-Core's bounds on the micro-batch group (schedules.py
    forward_backward_pipelining_with_interleaving): P <= N <= M, and a last group of 0 or >= P."""
    n, tr, par = s.training.microbatch_group_size, s.training, s.parallel
    if n is None:
        return
    if tr.schedule != "interleaved" or par.virtual_stages < 2:
        loader.fail("training.microbatch_group_size", f"groups micro-batches of the interleaved schedule with "
                    f"virtual_stages >= 2; got schedule: {tr.schedule}, virtual_stages: {par.virtual_stages}")
    from pipesim.schedules.loop import check_group
    problem = check_group(par.pipeline, s.num_microbatches, n)
    if problem:
        loader.fail("training.microbatch_group_size", f"{problem} (P = parallel.pipeline, M = micro-batches "
                    f"per step)")


def _check_schedule_name(s: Scenario, loader: Loader) -> None:
    try:
        from pipesim.schedules import SCHEDULES
    except ImportError:      # schedules package not available: the simulator reports it later
        return
    name = s.training.schedule
    if name not in SCHEDULES:
        loader.fail("training.schedule", f"unknown schedule {name!r}; known: {', '.join(sorted(SCHEDULES))}"
                    " (or a path to an action CSV)")


def _check_tensor_shape(par: ParallelConfig, loader: Loader) -> None:
    t, mode = par.tensor, par.tensor_mode
    # 2D (Optimus, Xu et al. 2021): q x q grid; 2.5D (Tesseract, Wang et al. 2021): q x q x d;
    # 3D (Bian et al. 2021): q x q x q cube.
    if mode == "2d" and _root(t, 2) ** 2 != t:
        loader.fail("parallel.tensor", f"2d tensor parallelism needs a square: tensor({t}) is not q·q")
    if mode == "3d" and _root(t, 3) ** 3 != t:
        loader.fail("parallel.tensor", f"3d tensor parallelism needs a cube: tensor({t}) is not q·q·q")
    if mode == "2.5d":
        dep = par.tensor_depth
        q = _root(t // dep, 2) if t % dep == 0 else 0
        if q * q * dep != t:
            loader.fail("parallel.tensor", f"2.5d tensor parallelism needs tensor = q·q·depth: "
                        f"tensor({t}) with tensor_depth({dep}) has no integer q")


def _root(n: int, k: int) -> int:
    r = round(n ** (1.0 / k)) if n > 0 else 0
    return r if r ** k == n else max(r, 1)
