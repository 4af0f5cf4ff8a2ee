"""Held-out family titan2024 (scenarios/validation/heldout.yaml): torchtitan's FSDP2 runs of
Llama 3 8B/70B and Llama 2 13B/70B on 64 A100 80GB (pytorch/torchtitan docs/performance.md at
commit 0413364, 2024). Test only: nothing in pipesim is set from these rows. Metric: tokens/s per
GPU (torchtitan's WPS with no model parallelism).

Mapped as published: model, sequence length, 64 GPUs, local batch, FSDP over all 64 (ZeRO-3 over
data 64), BF16, and the activation checkpointing: "no" -> recompute none, "full" -> full,
"selective layer" (torchtitan checkpoints every 2nd layer) -> full with recompute_num_layers =
layers / 2 (the same recompute time and kept bytes as Megatron's block method); "selective op"
(torchtitan's per-op save list) -> recompute selective_op (pipesim/costs/stage.py
selective_op_recompute).
Assumptions the document does not state, made once for the family (torchtitan's defaults of the
time, torchtitan/config_manager.py and train_configs/*.toml): FSDP2 prefetches the next layer's
all-gather (zero3_prefetch), reduces gradients in fp32 (mixed_precision_reduce float32), AdamW,
SDPA flash attention, no dropout, one optimizer step per local batch (no gradient accumulation),
and eager PyTorch ops (kernel_fusion eager: the 64-A100 presets train_configs/llama2_13b.toml and
llama3_8b.toml set norm_type "rmsnorm", the unfused RMSNorm, and compile = false).
The cluster's network is not stated: the dgx-a100-80gb preset (8x 200 Gb/s HDR per node) is used.
"""
from __future__ import annotations

from pipesim.errors import ScenarioError

TITAN_MODELS = ("llama3-8b", "llama3-70b", "llama2-13b", "llama2-70b")
# torchtitan activation_checkpoint mode -> (training.recompute, layers divisor for block recompute)
TITAN_AC = {"no": ("none", None), "full": ("full", None), "selective layer": ("full", 2),
            "selective op": ("selective_op", None)}


def titan_scenario(case) -> dict:
    c, cid = case.raw, case.id
    name, ac = c["model"]["name"], c["training"]["activation_checkpointing"]
    if name not in TITAN_MODELS:
        raise ScenarioError(f"{cid}: model.name {name!r} has no preset; known: {', '.join(TITAN_MODELS)}")
    if ac not in TITAN_AC:
        raise ScenarioError(f"{cid}: skipped: activation checkpointing {ac!r} has no "
                            f"pipesim equivalent; known: {', '.join(TITAN_AC)}")
    n, fsdp, local = int(c["hardware"]["num_gpus"]), int(c["parallel"]["fsdp"]), int(c["parallel"]["local_batch"])
    if fsdp != n or n % 8:
        raise ScenarioError(f"{cid}: parallel.fsdp {fsdp} over {n} GPUs: only FSDP over every GPU of whole "
                            f"8-GPU nodes is mapped")
    recompute, every = TITAN_AC[ac]
    training = {"micro_batch_size": local, "global_batch_size": local * n, "schedule": "1f1b",
                "recompute": recompute, "precision": "bf16", "attention": "flash", "kernel_fusion": "eager",
                # FSDP2 wraps every TransformerBlock with fully_shard (torchtitan parallelize_llama):
                # one all-gather and one reduce-scatter per layer, and FSDP2's copy-out of each gather
                "zero_stage": 3, "zero3_collectives": "fsdp2",
                "zero3_prefetch": True, "overlap_grad_reduce": True, "grad_reduce_in_fp32": True}
    if every:
        from pipesim.presets.models import MODELS
        training["recompute_num_layers"] = int(MODELS[name]["num_layers"]) // every
    return {"model": {"preset": name, "name": cid, "seq_length": int(c["model"]["seq_len"]), "dropout": False},
            "system": {"preset": "dgx-a100-80gb", "num_nodes": n // 8},
            "parallel": {"tensor": 1, "pipeline": 1, "data": n},
            "training": training}
