"""Held-out family foundry (scenarios/validation/heldout.yaml): MosaicML's MPT throughput tables
(mosaicml/llm-foundry scripts/train/benchmarking/README.md; A100 80GB / 40GB @ ef350d9e6, July 2023;
H100 BF16 and FP8 @ b2a43a147, October 2023; H100 BF16 at 128-512 GPUs @ 5e85bd62d, January 2024).
MPT 125M-70B, 8-512 GPUs, sequences of 512 to 65,536 tokens, all under Composer's PyTorch FSDP. Test
only: nothing in pipesim is set from these rows. Metric: tokens/s per GPU (the table's T/s over its
GPU count).

Mapped as the tables state it, row by row: the model size and sequence length, the GPU, the GPU
count (FSDP over all of them, no tensor or pipeline parallelism), micro-batch, global batch (the
gradient accumulation is global / (micro-batch x GPUs); Composer would also run a last, smaller
micro-batch when they do not divide, which no row does and the converter refuses), the sharding
strategy (FULL_SHARD -> ZeRO-3 gathering each block again for its backward; SHARD_GRAD_OP -> ZeRO-3
keeping it gathered from forward to backward, reshard_after_forward false), FSDP's mixed-precision
mode (DEFAULT reduces gradients in fp32, PURE in BF16; Composer's get_mixed_precision), activation
checkpointing (each MPTBlock: full recompute), the precision (amp_bf16 / bf16 -> bf16; amp_fp8 ->
Transformer Engine FP8 linears with its delayed scaling, TE v0.10 as the scripts install it).
Assumed once for the family, from llm-foundry's code and configs of the tables' commits: the MPT of
scripts/train/yamls/pretrain/mpt-<size>.yaml (its d_model, n_heads, n_layers and vocabulary are in
each row; a 4x GELU MLP; learned positions over max_seq_len = the row's sequence, as the table's
NumParams counts them; no biases; tied embeddings; no dropout; Composer's low-precision LayerNorm),
PyTorch eager ops (kernel_fusion eager; no torch.compile in these scripts), the loss as MPT's
default loss_fn fused_crossentropy runs it, flash-attn's CrossEntropyLoss on the 16-bit logits
(cross_entropy flash_attn; llmfoundry/models/mpt/modeling_mpt.py, which raises when flash-attn is
missing rather than fall back; with torch's fp32 loss 56 of the rows, all of which ran, were out of
memory), Composer's two train metrics after each micro-batch's backward (LanguageCrossEntropy and
LanguagePerplexity, each an F.cross_entropy over the logits under autocast: Trainer.
_eval_train_metrics, composer v0.15-0.17; llm-foundry's use_train_metrics defaults true:
logit_metric_passes 2), FSDP wrapping each MPTBlock (one all-gather and one reduce-scatter per
block), prefetching the next block's gather (backward_prefetch BACKWARD_PRE), and decoupled LionW
(one fp32 momentum per parameter, read and written once a step like SGD's momentum: optimizer sgd).
The network: 8 x 200 Gb/s per A100 node as the tables' titles state (the dgx-a100 presets); the H100
tables name none (the dgx-h100 preset, 8 x 400 Gb/s).
Attention: attn_impl triton (submit_benchmarks.py's default, MPT's Triton FlashAttention,
flash_attn_triton.py: attention_kernel fa-triton, timed on the FlashAttention-2 paper's Fig. 4 bars of
that kernel, A100; on H100 at its A100 ratio to FA2, presets/attention_tables.py) or flash (FlashAttention-2,
gpu-flash2; the large-scale sweep.py's choice for 1B, 3B, 7B and 70B: fa2).
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.whatif.families import mapped

FOUNDRY_SYSTEMS = {"a100_80gb": "dgx-a100-80gb", "a100_40gb": "dgx-a100-40gb", "h100_80gb": "dgx-h100"}
# Composer FSDP sharding strategy -> reshard_after_forward
SHARDING = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}
# Composer FSDP mixed_precision -> gradients reduced in fp32
MIXED_PRECISION = {"DEFAULT": True, "PURE": False}
PRECISION = {"amp_bf16": "bf16", "bf16": "bf16", "amp_fp8": "fp8"}
# llm-foundry attn_impl -> training.attention_kernel
ATTN_IMPL = {"triton": "fa-triton", "flash": "fa2"}


def foundry_scenario(case) -> dict:
    c, cid = case.raw, case.id
    system = mapped(FOUNDRY_SYSTEMS, c["hardware"]["gpu"], cid, "hardware.gpu", "has no system preset")
    par, tr = c["parallel"], c["training"]
    n = int(c["hardware"]["num_gpus"])
    reshard = mapped(SHARDING, par["sharding"], cid, "parallel.sharding")
    fp32_reduce = mapped(MIXED_PRECISION, tr["fsdp_mixed_precision"], cid, "training.fsdp_mixed_precision")
    precision = mapped(PRECISION, tr["precision"], cid, "training.precision")
    kernel = mapped(ATTN_IMPL, tr["attn_impl"], cid, "training.attn_impl")
    if tr.get("activation_cpu_offload"):
        raise ScenarioError(f"{cid}: training.activation_cpu_offload: true is not mapped (no table row uses it)")
    if n % 8:
        raise ScenarioError(f"{cid}: hardware.num_gpus {n}: only whole 8-GPU nodes are mapped")
    micro, batch = int(par["micro_batch"]), int(par["global_batch"])
    if batch % (micro * n):
        raise ScenarioError(f"{cid}: parallel.global_batch {batch} is not a whole number of micro-batches of "
                            f"{micro} on each of {n} GPUs")
    training = {"micro_batch_size": micro, "global_batch_size": batch,
                "precision": precision, "recompute": "full" if tr["activation_checkpointing"] else "none",
                "attention": "flash", "attention_kernel": kernel, "kernel_fusion": "eager",
                "cross_entropy": "flash_attn", "logit_metric_passes": 2, "optimizer": "sgd",
                "zero_stage": 3, "zero3_collectives": "layer", "zero3_prefetch": True,
                "reshard_after_forward": reshard, "overlap_grad_reduce": True, "grad_reduce_in_fp32": fp32_reduce}
    if precision == "fp8":
        training["fp8_recipe"] = "delayed"
    m = c["model"]
    model = {"name": cid, "num_layers": int(m["layers"]), "hidden_size": int(m["hidden"]),
             "num_attention_heads": int(m["heads"]), "seq_length": int(m["seq_len"]),
             "vocab_size": int(m["vocab"]), "activation": "gelu",
             "norm": "layernorm", "position": "learned", "tied_embeddings": True, "bias": False, "dropout": False}
    return {"model": model, "system": {"preset": system, "num_nodes": n // 8},
            "parallel": {"tensor": 1, "pipeline": 1, "data": n}, "training": training}
