"""Held-out family bridge2511 (scenarios/validation/heldout.yaml): the NVIDIA Megatron-Bridge /
NeMo performance summary, "25.11 NeMo Container" pre-training tables for DGX-GB200, DGX-B200 and
DGX-H100 (https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary.html, archive
page). Test only: nothing in pipesim is set from these rows. Metric: tokens/s per GPU.

What the table states is mapped as published: #GPUs, GBS, MBS, sequence length, TP, PP, CP, VP,
EP, FSDP and precision (FP8-CS = FP8 with current per-tensor scaling -> fp8_recipe tensorwise;
FP8-MX = MXFP8, 32x32 blocks on B200/GB200 -> fp8_recipe mxfp8; BF16). FSDP > 0 -> ZeRO-3 over
the data-parallel group (FSDP equals dp in every transcribed row; other values are refused).

Set as the 25.11 release's own performance scripts set them (NVIDIA-NeMo/Megatron-Bridge tag
v0.2.0, 2025-11-26): gradients reduced in bf16 (scripts/performance/configs/*/*_llm_pretrain.py:
`cfg.ddp.grad_reduce_in_fp32 = False` in every pre-training config), the loss computed by
Transformer Engine's cross-entropy kernel (scripts/performance/utils/helpers.py
set_common_perf_overrides: `cross_entropy_fusion_impl = "te"`, with the GPT provider's
`cross_entropy_loss_fusion = True`; the same in v0.4.2's utils/overrides.py), and the FP8 rows keep their
weights in FP8 and all-gather them in FP8 (src/megatron/bridge/training/mixed_precision.py:
bf16_with_fp8_current_scaling_mixed and bf16_with_mxfp8_mixed set `fp8_param_gather = True`;
scripts/performance/utils/helpers.py get_precision_config picks them, with BF16 first/last layers
turned off). Per-row settings of those scripts (HybridEP dispatch, MoE A2A overlap, per-module
recompute) are mapped where the scripts' layout is the table's (BRIDGE_ROW_SETTINGS); CUDA graphs
and the other rows' settings (activation offloading, Megatron FSDP) are not. The models with shared
experts run them beside the all-to-all (moe_shared_expert_overlap) as their providers set it,
unless the row uses the flex dispatcher or the A2A overlap, which turn it off.
Assumptions the table does not state, made once for the whole family (Megatron-Core defaults as
for nemo2407 in pipesim/whatif/families.py): sequence parallelism with TP, TP comm overlap, the
distributed optimizer (ZeRO-1) unless FSDP, overlapped grad reduce and param gather, Megatron's
default DDP bucket, flash (cuDNN) attention, no activation
recompute, no dropout, ring context parallelism. Layers that do not split evenly over
pipeline·virtual chunks are placed as Megatron's account_for_embedding/loss_in_pipeline_split
does: layers+2 slots split as evenly as possible (the remainder to the first chunks), the first
and last chunk giving a slot to the embedding and the head (as llama3-405b in
pipesim/whatif/validation_cp.py), unless the release's recipe names the layout (DeepSeek-V3, Kimi
K2: BRIDGE_LAYOUTS, as Megatron layout strings). A GB200 run is one NVLink domain of the largest multiple of 4
GPUs <= 72 dividing the run (64 for 64 and 256 GPUs: NVL72 racks with 16 of their 18 trays in
use), since 72 divides none of the published GPU counts. MoE: the table's footnote says the
token distribution is force-balanced and dropless -> moe_routing balanced; dispatcher alltoall
and expert TP 1 (not stated).
DeepSeek-V3 "w/ MTP" -> model.mtp_layers 1 (the depth DeepSeek-V3 was trained with, arXiv
2412.19437 Sec. 2.2), the MTP block on the last pipeline stage as Megatron-Core places it.
The 26.04.01, 26.06 and 26.08 tables (bridge2604, bridge2606, bridge2608) use this converter too,
with their releases' per-row settings (BRIDGE_FAMILY_ROWS: validation_bridge_2604.py, _2606.py,
_2608.py).
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.scenario.stage_split import embedding_loss_split
from pipesim.whatif import (validation_bridge_2604, validation_bridge_2606, validation_bridge_2608,
                            validation_bridge_recompute)
from pipesim.whatif.families import megatron_bucket_MB, megatron_p2p_sync, unknown_model

# Published system names -> (pipesim system preset, GPUs per preset node: pipesim/presets/systems.py).
BRIDGE_SYSTEMS = {"DGX-H100": ("dgx-h100", 8), "DGX-B200": ("dgx-b200", 8), "DGX-GB200": ("gb200-nvl72", 4),
                  "DGX-B300": ("dgx-b300", 8), "DGX-GB300": ("gb300-nvl72", 4)}
NVL72 = ("gb200-nvl72", "gb300-nvl72")
# Published model names -> pipesim model presets (pipesim/presets/models.py).
BRIDGE_MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA3.1_405B": "llama3.1-405b",
                 "DeepSeekV3 (w/o MTP)": "deepseek-v3", "DeepSeekV3 (w/ MTP)": "deepseek-v3",
                 "GPT OSS 120B": "gpt-oss-120b", "Qwen3_30B_a3B": "qwen3-30b-a3b", "Qwen3_235B_a22B": "qwen3-235b-a22b",
                 "Kimi_K2": "kimi-k2", "Nemotron_3_Nano": "nemotron-3-nano", "Nemotron_3_Super": "nemotron-3-super",
                 # 26.x tables: "DeepSeekV3" without an MTP label, trained with one (BRIDGE_MTP)
                 "DeepSeekV3": "deepseek-v3"}
# Published models pipesim has no preset for, with the reason (validate lists them as skipped).
BRIDGE_NO_PRESET = {
    "DeepSeekV4 Flash": "no preset: DeepSeek-V4's compressed sparse attention and hyper-connections are not modelled",
    "Nemotron_3_5_Lightning": "no pipesim preset for Nemotron 3.5 Lightning (30B-A3B: Nemotron 3 Nano's "
                              "recipe with two MTP passes)",
    "Nemotron_3_Ultra": "no pipesim preset for Nemotron 3 Ultra (550B-A55B LatentMoE)"}
# Published (model, precision) pairs whose recipe pipesim cannot express, with the reason.
BRIDGE_NOT_EXPRESSIBLE: dict = {}
# Model keys of a published model's recipe: Nemotron 3 Super trains with two MTP passes through one
# shared "*E" block (Megatron-Bridge v0.4.2 recipes/nemotronh/nemotron_3_super.py: mtp_num_layers 2,
# mtp_use_repeated_layer; the HF config's mtp_hybrid_override_pattern "*E").
BRIDGE_MODEL_KEYS = {"Nemotron_3_Super": dict(mtp_layers=2, mtp_repeated_layer=True, mtp_hybrid_pattern="*E")}
# Settings a table's footnote states for a model (26.04.01: "Muon optimizer was used for
# pre-training Kimi-K2"), and the model recipe's own: Megatron-Bridge's DeepSeek-V3 recipe keeps
# Adam's moments in BF16 (src/megatron/bridge/recipes/deepseek/deepseek_v3.py at v0.2.0 and
# v0.4.2: use_precision_aware_optimizer, exp_avg_dtype = exp_avg_sq_dtype = bfloat16), which every
# DeepSeek-V3 performance config builds on.
_BF16_MOMENTS = dict(optimizer_state_dtype="bf16")
BRIDGE_MODEL_SETTINGS = {"Kimi_K2": dict(optimizer="muon"), "DeepSeekV3": _BF16_MOMENTS,
                         "DeepSeekV3 (w/o MTP)": _BF16_MOMENTS, "DeepSeekV3 (w/ MTP)": _BF16_MOMENTS,
                         # its recipe keeps the MTP block in BF16 (keep_mtp_spec_in_bf16)
                         "Nemotron_3_Super": dict(bf16_mtp=True)}
# A model's own low-precision recipe, by published precision: Nemotron 3 Super's NVFP4 runs keep
# the last 14 layers in BF16 (v0.4.2 mixed_precision.py nemotron_3_super_bf16_with_nvfp4_mixed;
# its FP4 parameter gather "disabled until MCore PR 4358 lands", scripts/performance/configs/
# nemotronh/nemotron_3_llm_pretrain.py) and quantize by module (te_quant.cfg there): attention
# qkv / proj and the latent projections in BF16, the Mamba out_proj in MXFP8, the rest NVFP4.
# Kimi K2 trains with Muon, whose layer-wise distributed optimizer cannot gather MXFP8 weights: its
# performance configs turn the FP8 parameter gather off for Muon + MXFP8 (v0.4.2 and v0.5.1
# scripts/performance/configs/kimi/kimi_llm_pretrain.py set_kimi_k2_common_configs).
BRIDGE_PRECISION_RECIPES = {("Nemotron_3_Super", "NVFP4"): dict(
    bf16_layers_end=14, bf16_gemms=["attention", "moe_latent"], mxfp8_gemms=["ssm_out_proj"],
    fp8_param_gather=False),
    ("Kimi_K2", "MXFP8"): dict(fp8_param_gather=False)}
# Multi-token prediction depth of the published model names that train with it. The 26.x tables'
# plain "DeepSeekV3" trains with one too: the recipe every release's DeepSeek-V3 performance config
# builds on sets it (recipes/deepseek/deepseek_v3.py deepseek_v3_pretrain_config: mtp_num_layers =
# 1, at v0.4.2, v0.5.1 and v0.6.0), no performance config turns it off (scripts/performance at
# v0.4.2 / v0.5.1, perf_recipes/deepseek at v0.6.0), and v0.6.0's GB300 recipe writes its block into
# the pipeline layout ("Et*4|(t*4|)*14tmL": the "m" beside the loss).
BRIDGE_MTP = {"DeepSeekV3 (w/ MTP)": 1, "DeepSeekV3": 1}
# Pipeline layouts of the 26.x releases, by model and (pipeline, virtual stages), as Megatron layout
# strings (parallel.layers_per_stage); models without an entry take Megatron's embedding- and
# loss-aware split (Qwen3's recipes set account_for_embedding/loss_in_pipeline_split). DeepSeek-V3:
# the recipe's own map, which every DeepSeek-V3 performance config applies when it names no layout
# (recipes/deepseek/deepseek_v3.py set_deepseek_v3_pipeline_model_parallel_layout, v0.4.2 to
# v0.6.0: (4, 4) and (8, 2) = the embedding and 4 layers, 14 chunks of 4, then 1 layer with the MTP
# block and the loss; (8, 1) = 8 per chunk and 5 in the last), and the one the PP 2 x VP 8 configs
# name (pp_layout, v0.4.2 and v0.5.1 scripts/performance/configs/deepseek/
# deepseek_workload_base_configs.py GB300 V1, v0.6.0 perf_recipes/deepseek/gb300/deepseek_v3.py).
# Kimi K2 (61 layers, no MTP): recipes/kimi/kimi_k2.py _get_kimi_k2_pipeline_layout, which the GB300
# configs (no pp_layout) apply, v0.4.2 and v0.5.1 scripts/performance/configs/kimi/kimi_llm_pretrain.py.
# The 25.11 DeepSeek-V3 rows: the same map in v0.2.0's recipe (recipes/deepseek/deepseek_v3.py,
# applied by its model config for these sizes), with the MTP block where the row trains one.
_DS_16 = "Et*4|(t*4|)*14tmL"
BRIDGE_LAYOUTS = {"DeepSeekV3": {(2, 8): _DS_16, (4, 4): _DS_16, (8, 2): _DS_16, (8, 1): "Et*8|(t*8|)*6t*5mL"},
                  "DeepSeekV3 (w/ MTP)": {(16, 1): _DS_16},
                  "DeepSeekV3 (w/o MTP)": {(4, 4): "Et*4|(t*4|)*14tL"},
                  "Kimi_K2": {(4, 4): "Et*4|(t*4|)*14tL"}}
# Per-row settings of the release's performance scripts (Megatron-Bridge tag v0.2.0,
# scripts/performance/configs/*/workload_base_configs.py), mapped for the rows whose layout there
# (GPUs, TP, PP, VP, EP, micro-batch, global batch) is the table's: the other rows' configs at that
# tag differ from the table, so what they ran is not known. HybridEP / DeepEP dispatch ->
# moe_dispatcher hybridep / deepep (v0.2.0's GB200 rows name hybridep, at 32 SMs:
# scripts/performance/utils/helpers.py); recompute_modules -> recompute selective with those
# modules; moe_a2a_overlap as set. CUDA graphs (host time pipesim does not model) are not mapped.
BRIDGE_ROW_SETTINGS = {
    # DEEPSEEK_V3_GB200_BASE_CONFIG
    "bridge2511-gb200-deepseekv3-bf16": dict(moe_dispatcher="hybridep", recompute="selective",
                                             recompute_modules=["mla_up_proj"]),
    # DEEPSEEK_V3_B200_BASE_CONFIG
    "bridge2511-b200-deepseekv3-mtp-mx": dict(recompute="selective", recompute_modules=["mla_up_proj"]),
    # QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG
    "bridge2511-h100-qwen3-235b-a22b": dict(moe_a2a_overlap=True),
    # QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG
    "bridge2511-gb200-qwen3-30b-a3b-mx": dict(moe_dispatcher="hybridep"),
    # GPT_OSS_120B_B200_BF16_BASE_CONFIG
    "bridge2511-b200-gpt-oss-120b-bf16": dict(recompute="selective", recompute_modules=["layernorm", "moe_act"]),
}
# Per-row settings of the 26.x families, from each release's performance configs (the modules name
# the config beside each row); NVFP4 rows store and gather FP4 weights in all three releases.
BRIDGE_FAMILY_ROWS = {"bridge2604-": validation_bridge_2604.ROWS, "bridge2606-": validation_bridge_2606.ROWS,
                      "bridge2608-": validation_bridge_2608.ROWS, "bridgemem-": validation_bridge_recompute.ROWS}
# Published precision -> (training.precision, training.fp8_recipe).
# The 26.x tables write FP8 (current scaling, Megatron-Bridge's fp8_cs default) and MXFP8.
# Transformer Engine's norm kernels as Megatron-Bridge's performance scripts set them (v0.2.0 for
# bridge2511, v0.4.2 for bridge2604, v0.5.1 for bridge2606: scripts/performance/perf_plugins.py
# PerfEnvPlugin): NVTE_FWD/BWD_LAYERNORM_SM_MARGIN 20 with the DeepEP / HybridEP dispatchers, else
# 16 (-> training.norm_sm_margin); their environment runs cuDNN's norms (utils/executors.py
# PERF_ENV_VARS: NVTE_NORM_FWD/BWD_USE_CUDNN=1) and drops that, for TE's own kernels, on every row
# but these (model, precision) on these systems (`del_cudnn_ln = False`). bridge2608 (v0.6.0's flat
# recipes) is not mapped: its DeepSeek-V3 recipes keep cuDNN's norms, and its other rows' hidden
# sizes never split a norm row over CTAs (costs/norm_kernels.py).
_GB = ("DGX-GB200", "DGX-GB300")
_CUDNN_NORMS_2511 = {("LLAMA3_8B", "FP8-CS"): ("DGX-H100",), ("LLAMA3_70B", "BF16"): _GB,
                     ("LLAMA3_70B", "FP8-CS"): _GB, ("LLAMA3.1_405B", "FP8-CS"): _GB}
_CUDNN_NORMS_2604 = {("LLAMA3_8B", "FP8"): ("DGX-H100",), ("LLAMA3_70B", "BF16"): _GB, ("LLAMA3_70B", "FP8"): _GB,
                     ("LLAMA3.1_405B", "FP8"): _GB, ("DeepSeekV3", "MXFP8"): _GB, ("Kimi_K2", "MXFP8"): _GB,
                     **{("Nemotron_3_Nano", p): tuple(BRIDGE_SYSTEMS) for p in ("BF16", "FP8", "MXFP8", "NVFP4")}}
BRIDGE_CUDNN_NORMS = {"bridge2511-": _CUDNN_NORMS_2511, "bridge2604-": _CUDNN_NORMS_2604,
                      "bridge2606-": _CUDNN_NORMS_2604}


def bridge_norm_margin(cid: str, name: str, precision: str, system: str, dispatcher: str) -> dict:
    """{"norm_sm_margin": N} for a row whose release's scripts run TE's norms, else {}."""
    prefix = next((p for p in BRIDGE_CUDNN_NORMS if cid.startswith(p)), None)
    if prefix is None or system in BRIDGE_CUDNN_NORMS[prefix].get((name, precision), ()):
        return {}
    return {"norm_sm_margin": 20 if dispatcher in ("deepep", "hybridep") else 16}


BRIDGE_PRECISIONS = {"BF16": ("bf16", None), "FP8-CS": ("fp8", "tensorwise"), "FP8-MX": ("fp8", "mxfp8"),
                     "NVFP4": ("fp8", "nvfp4"), "FP8": ("fp8", "tensorwise"), "MXFP8": ("fp8", "mxfp8")}


def bridge_scenario(case) -> dict:
    c, cid = case.raw, case.id
    name, par, hw = c["model"]["name"], c["parallel"], c["hardware"]
    if name in BRIDGE_NO_PRESET:
        raise ScenarioError(f"{cid}: skipped: {BRIDGE_NO_PRESET[name]}")
    if (name, c.get("precision")) in BRIDGE_NOT_EXPRESSIBLE:
        raise ScenarioError(f"{cid}: skipped: {BRIDGE_NOT_EXPRESSIBLE[name, c.get('precision')]}")
    if name not in BRIDGE_MODELS:
        raise unknown_model(cid, name)
    if hw["system"] not in BRIDGE_SYSTEMS:
        raise ScenarioError(f"{cid}: hardware.system {hw['system']!r} has no system preset; "
                            f"known: {', '.join(BRIDGE_SYSTEMS)}")
    if c.get("precision") not in BRIDGE_PRECISIONS:
        raise ScenarioError(f"{cid}: precision {c.get('precision')!r} is not expressible in pipesim; "
                            f"known: {', '.join(BRIDGE_PRECISIONS)}")
    preset, per_node = BRIDGE_SYSTEMS[hw["system"]]
    n = int(hw["num_gpus"])
    tp, pp, cp, ep, vp, fsdp = (1 if par[k] == "n/a" else int(par[k]) for k in ("tp", "pp", "cp", "ep", "vp", "fsdp"))
    if n % (tp * pp * cp):
        raise ScenarioError(f"{cid}: tensor({tp})·pipeline({pp})·context({cp}) does not divide {n} GPUs")
    dp = n // (tp * pp * cp)
    if fsdp and fsdp != dp:
        raise ScenarioError(f"{cid}: parallel.fsdp {fsdp} ≠ data-parallel size {dp}; partial sharding is not mapped")
    system = node_system(cid, hw["system"], preset, per_node, n)
    precision, recipe = BRIDGE_PRECISIONS[c["precision"]]
    parallel = {"tensor": tp, "pipeline": pp, "data": dp, "sequence_parallel": tp > 1, "virtual_stages": vp}
    layers = _preset_layers(BRIDGE_MODELS[name])
    layout = BRIDGE_LAYOUTS.get(name, {}).get((pp, vp))
    if layout:
        parallel["layers_per_stage"] = layout
    elif layers % (pp * vp):
        parallel["layers_per_stage"] = embedding_loss_split(layers, pp * vp)
    if cp > 1:
        parallel.update(context=cp, context_mode="ring")
    training = {"micro_batch_size": int(par["micro_batch"]), "global_batch_size": int(par["global_batch"]),
                "schedule": "interleaved" if vp > 1 else "1f1b", "recompute": "none", "precision": precision,
                "attention": "flash", "zero_stage": 3 if fsdp else 1, "overlap_grad_reduce": True,
                "overlap_param_gather": True, "overlap_tp_comm": tp > 1, "tp_grad_overlap": True,
                "grad_reduce_in_fp32": False,
                "grad_bucket_MB": megatron_bucket_MB(dp * cp, grad_bytes=2.0), "p2p_sync": megatron_p2p_sync(vp, 2025),
                "cross_entropy": "te"}
    if recipe:      # FP8 weights stored and gathered in FP8; NVFP4 keeps BF16 weights
        training.update(fp8_recipe=recipe, fp8_param_gather=recipe != "nvfp4")
    model = {"preset": BRIDGE_MODELS[name], "name": cid, "seq_length": int(c["model"]["seq_len"]), "dropout": False,
             "mtp_layers": BRIDGE_MTP.get(name, 0), **BRIDGE_MODEL_KEYS.get(name, {})}
    if ep > 1:
        parallel.update(expert=ep, expert_tensor=1)
        training.update(moe_routing="balanced", moe_dispatcher="alltoall")
    training.update(BRIDGE_MODEL_SETTINGS.get(name, {}))
    if training.get("optimizer_state_dtype") == "bf16" and precision == "bf16":
        # the precision-aware optimizer of a BF16 run lets TE's FusedAdam keep the masters, as 16-bit
        # remainders by default (Megatron-Core optimizer_config.py store_param_remainders = True from
        # TE 2.1, in every Bridge container here; its FP8 recipes keep fp32 masters in Megatron-Core)
        training["master_weights"] = "remainders"
    training.update(BRIDGE_ROW_SETTINGS.get(cid, {}))
    training.update(row_settings(cid))
    training.update(BRIDGE_PRECISION_RECIPES.get((name, c.get("precision")), {}))
    training.update(bridge_norm_margin(cid, name, c.get("precision"), hw["system"],
                                       training.get("moe_dispatcher", "alltoall")))
    if ep > 1 and _preset_key(BRIDGE_MODELS[name], "num_shared_experts"):
        # the DeepSeek, Kimi and Nemotron-H providers turn the shared-expert overlap on; the flex
        # dispatcher (DeepEP / HybridEP) and the A2A overlap turn it off (v0.4.2
        # training/flex_dispatcher_backend.py, scripts/performance/utils/overrides.py; v0.2.0 alike)
        training["moe_shared_expert_overlap"] = (training["moe_dispatcher"] == "alltoall"
                                                 and not training.get("moe_a2a_overlap"))
    return {"model": model, "system": system, "parallel": parallel, "training": training}


def node_system(cid: str, published: str, preset: str, per_node: int, n: int) -> dict:
    """The system section of a run of `n` GPUs on `preset` nodes of `per_node`: one partial node
    below a node, whole nodes above; an NVL72 run of several trays one NVLink domain of the
    largest multiple of the tray, up to 72, that divides the run."""
    if n % per_node and n > per_node:
        raise ScenarioError(f"{cid}: {n} GPUs is not a whole number of {per_node}-GPU {published} nodes")
    if n < per_node:
        return {"preset": preset, "num_nodes": 1, "gpus_per_node": n}
    system = {"preset": preset, "num_nodes": n // per_node}
    if preset in NVL72 and n > per_node:
        system["nvlink_domain"] = max(d for d in range(per_node, 73, per_node) if n % d == 0)
    return system


def row_settings(case_id: str) -> dict:
    """The training keys of a 26.x row's release config (empty for other families and rows)."""
    prefix = next((p for p in BRIDGE_FAMILY_ROWS if case_id.startswith(p)), None)
    if prefix is None:
        return {}
    row = BRIDGE_FAMILY_ROWS[prefix].get(case_id[len(prefix):], {})
    return {**(validation_bridge_2604.NVFP4_ROW if case_id.endswith("-nvfp4") else {}), **row}


def _preset_layers(preset: str) -> int:
    return int(_preset_key(preset, "num_layers"))


def _preset_key(preset: str, key: str):
    from pipesim.presets.models import MODELS
    return MODELS[preset].get(key, 0)
