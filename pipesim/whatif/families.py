"""Validation families of H100 runs (published.yaml): Megatron-Core r0.8 (BF16) and NeMo 24.07
(FP8). Each case becomes a pipesim scenario from what the source states; what it does not
state is an assumption made once per family, written here and in docs/COSTS.md, never chosen per
case.

mcore-h100  NVIDIA/Megatron-LM README "Training Speed and Scalability" (r0.8.0): GPT models,
            vocab 131072, seq 4096, the flags listed in the case (--overlap-grad-reduce
            --overlap-param-gather --tp-comm-overlap). Metric: model TFLOP/s per GPU as
            Megatron-LM counts it (training.py num_floating_point_operations: 72 B s l h^2 (1 +
            s/6h + V/12lh), no recompute) -- `megatron_flops(s, recompute=False)`.
nemo2407    NeMo performance summary (24.07 container), FP8 on DGX H100. Metric: tokens/s per GPU
            (the published primary figure; independent of how FLOPs are counted).
"""
from __future__ import annotations

from pipesim.errors import ScenarioError

# ---- Megatron-Core r0.8 on H100 ------------------------------------------------------------
# Assumptions (the README states neither): micro-batch 1 (the reading of the table, and
# the smallest that divides every global batch / dp); BF16 (the MFU column implies the 989 TF
# BF16 peak); no activation recompute (Megatron's default).
# Implied by the README's text: "pipeline-parallel communication (enabled by default)" is overlapped,
# which Megatron-Core r0.8 does only under the interleaved schedule (training/arguments.py at
# f2e5db402c sets overlap_p2p_comm False without --num-layers-per-virtual-pipeline-stage: "non-
# interleaved schedule does not support overlapping p2p communication"). The README gives one flag
# set for the whole table, and the only --num-layers-per-virtual-pipeline-stage that divides the
# layers per pipeline rank of every pipelined model is 1 (119B: 92 / 4 = 23 and 462B: 112 / 16 = 7
# layers a rank, both prime): one layer per virtual stage (MCORE_LAYERS_PER_VIRTUAL_STAGE).
# Implied by the stated flags: --tp-comm-overlap needs sequence parallelism and Transformer
# Engine (flash/cuDNN attention); --overlap-param-gather needs the distributed optimizer
# (ZeRO-1). Gradients accumulate and reduce in fp32 (Megatron-LM arguments.py: "bfloat16 requires
# gradient accumulation and all-reduce to be done in fp32"). Model: GPT with a 4h GeLU MLP,
# LayerNorm, biases, untied output layer and dropout 0.1 (Megatron defaults); the label matches: 1.7B = 24·12·2048² + 2·131072·2048.
MCORE_MICRO_BATCH = 1
MCORE_LAYERS_PER_VIRTUAL_STAGE = 1


class UnknownModel(ScenarioError):
    """A family's converter met a model its table has no entry for: the row is read by the generic
    mapping instead (validation._converted), as any new row would be."""


def unknown_model(case_id: str, name) -> UnknownModel:
    return UnknownModel(f"{case_id}: model.name {name!r} is not in this family's table")


def mapped(table, value, case_id: str, key: str, what: str = "is not mapped"):
    """A converter's lookup: table[value], or a one-line error naming the case, the key, the value
    and the known ones."""
    if value not in table:
        raise ScenarioError(f"{case_id}: {key} {value!r} {what}; known: {', '.join(table)}")
    return table[value]


