"""The SC'21 and Megatron-LM 2020 families (sc21-table1, sc21-table2, megatron-v1): the shared
published cases of Narayanan et al. SC'21 Tables 1 and 2 and the 2020 README, as Megatron-LM and
DeepSpeed ran them in 2020-21 (GPT with a 4h GeLU MLP, fp16, full recomputation, eager attention,
Megatron's local DDP or DeepSpeed ZeRO). Metric: SC'21 Eq. 3 with recompute (validation.py
predicted_tflops).
"""
from __future__ import annotations

from pipesim.errors import ScenarioError
from pipesim.whatif.families import megatron_p2p_sync, published_int

# Published GPU names -> system presets (pipesim/presets/systems.py) and node overrides.
# DGX-2: 16 V100-SXM3 32 GB on NVSwitch (6 NVLink2 links = 150 GB/s per direction per GPU, as in
# the dgx1-v100 preset), 8x 100 Gb/s EDR per 16 GPUs (6.25 GB/s per GPU) - NVIDIA DGX-2 datasheet.
# "A100-SXM4" without a size in the 2020 README: DGX A100 shipped with 40 GB parts then.
GPU_SYSTEMS = {
    "A100-SXM4-80GB": ("dgx-a100-80gb", {}),
    "A100-SXM4": ("dgx-a100-40gb", {}),
    "V100 (DGX-2)": ("dgx1-v100", {"gpus_per_node": 16}),
}


# DeepSpeed ZeRO's gradient buckets: reduce_bucket_size = 5e8 elements (deepspeed/runtime/zero/
# constants.py, ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT), fp16 gradients: 1000 MB.
DEEPSPEED_BUCKET_MB = 5e8 * 2 / 1e6
# DeepSpeed's ZeRO-3 before PR #1188 (June 2021; DeepSpeed <= 0.3.16, the SC'21 paper's): each
# parameter all-gather calls torch.cuda.synchronize() and is followed by an explicit copy, so
# gathers do not overlap compute; measured on 8 A100 with NVLink at DeepSpeed 0.3.16, a 5.1B
# model's forward took 480 ms under ZeRO-3 against 60 ms under ZeRO-2 (issue #1174): 10.2 GB x 7/8
# gathered in 420 ms = 21 GB/s per GPU.
DEEPSPEED_03_ZERO3 = dict(zero3_prefetch=False, zero3_gather_GBps=21.0)


def gpu_family(gpu_name: str) -> str:
    return "V100" if "V100" in gpu_name else "A100" if "A100" in gpu_name else gpu_name


def _int(value, case_id: str, key: str) -> int:
    number = published_int(value)
    if number is not None:
        return number
    raise ScenarioError(f"{case_id}: {key}: expected an integer, got {value!r}")


def sc21_scenario(case, efficiencies: dict) -> dict:
    """A case's scenario; `efficiencies`: the chosen EFFICIENCY_SETS entry, by GPU family."""
    c, cid = case.raw, case.id
    m, par, hw = c["model"], c["parallel"], c["hardware"]
    gpu = hw["gpu"]
    if gpu not in GPU_SYSTEMS:
        raise ScenarioError(f"{cid}: hardware.gpu {gpu!r} has no system preset; known: {', '.join(GPU_SYSTEMS)}")
    preset, node = GPU_SYSTEMS[gpu]
    n = _int(hw["num_gpus"], cid, "hardware.num_gpus")
    from pipesim.presets.systems import SYSTEMS
    per_node = node.get("gpus_per_node", SYSTEMS[preset]["gpus_per_node"])
    system = {"preset": preset, **node}
    eff = efficiencies.get(gpu_family(gpu))
    if eff:
        system["gpu"] = dict(eff)
    if n < per_node:
        system.update(num_nodes=1, gpus_per_node=n)
    else:
        if n % per_node:
            raise ScenarioError(f"{cid}: {n} GPUs is not a whole number of {per_node}-GPU nodes")
        system["num_nodes"] = n // per_node
    tp, pp, dp = (_int(par.get(k, 1), cid, f"parallel.{k}") for k in ("tp", "pp", "dp"))
    v = _int(par.get("virtual_stages_per_gpu", 1), cid, "parallel.virtual_stages_per_gpu")
    micro = _int(par.get("micro_batch", par.get("batch_per_replica", 1)), cid, "parallel.micro_batch")
    gbs = _int(par["global_batch"], cid, "parallel.global_batch")
    zero = _int(par.get("zero_stage", 0), cid, "parallel.zero_stage")
    sched = str(par.get("schedule", "1F1B")).lower()
    # Megatron's "local" DDP (the SC'21 runs of >= 39B) all-reduces after the backward; torch DDP
    # and DeepSpeed ZeRO overlap it with the backward. The 2020 README runs used Megatron's
    # default, local DDP.
    ddp = par.get("ddp_impl", "torch" if zero else "local")
    # Gradient buckets as each framework cuts them: torch DDP bucket_cap_mb = 25 MB (pipesim's
    # default); DeepSpeed ZeRO's DEEPSPEED_BUCKET_MB.
    bucket = {"grad_bucket_MB": DEEPSPEED_BUCKET_MB} if zero else {}
    if zero == 3:
        bucket.update(DEEPSPEED_03_ZERO3)
    return {
        "model": {"name": cid, "num_layers": m["layers"], "hidden_size": m["hidden"],
                  "num_attention_heads": m["heads"], "ffn_hidden_size": m.get("ffn_hidden", 4 * m["hidden"]),
                  "seq_length": m["seq_len"], "vocab_size": m["vocab"], "activation": "gelu",
                  "norm": "layernorm", "tied_embeddings": True, "bias": True,
                  "reference_params": float(m["params_b"]) * 1e9},
        "system": system,
        "parallel": {"tensor": tp, "pipeline": pp, "data": dp, "virtual_stages": v,
                     "sequence_parallel": False},
        "training": {"micro_batch_size": micro, "global_batch_size": gbs,
                     "schedule": "interleaved" if v > 1 or "interleav" in sched else "1f1b",
                     "recompute": "full", "precision": "fp16", "zero_stage": zero, "optimizer": "adam",
                     "attention": "eager", "overlap_grad_reduce": ddp != "local",
                     "p2p_sync": megatron_p2p_sync(v, 2021), **bucket},
    }
