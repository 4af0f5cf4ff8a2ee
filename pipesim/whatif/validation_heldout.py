"""Held-out published runs (scenarios/validation/heldout.yaml): measurements that are not in the
shared validation set, added to test how the model generalises. Nothing is tuned on them.

korthikanti22  Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
               Models", MLSys 2023: GPT 22B / 175B / 530B / 1T on DGX A100 (Table 3), end-to-end
               iteration time with full recompute and with sequence parallelism + selective
               recompute (Table 5). Metric: tokens/s per GPU, derived from the iteration time.

Assumptions the paper does not state, made once for the family: fp16 mixed precision (as the
SC'21 converter; A100 runs fp16 and bf16 at the same rate), Megatron's GPT defaults of the time
(4h GeLU MLP, LayerNorm, biases, tied embeddings, dropout 0.1), attention without a flash kernel
(2022 Megatron-LM: fused scale-mask-softmax), Adam, no distributed optimizer (no data parallelism).
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.whatif.families import megatron_p2p_sync

# Per-layer forward/backward time of the 22B model (Korthikanti et al. 2022, Table 4, ms), keyed
# by (recompute, sequence parallelism): a published layer-level measurement that tests the
# per-op cost model directly (benchmarks/layer_times.py prints it against pipesim).
LAYER_TIMES_22B = {("none", False): (7.7, 11.9), ("none", True): (7.2, 11.8),
                   ("full", False): (7.7, 19.5), ("selective", False): (7.7, 13.2),
                   ("selective", True): (7.2, 13.1)}


def rac22_scenario(case) -> dict:
    c = case.raw
    m, par, hw = c["model"], c["parallel"], c["hardware"]
    mode = c.get("training", {}).get("mode")
    if mode not in ("full", "present"):
        raise ScenarioError(f"{case.id}: training.mode: expected full or present, got {mode!r}")
    n, tp, pp, v = int(hw["num_gpus"]), int(par["tp"]), int(par["pp"]), int(par.get("virtual_stages_per_gpu", 1))
    return {
        "model": {"name": case.id, "num_layers": m["layers"], "hidden_size": m["hidden"],
                  "num_attention_heads": m["heads"], "ffn_hidden_size": 4 * m["hidden"],
                  "seq_length": m["seq_len"], "vocab_size": m["vocab"], "activation": "gelu",
                  "norm": "layernorm", "tied_embeddings": True, "bias": True, "dropout": True},
        "system": {"preset": "dgx-a100-80gb", "num_nodes": max(1, n // 8)},
        "parallel": {"tensor": tp, "pipeline": pp, "data": int(par.get("dp", 1)), "virtual_stages": v,
                     "sequence_parallel": mode == "present"},
        "training": {"micro_batch_size": int(par["micro_batch"]), "global_batch_size": int(par["global_batch"]),
                     "schedule": "interleaved" if v > 1 else "1f1b",
                     "recompute": "full" if mode == "full" else "selective", "precision": "fp16",
                     "zero_stage": 0, "optimizer": "adam", "attention": "eager", "overlap_grad_reduce": False,
                     "p2p_sync": megatron_p2p_sync(v, 2022), "tp_grad_overlap": True},
    }


def layer_times_22b() -> list[dict]:
    """pipesim's per-layer forward/backward of the 22B model (TP 8, micro-batch 4) beside Table 4.
    A middle pipeline stage is costed so the embedding and the LM head stay out of the layer."""
    from pipesim.costs.stage import stage_costs
    from pipesim.scenario.load import load_scenario
    from pipesim.whatif.validation import Case
    raw = {"model": {"heads": 64, "hidden": 6144, "layers": 48, "seq_len": 2048, "vocab": 51200},
           "parallel": {"tp": 8, "pp": 4, "micro_batch": 4, "global_batch": 4},
           "hardware": {"num_gpus": 32}, "training": {"mode": "full"}}
    rows = []
    for (recompute, sp), (f_pub, b_pub) in LAYER_TIMES_22B.items():
        d = rac22_scenario(Case("rac22-22B-layer", "korthikanti22", 0.0, "", raw))
        d["parallel"]["sequence_parallel"] = sp
        d["training"]["recompute"] = recompute
        c = stage_costs(load_scenario(d))[1]
        rows.append({"recompute": recompute, "sequence_parallel": sp,
                     "forward_ms": 1e3 * c.forward / c.layers, "backward_ms": 1e3 * c.backward / c.layers,
                     "forward_pub_ms": f_pub, "backward_pub_ms": b_pub})
    return rows
