"""Held-out family automodel (scenarios/validation/heldout.yaml): the NeMo AutoModel performance
summary, pre-training on DGX-H100 in BF16 (github:NVIDIA-NeMo/Automodel docs/performance-summary.md):
MoE models and Llama 3 70B trained by PyTorch's FSDP2 with Transformer Engine modules and DeepEP,
a stack other than Megatron-Core's. Test only: nothing in pipesim is set from these rows. Metric:
tokens/s per GPU.

Mapped as published: #GPUs, global and local batch, gradient accumulation, sequence length, PP,
VP, CP, EP and FSDP over the data-parallel group (ZeRO-3 with FSDP2's per-layer collectives and
copies: the MoE parallelizer wraps every block with fully_shard, experts excluded when EP > 1 -
nemo_automodel/components/moe/parallelizer.py apply_fsdp). From each row's benchmark config (the
commit is in the row): activation checkpointing (a checkpoint_wrapper per block -> recompute
full), reshard_after_forward, the DeepEP dispatcher, PyTorch's context parallelism (its default
all-gather rotation -> context_mode allgather).
Stack settings the configs imply, the same for every row: FSDP2 prefetches the next block's
gather; gradients reduce in fp32 for the MoE models (the MoE parallelizer's MixedPrecisionPolicy
reduce_dtype float32) and in bf16 for the dense one (FSDP2Manager's default policy); Adam; loss
by F.cross_entropy (MaskedCrossEntropy; on the 16-bit logits where the config sets fp32_upcast
false, the settings' loss_fp32_upcast: every MoE row); forced-balanced routing (fake_balanced_gate); the row's
attention kernel (ATTENTION_KERNELS); no dropout; no multi-token prediction (the models are the
Hugging Face ones); shared experts on a side stream beside the routed path
(moe_shared_expert_overlap; nemo_automodel/components/moe/layers.py MoE.forward).
With pipeline parallelism each gradient-accumulation step is one run of
torch.distributed.pipelining's interleaved 1F1B schedule over the local batch (its own fill and
drain), so one such run is simulated and the tokens/s are its: the optimizer step is then counted
once per accumulation step rather than once per step (a few ms in a step of seconds).
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.presets.models import MODELS
from pipesim.scenario.stage_split import embedding_loss_split
from pipesim.whatif.families import unknown_model

# Published model names -> pipesim model presets (pipesim/presets/models.py).
AUTOMODEL_MODELS = {"DeepSeek V3 671B": "deepseek-v3", "Kimi K2": "kimi-k2", "Qwen3 MoE 30B": "qwen3-30b-a3b",
                    "GPT-OSS 20B": "gpt-oss-20b", "GPT-OSS 120B": "gpt-oss-120b",
                    "Nemotron V3 Super 120B (26.02)": "nemotron-3-super",
                    "Nemotron V3 Nano 30B (26.02)": "nemotron-3-nano", "Llama3 70B": "llama3-70b"}
SETTINGS = ("activation_checkpointing", "reshard_after_forward", "pp_microbatch_size", "dispatcher", "context_parallel",
            "attention", "loss_fp32_upcast")
# The attention backend of a row -> training.attention_kernel: Transformer Engine's choice (cuDNN on
# Hopper); PyTorch SDPA's flash backend is FlashAttention-2; FlexAttention compiles its own Triton
# kernel, reported at 85-90 % of FlashAttention-2 (PyTorch blog "FlexAttention", 2024-08): costed as
# FlashAttention-2, the nearest table pipesim has.
ATTENTION_KERNELS = {"te": "auto", "sdpa": "fa2", "flex": "fa2"}


def automodel_scenario(case) -> dict:
    c, cid = case.raw, case.id
    name, par, st = c["model"]["name"], c["parallel"], c.get("settings", {})
    if name not in AUTOMODEL_MODELS:
        raise unknown_model(cid, name)
    unknown = sorted(set(st) - set(SETTINGS))
    if unknown:
        raise ScenarioError(f"{cid}: settings.{unknown[0]} is not mapped; known: {', '.join(SETTINGS)}")
    n = int(c["hardware"]["num_gpus"])
    pp, vp, cp, ep, fsdp = (int(par[k]) for k in ("pp", "vp", "cp", "ep", "fsdp"))
    gbs, lbs, ga = int(par["global_batch"]), int(par["local_batch"]), int(par["grad_accumulation"])
    if n % 8 or n % (pp * cp):
        raise ScenarioError(f"{cid}: {n} GPUs: expected whole 8-GPU nodes divisible by pipeline({pp})·context({cp})")
    dp = n // (pp * cp)
    if fsdp != dp or gbs != dp * lbs * ga:
        raise ScenarioError(f"{cid}: parallel: expected fsdp = data-parallel size {dp} and global_batch = "
                            f"{dp}·local_batch·grad_accumulation, got fsdp {fsdp}, global_batch {gbs}")
    preset = AUTOMODEL_MODELS[name]
    parallel = {"tensor": 1, "pipeline": pp, "data": dp, "virtual_stages": vp}
    if ep > 1:
        parallel["expert"] = ep
    if cp > 1:
        parallel.update(context=cp, context_mode=st.get("context_parallel", "allgather"))
    if pp > 1:
        layers = int(MODELS[preset]["num_layers"])
        if layers % (pp * vp):
            parallel["layers_per_stage"] = embedding_loss_split(layers, pp * vp)
        micro, batch = int(st.get("pp_microbatch_size", 1)), dp * lbs      # one schedule run per GA step
    else:
        micro, batch = lbs, gbs
    training = {"micro_batch_size": micro, "global_batch_size": batch,
                "schedule": "interleaved" if vp > 1 else "1f1b",
                "recompute": "full" if st.get("activation_checkpointing") else "none",
                "precision": "bf16", **automodel_stack(st, ep, bool(MODELS[preset].get("num_shared_experts")), cid)}
    return {"model": {"preset": preset, "name": cid, "seq_length": int(c["model"]["seq_len"]), "dropout": False,
                      "mtp_layers": 0},
            "system": {"preset": "dgx-h100", "num_nodes": n // 8},
            "parallel": parallel, "training": training}


def automodel_stack(settings: dict, ep: int, shared_experts: bool, cid: str) -> dict:
    """The training keys of AutoModel's FSDP2 stack (module docstring) for a run's `settings`
    (attention, loss_fp32_upcast, reshard_after_forward, dispatcher) with expert parallelism `ep`."""
    attention = settings.get("attention", "te")
    if attention not in ATTENTION_KERNELS:
        raise ScenarioError(f"{cid}: settings.attention {attention!r}: expected one of {', '.join(ATTENTION_KERNELS)}")
    out = {"attention": "flash", "attention_kernel": ATTENTION_KERNELS[attention],
           # MaskedCrossEntropy: F.cross_entropy on logits.float(), or on the 16-bit logits with
           # the config's fp32_upcast false (every MoE row's)
           "optimizer": "adam", "cross_entropy": "torch" if settings.get("loss_fp32_upcast", True) else "torch_16bit",
           "zero_stage": 3, "zero3_collectives": "fsdp2", "zero3_prefetch": True,
           "reshard_after_forward": bool(settings.get("reshard_after_forward", True)),
           "overlap_grad_reduce": True, "grad_reduce_in_fp32": ep > 1}
    if ep > 1:
        out.update(moe_dispatcher=settings.get("dispatcher", "alltoall"), moe_routing="balanced",
                   moe_shared_expert_overlap=shared_experts)
    return out
