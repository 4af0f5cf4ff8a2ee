"""Held-out family mlperf (scenarios/validation/heldout.yaml): MLPerf Training's LLM pre-training
benchmarks as NVIDIA's NeMo / Megatron-Core submissions ran them - GPT-3 175B (rounds v3.0 to v4.1,
H100 and a B200 preview), Llama 3.1 405B (v5.0, v5.1: H100, H200, GB200, GB300) and Llama 3.1 8B
(v5.1, GB200 and GB300 at 8, 72 and 512 GPUs, and University of Florida's DGX B200 at 8 and 64) -
including partners' runs of the same code (CoreWeave, IBM + CoreWeave, Nebius). Test
only: nothing in pipesim is set from these rows. Metric: tokens/s per GPU, from the steady-state
step time of the MLLOG result files (block or evaluation intervals, evaluation excluded; the per-row
`where` says which), median over a configuration's result files.

Mapped as the submission's config scripts set them (`source` names each): GPUs, TP, PP, VP
(INTERLEAVED_PIPELINE), CP, micro-batch, global batch (MINIBS x data-parallel size; the logged
global_batch_size where a config's default differs from its logs), sequence length, precision and
recipe, FP8 parameters (FP8_PARAMS / FP8_PARAM_GATHER -> fp8_param_gather), FP8 attention (FP8_DPA;
its own delayed-scaling recipe beside NVFP4 GEMMs, config_common_fp8attn.sh's NVTE_DPA_FP8_FORMAT /
NVTE_DPA_FP8DS_* -> fp8_attention_recipe delayed), TP communication overlap, and CUDA graphs (full-
iteration graphs -> cuda_graphs full_iteration; per-layer graphs, LAYER_CUDA_GRAPH or Megatron-
Core's "full" scope, count as none, as pipesim counts graphs of some modules), and from v3.1 on the
NCCL CTA caps of every communicator (MEGATRON_CORE_*_MAX_CTAS, then
conf/nccl/custom_communicator_cta.yaml: dp / dp_cp 8, tp 8, cp 1, pp 2 -> nccl_max_ctas) - except in
v5.1, whose config_common.sh also exports NCCL_MIN_CTAS=16 and NCCL_MAX_CTAS=32, which NCCL lets
override every communicator's config (src/init.cc since 2.17: "Comm config maxCTAs reset to
NCCL_MAX_CTAS"): 32 for all. Transformer Engine's norm SM margin (NVTE_FWD/BWD_LAYERNORM_SM_MARGIN ->
norm_sm_margin: 4 in v3.0, 8 from v3.1 to v5.0, 16 in v5.1), unless the config runs cuDNN's norms
(NVTE_NORM_FWD/BWD_USE_CUDNN=1, v5.1's 405B: no TE norm kernel to wait). Llama 3.1 405B splits its layers with the embedding and the loss
counted as pipeline layers (ASYM_PP_EMBED / ASYM_PP_LOSS -> embedding_loss_split).
Stated by the benchmark or the shared configs, set once for the family: no activation recompute
(ACT_CKPT_* null), no dropout (GPT-3's custom.yaml hidden/attention_dropout 0.0; Llama's providers),
sequence parallelism with TP (SEQ_PARALLEL default True), the distributed optimizer (ZeRO-1) with
overlapped gradient reduce-scatter and parameter all-gather, gradients reduced in BF16 (GPT-3: Apex
distributed_fused_adam grad_sync_dtype bf16; Llama: pretrain.py MegatronMixedPrecision
grad_reduce_in_fp32=False), the interleaved schedule's P2P overlapped (overlap_p2p_comm True,
batch_p2p_comm False), ring context parallelism (Transformer Engine's default p2p exchange).
Gradient buckets: GPT-3's BUCKET_CAP_MB (Apex distributed_fused_adam: 100 MiB in v3.x, 200 from
v4.0), v5.1's Megatron DDP bucket_size (134217728 parameters, the 8B's BUCKET_SIZE 768000000); v5.0
sets bucket_size 200, i.e. a bucket per parameter tensor, which pipesim cannot express: Megatron's
default bucket there. Models: GPT-3 175B as NeMo's (96 x 12288, 96 heads, 4h GeLU MLP, LayerNorm -
layernorm1p costs the same -, biases, learned positions, tied embeddings, vocab 50304 as nemo2407's
GPT-3); Llama 3.1 405B with the Mixtral 8x22B tokenizer the benchmark swaps in (README: "we replace
the paper's TikTokenizer with the Mixtral 8x22b tokenizer", vocab 32768); Llama 3.1 8B with its own
tokenizer (the llama3-8b preset at 8192 tokens). The Llama rows' loss runs fused
(cross_entropy_loss_fusion True; the 8B's CE_FUSION_IMPL te).
The llama2_70b_lora rows (family mlperflora) add what train.py and the peft yaml set: the LoRA
adapters (rank 16 on linear_qkv and linear_proj, dropout 0.1, a2a_experimental -> lora_*), the CP
exchange (cp_comm_type: a2a from v4.1's B200 preview on, TE's p2p ring before -> cp_comm), the
unfused loss (cross_entropy_loss_fusion False -> cross_entropy megatron) and the FP8 activation
store (FP8_ACTIVATION / FP8_ACT -> fp8_activation).
Assumptions where a script sourced by the config is not published (config_common_blackwell.sh of the
B200 GPT-3 and the v5.0 GB200 rows): the recipe the visible configs and yaml defaults give (delayed
scaling). GB200 / GB300 runs: one NVLink domain of the largest multiple of 4 GPUs <= 72 dividing the
run, as for the Megatron-Bridge families.
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.scenario.stage_split import embedding_loss_split
from pipesim.whatif.families import NEMO_MODELS, mapped, megatron_bucket_MB, megatron_p2p_sync, unknown_model
from pipesim.whatif.validation_bridge import BRIDGE_SYSTEMS, node_system

# published system -> (pipesim system preset, GPUs per node): the Megatron-Bridge families' table
# and the H200 nodes of Nebius's runs (8x H200-SXM 141 GB per node, its system JSON)
MLPERF_SYSTEMS = dict(BRIDGE_SYSTEMS, **{"DGX-H200": ("dgx-h200", 8)})
MLPERF_MODELS = {
    "gpt3-175b": dict(NEMO_MODELS["GPT3-175B"], dropout=False),
    "llama3.1-405b": {"preset": "llama3.1-405b", "vocab_size": 32768, "dropout": False},
    "llama3.1-8b": {"preset": "llama3-8b", "dropout": False},
    "llama2-70b": {"preset": "llama2-70b", "dropout": False},      # llama2_70b_lora's base model
}
# precision -> the recipes a row may name
MLPERF_PRECISIONS = {"fp8": ("delayed", "tensorwise"), "fp4": ("nvfp4",)}
MLPERF_GRAPHS = {"none": "none", "per_layer": "none", "full_iteration": "full_iteration"}
# models whose layers the submissions split with the embedding and the loss as pipeline layers
ASYM_PIPELINE_SPLIT = ("llama3.1-405b",)


def mlperf_scenario(case) -> dict:
    c, cid = case.raw, case.id
    name, par, hw, tr = c["model"]["name"], c["parallel"], c["hardware"], c["training"]
    if name not in MLPERF_MODELS:
        raise unknown_model(cid, name)
    model = dict(MLPERF_MODELS[name], name=cid, seq_length=int(c["model"]["seq_len"]))
    preset, per_node = mapped(MLPERF_SYSTEMS, hw["system"], cid, "hardware.system", "has no system preset")
    recipes = mapped(MLPERF_PRECISIONS, tr["precision"], cid, "training.precision")
    if tr["recipe"] not in recipes:
        raise ScenarioError(f"{cid}: training.recipe {tr['recipe']!r} is not a {tr['precision']} recipe; "
                            f"known: {', '.join(recipes)}")
    graphs = mapped(MLPERF_GRAPHS, tr["cuda_graphs"], cid, "training.cuda_graphs")
    n = int(hw["num_gpus"])
    tp, pp, vp, cp = (int(par[k]) for k in ("tp", "pp", "vp", "cp"))
    mbs, gbs = int(par["micro_batch"]), int(par["global_batch"])
    if n % (tp * pp * cp):
        raise ScenarioError(f"{cid}: tp({tp})·pp({pp})·cp({cp}) does not divide {n} GPUs")
    dp = n // (tp * pp * cp)
    if gbs % (dp * mbs):
        raise ScenarioError(f"{cid}: parallel.global_batch {gbs} is not a multiple of data-parallel size {dp} x "
                            f"micro-batch {mbs}")
    system = node_system(cid, hw["system"], preset, per_node, n)
    parallel = {"tensor": tp, "pipeline": pp, "data": dp, "sequence_parallel": tp > 1, "virtual_stages": vp}
    if cp > 1:      # Transformer Engine's p2p exchange unless the config names another (cp_comm_type)
        parallel.update(context=cp, context_mode=par.get("cp_comm", "ring"))
    if name in ASYM_PIPELINE_SPLIT and pp * vp > 1:
        from pipesim.presets.models import MODELS
        parallel["layers_per_stage"] = embedding_loss_split(int(MODELS[model["preset"]]["num_layers"]), pp * vp)
    training = {"micro_batch_size": mbs, "global_batch_size": gbs,
                "schedule": "interleaved" if vp > 1 else "1f1b", "recompute": "none", "precision": "fp8",
                "fp8_recipe": tr["recipe"], "fp8_param_gather": bool(tr["fp8_params"]),
                "fp8_attention": bool(tr["fp8_attention"]), "attention": "flash", "zero_stage": 1,
                "overlap_grad_reduce": True, "overlap_param_gather": True,
                "overlap_tp_comm": bool(tr["tp_comm_overlap"]) and tp > 1, "tp_grad_overlap": True,
                "grad_reduce_in_fp32": False,
                "grad_bucket_MB": bucket_MB(tr, dp * cp), "p2p_sync": megatron_p2p_sync(vp, 2024),
                "cuda_graphs": graphs}
    if tr.get("nccl_max_ctas"):
        training["nccl_max_ctas"] = dict(tr["nccl_max_ctas"])
    if "norm_sm_margin" in tr and not tr.get("cudnn_norms"):      # cuDNN's norms: not TE's kernels
        training["norm_sm_margin"] = int(tr["norm_sm_margin"])
    if tr.get("fp8_attention_recipe"):       # FP8 attention beside NVFP4 GEMMs (NVTE_DPA_FP8_RECIPE)
        training["fp8_attention_recipe"] = tr["fp8_attention_recipe"]
    if name != "gpt3-175b":
        training["cross_entropy"] = tr.get("cross_entropy", "te")
    if tr.get("fp8_activation"):      # FP8_ACTIVATION / FP8_ACT -> activation_func_fp8_input_store
        training["fp8_activation_input"] = True
    if "lora" in tr:             # llama2_70b_lora: the adapters train.py builds
        lora = tr["lora"]
        training.update(lora_rank=int(lora["rank"]), lora_targets=list(lora["targets"]),
                        lora_dropout=float(lora["dropout"]), lora_a2a=bool(lora["a2a"]))
    return {"model": model, "system": system, "parallel": parallel, "training": training}


def bucket_MB(tr: dict, dp: int) -> float:
    """The gradient bucket in MB of BF16 gradients: GPT-3's Apex DistributedFusedAdam
    `bucket_cap_mb` (MiB; BUCKET_CAP_MB), or Megatron-Core DDP's `bucket_size` in parameters
    (BUCKET_SIZE), else Megatron's default for the gradient group of `dp` ranks (data x context:
    get_data_parallel_world_size(with_context_parallel=True))."""
    if "bucket_cap_mb" in tr:
        return float(tr["bucket_cap_mb"]) * 2**20 / 1e6
    if "bucket_params" in tr:
        return float(tr["bucket_params"]) * 2 / 1e6
    return megatron_bucket_MB(dp, grad_bytes=2.0)