def published_int(value) -> int | None:
    """An integer as a published table gives it: a number, or a text that starts with one
    ('16 (derived: 2048/128)'); None for anything else."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.split() and value.split()[0].isdigit():
        return int(value.split()[0])
    return None


def megatron_p2p_sync(virtual_stages: int, code_year: int) -> bool:
    """Whether Megatron's pipeline P2P is batched and blocking (training.p2p_sync). Megatron-LM's
    2021-22 code sends and receives through one batch_isend_irecv per exchange, waits on it and
    calls torch.cuda.synchronize() (megatron/p2p_communication.py `_communicate`, every schedule);
    Megatron-Core keeps that as batch_p2p_comm + batch_p2p_sync (both default True) for the
    non-interleaved 1F1B and overlaps the interleaved schedule's P2P with compute instead
    (--overlap-p2p-communication, on by default; arguments.py turns it off without virtual stages):
    megatron/core/model_parallel_config.py and p2p_communication.py, r0.8 to 2026."""
    return code_year < 2023 or virtual_stages <= 1


def megatron_bucket_MB(dp: int, grad_bytes: float = 4.0) -> float:
    """Megatron-Core DDP's default gradient bucket, in MB of gradients of `grad_bytes` each (4:
    reduced in fp32, 2: in BF16): max(40M, 1M x dp) parameters, dp the gradient group's size (data
    x context: get_data_parallel_world_size(with_context_parallel=True)), growing with it so that
    each rank's share of a bucket keeps the ring bandwidth-bound (megatron/core/distributed/
    distributed_data_parallel.py, r0.8 and later: bucket_size counts parameters). Not PyTorch
    DDP's 25 MB default: at dp 48 that would be 7.7x more buckets, each paying the ring's latency."""
    return max(40e6, 1e6 * dp) * grad_bytes / 1e6


def mcore_scenario(case) -> dict:
    c = case.raw
    m, par = c["model"], c["parallel"]
    tp, pp, dp = int(par["tp"]), int(par["pp"]), int(par["dp"])
    n = int(c["hardware"]["num_gpus"])
    vp = mcore_virtual_stages(int(m["layers"]), pp)
    return {
        "model": {"name": case.id, "num_layers": m["layers"], "hidden_size": m["hidden"],
                  "num_attention_heads": m["heads"], "seq_length": m["seq_len"], "vocab_size": m["vocab"],
                  "activation": "gelu", "norm": "layernorm", "position": "learned", "tied_embeddings": False,
                  "bias": True, "dropout": True},
        "system": _dgx_h100(n),
        "parallel": {"tensor": tp, "pipeline": pp, "data": dp, "sequence_parallel": tp > 1, "virtual_stages": vp},
        "training": {"micro_batch_size": MCORE_MICRO_BATCH, "global_batch_size": int(par["global_batch"]),
                     "schedule": "interleaved" if vp > 1 else "1f1b", "recompute": "none", "precision": "bf16",
                     "attention": "flash",
                     "zero_stage": 1, "overlap_grad_reduce": True, "overlap_param_gather": True,
                     "overlap_tp_comm": tp > 1, "tp_grad_overlap": True, "grad_reduce_in_fp32": True,
                     "grad_bucket_MB": megatron_bucket_MB(dp), "p2p_sync": megatron_p2p_sync(vp, 2024)},
    }


def mcore_virtual_stages(layers: int, pp: int) -> int:
    """Model chunks per pipeline rank at MCORE_LAYERS_PER_VIRTUAL_STAGE layers each; 1 without a
    pipeline (nothing to interleave) or where the layers do not split so (Megatron-Core r0.8 then
    runs the plain 1F1B)."""
    per_rank, rest = divmod(layers, pp) if pp > 1 else (0, 1)
    if pp <= 1 or rest or per_rank % MCORE_LAYERS_PER_VIRTUAL_STAGE:
        return 1
    return per_rank // MCORE_LAYERS_PER_VIRTUAL_STAGE


# ---- NeMo 24.07 on H100 (FP8) --------------------------------------------------------------
# Model shapes: NeMo's configs (nemo/collections/llm/gpt/model/{llama,nemotron}.py and the GPT-3
# launcher configs): GPT-3 5B/20B/175B = 24/44/96 layers of 4096/6144/12288 with 32/48/96 heads,
# 4h GeLU, LayerNorm, biases, tied embeddings, vocab 50304, dropout 0.1; Nemotron = squared-ReLU
# MLP (4h), LayerNorm, RoPE, no biases, untied, vocab 256000, no dropout (Nemotron3Config8B:
# 32 x 4096, 32 heads; Nemotron 22B: 40 x 6144, 48 heads; Nemotron4Config340B: 96 x 18432, 96
# heads, 8 KV groups, FFN 73728). Llama: pipesim's llama presets (Touvron et al. 2023; Dubey
# et al. 2024) without dropout (NeMo's Llama configs: hidden_dropout = attention_dropout = 0).
# Settings NeMo's 24.07 performance recipes use (stated in the summary or its recipes): FP8 with
# Transformer Engine delayed scaling (fp8_hybrid, amax history), sequence parallelism with TP,
# TP communication overlap, the distributed optimizer with overlapped grad reduce and param
# gather and fp32 gradient reduction, flash (cuDNN) attention, no recompute. The fp32 reduction
# is what the NeMo 2.0 recipes of the summary's own commit set (NVIDIA/NeMo 8e3d65dcfe,
# nemo/collections/llm/recipes/llama3_70b.py: VP 5 and CP 2 as in the table's Llama 3 rows; its
# bf16_mixed() precision plugin, recipes/precision/mixed_precision.py, sets grad_reduce_in_fp32
# on Megatron-Core's distributed optimizer); the other models have no recipe there. The NeMo 1.0
# launcher's H100 example scripts of tag 24.07 (NVIDIA/NeMo-Framework-Launcher
# examples/training/{gpt,llama}/h100/*.sh) run Apex's distributed_fused_adam with
# grad_sync_dtype=bf16 instead, but at other layouts (GPT-3 175B VP 12, not the table's 6), so they
# are not taken as the rows' source.
_GPT3 = dict(activation="gelu", norm="layernorm", position="learned", tied_embeddings=True, bias=True,
             dropout=True, vocab_size=50304)
_NEMOTRON = dict(activation="relu", norm="layernorm", position="rotary", tied_embeddings=False, bias=False,
                 dropout=False, vocab_size=256000)
NEMO_MODELS = {
    "GPT3-5B": dict(_GPT3, num_layers=24, hidden_size=4096, num_attention_heads=32),
    "GPT3-20B": dict(_GPT3, num_layers=44, hidden_size=6144, num_attention_heads=48),
    "GPT3-175B": dict(_GPT3, num_layers=96, hidden_size=12288, num_attention_heads=96),
    "LLAMA2-7B": {"preset": "llama2-7b", "dropout": False},
    "LLAMA2-13B": {"preset": "llama2-13b", "dropout": False},
    "LLAMA2-70B": {"preset": "llama2-70b", "dropout": False},
    "LLAMA3-8B": {"preset": "llama3-8b", "dropout": False},
    "LLAMA3-70B": {"preset": "llama3-70b", "dropout": False},
    "Nemotron-8B": dict(_NEMOTRON, num_layers=32, hidden_size=4096, num_attention_heads=32),
    "Nemotron-22B": dict(_NEMOTRON, num_layers=40, hidden_size=6144, num_attention_heads=48),
    "Nemotron-340B": dict(_NEMOTRON, num_layers=96, hidden_size=18432, num_attention_heads=96, num_kv_heads=8,
                          ffn_hidden_size=73728),
}


def nemo_scenario(case) -> dict:
    c = case.raw
    name, par = c["model"]["name"], c["parallel"]
    if name not in NEMO_MODELS:
        raise unknown_model(case.id, name)
    tp, pp, dp = int(par["tp"]), int(par["pp"]), int(par["dp"])
    cp, vp = int(par.get("cp", 1)), int(par.get("vp", 1))
    n = int(c["hardware"]["num_gpus"])
    model = dict(NEMO_MODELS[name], name=case.id, seq_length=int(c["model"]["seq_len"]))
    parallel = {"tensor": tp, "pipeline": pp, "data": dp, "sequence_parallel": tp > 1, "virtual_stages": vp}
    if cp > 1:
        parallel["context"] = cp            # parallel.context (issue 15); refused until it exists
    return {
        "model": model,
        "system": _dgx_h100(n),
        "parallel": parallel,
        "training": {"micro_batch_size": int(par["micro_batch"]), "global_batch_size": int(par["global_batch"]),
                     "schedule": "interleaved" if vp > 1 else "1f1b", "recompute": "none", "precision": "fp8",
                     "fp8_recipe": "delayed", "attention": "flash", "zero_stage": 1,
                     "overlap_grad_reduce": True, "overlap_param_gather": True, "overlap_tp_comm": tp > 1,
                     "tp_grad_overlap": True,
                     "grad_reduce_in_fp32": True, "grad_bucket_MB": megatron_bucket_MB(dp * cp),
                     "p2p_sync": megatron_p2p_sync(vp, 2024)},
    }


def _dgx_h100(n: int) -> dict:
    if n < 8:
        return {"preset": "dgx-h100", "num_nodes": 1, "gpus_per_node": n}
    if n % 8:
        raise ScenarioError(f"{n} GPUs is not a whole number of 8-GPU DGX H100 nodes")
    return {"preset": "dgx-h100", "num_nodes": n // 8}


def tokens_per_gpu(s, step_time: float) -> float:
    return s.training.global_batch_size * s.model.seq_length / step_time / s.num_gpus
