"""Held-out families titan2024 and titan2025 (scenarios/validation/heldout.yaml): torchtitan's FSDP2
runs of Llama 3 8B/70B and Llama 2 13B/70B on 64 A100 80GB (pytorch/torchtitan docs/performance.md
at commit 0413364, 2024), and of Llama 3.1 8B on 32 / 64 H200 with torch.compile and torchao's
Float8 linears (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md, June 2025). Test only:
nothing in pipesim is set from these rows. Metric: tokens/s per GPU (torchtitan's WPS with no
model parallelism).

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
titan2025 (the H200 rows state their command): `--training.compile` -> fused kernels (Inductor)
with attention still PyTorch SDPA's FlashAttention-2 (attention_kernel fa2); `--model.converters
quantize.linear.float8` -> precision fp8 with torchao's default tensorwise (dynamic) scaling, the
output layer kept in BF16 (filter_fqns ["output"], as pipesim keeps the head);
`enable_fsdp_float8_all_gather` -> fp8_param_gather (weights gathered in FP8);
`force_recompute_fp8_weight_in_bwd` (the weight cast re-run in the backward) is not modelled. H200
nodes of 8 with 400 Gb/s per GPU, as stated: the dgx-h200 preset.
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.whatif.families import mapped

TITAN_MODELS = ("llama3-8b", "llama3-70b", "llama2-13b", "llama2-70b")
# Published GPU -> system preset (pipesim/presets/systems.py)
TITAN_SYSTEMS = {"A100-SXM4-80GB": "dgx-a100-80gb", "H200-SXM": "dgx-h200"}
TITAN_FLOAT8 = ("tensorwise",)
# torchtitan activation_checkpoint mode -> (training.recompute, layers divisor for block recompute)
TITAN_AC = {"no": ("none", None), "full": ("full", None), "selective layer": ("full", 2),
            "selective op": ("selective_op", None)}


def titan_scenario(case) -> dict:
    c, cid = case.raw, case.id
    name = c["model"]["name"]
    mapped(dict.fromkeys(TITAN_MODELS), name, cid, "model.name", "has no preset")
    recompute, every = mapped(TITAN_AC, c["training"]["activation_checkpointing"], cid,
                              "skipped: activation checkpointing", "has no pipesim equivalent")
    tr_raw = c["training"]
    system = mapped(TITAN_SYSTEMS, c["hardware"]["gpu"], cid, "hardware.gpu", "has no system preset")
    float8 = tr_raw.get("float8")
    if float8 is not None:
        mapped(dict.fromkeys(TITAN_FLOAT8), float8, cid, "training.float8")
    n, fsdp, local = int(c["hardware"]["num_gpus"]), int(c["parallel"]["fsdp"]), int(c["parallel"]["local_batch"])
    if fsdp != n or n % 8:
        raise ScenarioError(f"{cid}: parallel.fsdp {fsdp} over {n} GPUs: only FSDP over every GPU of whole "
                            f"8-GPU nodes is mapped")
    compiled = bool(tr_raw.get("compile"))
    training = {"micro_batch_size": local, "global_batch_size": local * n, "schedule": "1f1b",
                "recompute": recompute, "precision": "bf16", "attention": "flash",
                "kernel_fusion": "fused" if compiled else "eager", "attention_kernel": "fa2",
                "cross_entropy": "torch",          # F.cross_entropy(pred.float(), ...) in torchtitan's loss
                # FSDP2 wraps every TransformerBlock with fully_shard (torchtitan parallelize_llama):
                # one all-gather and one reduce-scatter per layer, and FSDP2's copy-out of each gather
                "zero_stage": 3, "zero3_collectives": "fsdp2",
                "zero3_prefetch": True, "overlap_grad_reduce": True, "grad_reduce_in_fp32": True}
    if float8:
        training.update(precision="fp8", fp8_recipe=float8, fp8_param_gather=bool(tr_raw.get("fsdp_float8_all_gather")))
    if every:
        from pipesim.presets.models import MODELS
        training["recompute_num_layers"] = int(MODELS[name]["num_layers"]) // every
    return {"model": {"preset": name, "name": cid, "seq_length": int(c["model"]["seq_len"]), "dropout": False},
            "system": {"preset": system, "num_nodes": n // 8},
            "parallel": {"tensor": 1, "pipeline": 1, "data": n},
            "training": training}
