"""Held-out families titan2024, titan2025, titan2412 and titan2506 (scenarios/validation/heldout.yaml):
torchtitan's FSDP2 runs of Llama 3 8B/70B and Llama 2 13B/70B on 64 A100 80GB
(pytorch/torchtitan docs/performance.md at commit 0413364, 2024), and of Llama 3.1 8B on 32 / 64 H200
with torch.compile and torchao's Float8 linears (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md,
June 2025). Test only: nothing in pipesim is set from these rows. Metric: tokens/s per GPU
(torchtitan's WPS with no model parallelism).

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
titan2412 (December 2024, 8-512 H100 on Meta's Grand Teton; the same keys plus model parallelism, as
torchtitan 9dec370 applies it): `tp` -> tensor parallelism with sequence parallelism (torchtitan's
parallelize_llama: Colwise / Rowwise linears, SequenceParallel norms) and the vocabulary-parallel
loss, each column-parallel linear keeping its all-gathered input (tp_keeps_gathered_input: DTensor
redistributes it before the linear); `async_tp` -> overlap_tp_comm; `cp` -> context parallelism
with PyTorch's all-gather K/V rotation (context_parallel_rotate_method "allgather", the default
then) on load-balanced causal chunks, FSDP sharding over data x context (torchtitan's dp_cp mesh); `pp` -> the pipeline with
`pipeline_parallel_microbatches` unset, i.e. as many micro-batches as pipeline ranks
(pipelining_utils.build_pipeline_schedule), one stage per rank for 1F1B and two for
Interleaved1F1B, layers split as generate_split_points does (`titan_split`), and FSDP2 not
resharding after the forward (parallelize_llama.apply_fsdp: reshard_after_forward False with PP).
The GPU: H100 SXM with 96 GB of HBM2e at 2.4 TB/s (as stated) in the dgx-h100 preset's node; its
500 W power limit is not modelled (the preset's sustained tensor-core rate is the 700 W part's), so
these rows' throughput is expected optimistic; their peak memory does not depend on it.
titan2506 (June 2025, the same hosts): torchtitan's async TP benchmark, Llama 3.1 70B on 256 and 8B
on 64 with FSDP x TP 8, vanilla and async TP, BF16 and Float8 tensorwise - the titan2412 keys.
Every torchtitan here predates 2025-07-28 (commit 83e6941), so its embedding and output layer are
in FSDP2's root unit (training.fsdp2_ends_in_root; pipesim/costs/workspace.py). The loss is
F.cross_entropy on fp32 logits (over TP, PyTorch's loss_parallel), compiled with the model in the
2025 rows (titan2025, titan2506: components/loss.py build_cross_entropy_loss at 820504e) only.
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.presets.models import MODELS
from pipesim.whatif.families import mapped, unknown_model
from pipesim.whatif.validation_generic import ACTIVATION_CHECKPOINTING

TITAN_MODELS = ("llama3-8b", "llama3-70b", "llama2-13b", "llama2-70b", "llama3.1-405b")
# Published GPU -> system preset (pipesim/presets/systems.py)
TITAN_SYSTEMS = {"A100-SXM4-80GB": "dgx-a100-80gb", "H200-SXM": "dgx-h200",
                 "H100-SXM-96GB-HBM2e (500 W)": "dgx-h100"}
# GPU overrides a published part needs beyond its node preset (the benchmark's own hardware section)
TITAN_GPUS = {"H100-SXM-96GB-HBM2e (500 W)": {"memory_GiB": 96, "hbm_bandwidth_GBps": 2400}}
# torch.distributed.pipelining schedule -> (training.schedule, stages per pipeline rank)
TITAN_PP = {"1F1B": ("1f1b", 1), "Interleaved1F1B": ("interleaved", 2)}
TITAN_FLOAT8 = ("tensorwise",)


def titan_scenario(case) -> dict:
    c, cid = case.raw, case.id
    name = c["model"]["name"]
    if name not in TITAN_MODELS:
        raise unknown_model(cid, name)
    recompute, every = mapped(ACTIVATION_CHECKPOINTING, c["training"]["activation_checkpointing"], cid,
                              "skipped: activation checkpointing", "has no pipesim equivalent")
    tr_raw = c["training"]
    system = mapped(TITAN_SYSTEMS, c["hardware"]["gpu"], cid, "hardware.gpu", "has no system preset")
    float8 = tr_raw.get("float8")
    if float8 is not None:
        mapped(dict.fromkeys(TITAN_FLOAT8), float8, cid, "training.float8")
    par = c["parallel"]
    n, fsdp, local = int(c["hardware"]["num_gpus"]), int(par["fsdp"]), int(par["local_batch"])
    tp, pp, cp = (int(par.get(k, 1)) for k in ("tp", "pp", "cp"))
    if fsdp * tp * pp * cp != n or n % 8:
        raise ScenarioError(f"{cid}: parallel: fsdp({fsdp})·tp({tp})·pp({pp})·cp({cp}) over {n} GPUs: only "
                            f"layouts filling whole 8-GPU nodes are mapped")
    schedule, per_rank = mapped(TITAN_PP, par.get("pp_schedule", "1F1B"), cid, "parallel.pp_schedule")
    # no gradient accumulation: one local batch per step, cut into `pp` micro-batches under PP
    if local % pp:
        raise ScenarioError(f"{cid}: parallel.local_batch {local} does not split into {pp} pipeline micro-batches")
    compiled = bool(tr_raw.get("compile"))
    training = {"micro_batch_size": local // pp, "global_batch_size": local * fsdp, "schedule": schedule,
                "recompute": recompute, "precision": "bf16", "attention": "flash",
                **torchtitan_stack(compiled, tp, pp, case.suite in ("titan2025", "titan2506")),
                "overlap_tp_comm": bool(tr_raw.get("async_tp")),
                # every torchtitan here predates 2025-07-28: embedding and output in the root unit
                "fsdp2_ends_in_root": True}
    if float8:
        training.update(precision="fp8", fp8_recipe=float8, fp8_param_gather=bool(tr_raw.get("fsdp_float8_all_gather")))
    if every:
        training["recompute_num_layers"] = int(MODELS[name]["num_layers"]) // every
    parallel = {"tensor": tp, "pipeline": pp, "data": fsdp, "sequence_parallel": tp > 1}
    if cp > 1:
        parallel.update(context=cp, context_mode="allgather", context_layout="balanced")
    if pp > 1:
        parallel.update(virtual_stages=per_rank,
                        layers_per_stage=titan_split(int(MODELS[name]["num_layers"]), pp * per_rank))
    system_keys = {"preset": system, "num_nodes": n // 8}
    if c["hardware"]["gpu"] in TITAN_GPUS:
        system_keys["gpu"] = dict(TITAN_GPUS[c["hardware"]["gpu"]])
    return {"model": {"preset": name, "name": cid, "seq_length": int(c["model"]["seq_len"]), "dropout": False},
            "system": system_keys, "parallel": parallel, "training": training}


def torchtitan_stack(compiled: bool, tp: int, pp: int, loss_compiled: bool) -> dict:
    """The training keys of torchtitan's FSDP2 stack (module docstring); `loss_compiled`: the loss
    compiled with the model, as torchtitan does from 2025."""
    return {"kernel_fusion": "fused" if compiled else "eager", "attention_kernel": "fa2",
            # F.cross_entropy(pred.float(), ...), torchtitan's loss; compiled with the model from
            # 2025 (components/loss.py at e7c0cae), not at 9dec370 ("compiling loss function
            # causes CUDA errors, turning off for now", train.py)
            "cross_entropy": "torch_compiled" if compiled and loss_compiled else "torch",
            # FSDP2 wraps every TransformerBlock with fully_shard (torchtitan parallelize_llama):
            # one all-gather and one reduce-scatter per layer, and FSDP2's copy-out of each gather
            "zero_stage": 3, "zero3_collectives": "fsdp2",
            "zero3_prefetch": True, "overlap_grad_reduce": True, "grad_reduce_in_fp32": True,
            # with PP, FSDP2 keeps each stage's weights gathered from forward to backward
            "reshard_after_forward": pp == 1,
            # DTensor TP: each column-parallel linear keeps its all-gathered input
            "tp_keeps_gathered_input": tp > 1}


def titan_split(layers: int, stages: int) -> list[int]:
    """Layers per pipeline stage as torchtitan 9dec370 splits them when no split points are given
    (pipelining_utils.generate_split_points): `layers // stages` each, one more for as many middle
    stages as the remainder covers (the first stage never gets one), the last stage what is left."""
    base, extra = divmod(layers, stages)
    sizes = [base]
    for _ in range(stages - 2):
        take = base + (1 if extra > 0 else 0)
        extra -= take - base
        sizes.append(take)
    return sizes + [layers - sum(sizes)]
