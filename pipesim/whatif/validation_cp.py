"""Validation family llama3-405b: Llama 3 405B pre-training throughput with and without context
parallelism (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 4), and the
context-parallel keys every long-sequence case needs (`context_parallel`).

How a case becomes a scenario (each choice from the paper, none fitted to the table):
- model: the llama3.1-405b preset (Table 3) at the case's sequence length.
- system: dgx-h100 (H100 SXM 80 GB, 8 per node on NVLink; 400 Gb/s = 50 GB/s per GPU between
  nodes, the preset's InfiniBand NDR figure - Llama 3 ran RoCE at the same 400 Gb/s per GPU,
  Sec. 3.3.1 "Network"), in pods of 3,072 GPUs joined 1:7 (ibid.: its order keeps every
  bandwidth-hungry transfer inside a pod, so the pods change no figure). RoCE latency and
  congestion are not modelled differently from IB.
- parallelism: TP, CP, PP, DP of Table 4; rank order [TP, CP, PP, DP] (Sec. 3.3.2, "Collective
  communication"), CP inside the node first as pipesim places it. Sequence parallelism on with TP
  (assumed: the paper does not name it; Megatron-style TP ships with it).
- CP is the all-gather variant with the 2·CP load-balanced chunks (Sec. 3.3.2, "Context
  parallelism for long sequences").
- pipeline: interleaved 1F1B; "we reduce one Transformer layer each from the first and the last
  stages ... the first model chunk on the first stage has only the embedding, and the last model
  chunk on the last stage has only output projection and loss" (Sec. 3.3.2, "Pipeline
  parallelism improvements"): 126 + 2 = 128 chunk slots of one layer, so virtual_stages = 8 on
  16 pipeline ranks, the first chunk holding only the embedding and the last only the head.
- batch: micro-batch 1 (assumed), global batch = tokens per batch (16M, Table 4) / sequence.
- no activation recomputation ("we could pre-train Llama 3 on sequences of 8K tokens without
  activation checkpointing", Sec. 3.3.2; CP16 at 128K leaves 8K tokens per GPU as well).
- DP: FSDP with optimizer states and gradients sharded and weights not re-sharded after the
  forward (Sec. 3.3.2): modelled as ZeRO-1 (gradient reduce-scatter + weight all-gather per step),
  since "we use FP32 gradient accumulation during backward computation over multiple
  micro-batches and also reduce-scatter gradients in FP32 across data parallel workers in FSDP"
  (Sec. 3.3.2, "Numerical stability"): gradients accumulate locally in fp32 over the micro-batches
  and are reduce-scattered once, in fp32 (training.grad_reduce_in_fp32). FSDP reduce-scatters and
  all-gathers per wrapped unit, a flat parameter per Transformer block (PyTorch FSDP; the paper
  does not name another wrapping), so one collective per layer: grad_bucket_MB is one layer's
  fp32 gradient on a GPU (each model chunk holds one layer), not DDP's 25 MB buckets.
- BF16, flash attention; TFLOP/s per GPU = model FLOPs (causal attention counted exactly, no
  recompute) / step / GPUs.
- one document per sequence. Llama 3 trained with a document mask (Sec. 3.2: "important in
  continued pre-training on very long sequences"), which pipesim can cost
  (training.document_length), but the paper gives neither its document lengths nor whether its
  TFLOP/s count the masked pairs, so the mapping leaves it out.
"""
from __future__ import annotations

from pipesim.errors import ScenarioError

PREFIX = "llama3-405b-"
TARGET_MAPE = 10.0

LLAMA3_PP_CHUNK_LAYERS = 1      # one Transformer layer per model chunk (see module docstring)
# Its network: pods of 3,072 GPUs with full bisection, 1:7 oversubscribed between them (Sec. 3.3.1)
LLAMA3_POD_GPUS, LLAMA3_POD_OVERSUBSCRIPTION = 3072, 7.0


def _int(value, case_id: str, key: str) -> int:
    if isinstance(value, int):
        return value
    raise ScenarioError(f"{case_id}: {key}: expected an integer, got {value!r}")


def context_parallel(par: dict, case_id: str, mode: str = "ring") -> dict:
    """The `parallel` keys of a published case's CP size (`cp`), for any family's converter:
    Megatron-Core / NeMo long-sequence runs use the ring (p2p) exchange with load-balanced chunks
    (TransformerEngine's default cp_comm_type "p2p"); Llama 3 the all-gather one."""
    cp = _int(par.get("cp", 1), case_id, "parallel.cp")
    return {"context": cp, "context_mode": mode} if cp > 1 else {}


def layer_grad_MB(m: dict, tp: int) -> float:
    """fp32 gradient MB of one Llama Transformer layer on one of `tp` GPUs: attention (Q and the
    output projection h x h each, K and V h x kv_heads·head_dim each) + SwiGLU MLP (3 h x ffn),
    sharded over tp, and the two RMSNorm weights (h each), which every TP rank holds whole."""
    h, ffn = m["hidden"], m["ffn_hidden"]
    kv = m.get("kv_heads", m["heads"]) * h // m["heads"]
    return ((2 * h * h + 2 * h * kv + 3 * h * ffn) / tp + 2 * h) * 4 / 1e6


def llama3_scenario(case) -> dict:
    c, cid = case.raw, case.id
    m, par, hw = c["model"], c["parallel"], c["hardware"]
    n = _int(hw["num_gpus"], cid, "hardware.num_gpus")
    tp, pp, dp = (_int(par[k], cid, f"parallel.{k}") for k in ("tp", "pp", "dp"))
    seq = _int(m["seq_len"], cid, "model.seq_len")
    tokens = _int(par["tokens_per_batch"], cid, "parallel.tokens_per_batch")
    layers = _int(m["layers"], cid, "model.layers")
    slots = layers + 2                                  # the embedding and the head take a slot each
    if slots % (pp * LLAMA3_PP_CHUNK_LAYERS):
        raise ScenarioError(f"{cid}: {layers}+2 layer slots do not split over pipeline({pp})")
    virtual = slots // (pp * LLAMA3_PP_CHUNK_LAYERS)
    chunks = [LLAMA3_PP_CHUNK_LAYERS] * (pp * virtual)
    chunks[0] -= 1
    chunks[-1] -= 1
    if tokens % seq:
        raise ScenarioError(f"{cid}: tokens_per_batch({tokens}) is not a multiple of seq_len({seq})")
    return {
        "model": {"preset": "llama3.1-405b", "name": cid, "seq_length": seq},
        "system": {"preset": "dgx-h100", "num_nodes": n // 8, "pod_gpus": LLAMA3_POD_GPUS,
                   "pod_oversubscription": LLAMA3_POD_OVERSUBSCRIPTION},
        "parallel": {"tensor": tp, "pipeline": pp, "data": dp, "sequence_parallel": tp > 1,
                     "virtual_stages": virtual, "layers_per_stage": chunks, "rank_order": "tp-cp-pp-dp",
                     **context_parallel(par, cid, mode="allgather")},
        "training": {"micro_batch_size": 1, "global_batch_size": tokens // seq, "schedule": "interleaved",
                     "recompute": "none", "precision": "bf16", "attention": "flash", "zero_stage": 1,
                     "optimizer": "adam", "overlap_grad_reduce": True, "grad_reduce_in_fp32": True,
                     "grad_bucket_MB": layer_grad_MB(m, tp)},
    }


def model_tflops(s, step_time: float) -> float:
    """Model FLOPs (no recompute, causal attention exact) / step / GPUs, in TFLOP/s."""
    from pipesim.costs.summary import iteration_flops
    return iteration_flops(s) / step_time / s.num_gpus / 1e12


def cp_ratio(results) -> tuple[float, float] | None:
    """(predicted, published) TFLOP/s ratio of CP16 at 128K over CP1 at 8K on 16,384 GPUs."""
    by_id = {r.case.id: r for r in results}
    a, b = by_id.get(PREFIX + "16384gpu-cp16-128k"), by_id.get(PREFIX + "16384gpu-cp1-8k")
    if a is None or b is None or a.predicted is None or b.predicted is None:
        return None
    return a.predicted / b.predicted, a.case.target / b.case.target


def ratio_line(results) -> str:
    ratio = cp_ratio(results)
    if ratio is None:
        return "CP16@128K / CP1@8K: not available (a case did not run)"
    ok = "met" if abs(ratio[0] - ratio[1]) <= 0.03 else "MISSED"
    return (f"CP16@128K / CP1@8K: predicted {ratio[0]:.3f}, published {ratio[1]:.3f} "
            f"(target within 0.03: {ok})")
