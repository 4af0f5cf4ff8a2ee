"""Validation family `other`: a published (or your own) training run whose case id matches no
family's prefix, mapped from what the case states alone, so a cases file of new runs is predicted
instead of skipped (`pipesim validate other --cases my_runs.yaml`).

The case has the published.yaml shape: model (name or label, family, layers, hidden, heads,
kv_heads, head_dim, ffn_hidden, vocab, seq_len, num_experts, moe_top_k, moe_ffn_hidden,
num_shared_experts, moe_layer_freq, first_dense_layers), parallel (tp, pp, dp, cp, ep, vp or
virtual_stages_per_gpu, micro_batch, global_batch or tokens_per_batch or a batch per rank),
hardware (gpu or system, num_gpus, gpus_per_node, inter_node), training (precision, recompute,
moe_dispatcher, ...) and measured. Or
the row names the scenario it ran (`scenario`: a YAML file relative to the cases file, with
optional `set` overrides of dotted keys), which is then its whole mapping.

Read when stated: training.attention, training.recompute (none, selective, full, Megatron-Core
recompute modules such as "norm, act", or torchtitan's activation_checkpointing), the precision
and FP8 recipe, a LoRA section, the MoE routing and dispatcher, parallel.zero_stage (fsdp: ZeRO-3;
ddp_impl local / torch: no distributed optimizer, local not overlapped), `--tp-comm-overlap`, a
batch per data-parallel rank, and pipesim's own training keys. What the case does not state comes
from when and with what it ran (published_stack.py): Megatron-LM's features only from the date
they were merged (the earliest date the source states bounds the run's), torchtitan's or NeMo's
stack when the source names them, otherwise the stack most published runs of 2024-26 use,
Megatron-Core with Transformer Engine, assumed once for every case here (never per case):
micro-batch 1; sequence parallelism with TP; flash (cuDNN) attention; the distributed optimizer
(ZeRO-1) with overlapped gradient reduce-scatter and parameter all-gather, gradients reduced in
fp32 (Megatron-LM arguments.py with --bf16; fp16 runs in fp16) in its default buckets; the TP
gradient all-reduce behind the weight-gradient GEMM; no TP communication overlap (a flag Megatron
leaves off; NeMo's recipes set it); ring CP with load-balanced chunks (TE's default); the
interleaved schedule when vp > 1; layers that do not divide over the stages split counting the
embedding and the loss as layers (Megatron's --account-for-embedding/loss-in-pipeline-split). The
model is the pipesim preset or NeMo model whose name matches the case's name or label and whose
shape agrees with the dimensions it gives; otherwise it is built from those dimensions: a `GPT`
family (or none, without ffn_hidden) as Megatron's GPT (GeLU 4h MLP, LayerNorm, learned positions,
biases, tied embeddings, dropout), any other family as Llama (SwiGLU, RMSNorm, RoPE, no biases,
untied), which then needs ffn_hidden.

Metric, from the first figure the case measures (MEASURED_KEYS' order): tokens/s per GPU
(`tokens_per_s_per_gpu`; `iteration_time_s` / `_ms`, `step_time_s` / `_ms` as global batch x
sequence / time / GPUs; the run's `tokens_per_s` or `samples_per_s` over its GPUs), model TFLOP/s
per GPU (`model_tflops_per_gpu`: no recompute, causal attention counted exactly; `mfu_pct` as that
share of the GPU's dense BF16 peak; an MFU that counts the whole attention matrix, as PaLM's
does, then reads pipesim low by the causal half it adds at long sequences), or TFLOP/s per GPU as
Megatron counts them (`tflops_per_gpu`, megatron_counted_flops; as NeMo counts them for a NeMo run
of a model that is not a GPT).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args, get_origin

from pipesim.errors import ScenarioError
from pipesim.whatif.families import mapped, megatron_bucket_MB, megatron_p2p_sync, published_int
from pipesim.whatif.published_stack import framework_of, had, reported_by

# measured key -> metric (pipesim/whatif/validation.py METRIC names), in order of preference
MEASURED_KEYS = {"tokens_per_s_per_gpu": "tokens", "iteration_time_s": "tokens", "iteration_time_ms": "tokens",
                 "step_time_s": "tokens", "step_time_ms": "tokens", "tokens_per_s": "tokens", "samples_per_s": "tokens",
                 "model_tflops_per_gpu": "model", "tflops_per_gpu": "megatron", "mfu_pct": "model"}
# GPU name fragments -> system preset (pipesim/presets/systems.py), the most specific first
GPU_PRESETS = (("GB300", "gb300-nvl72"), ("GB200", "gb200-nvl72"), ("B300", "dgx-b300"), ("B200", "dgx-b200"),
               ("H200", "dgx-h200"), ("H800", "hgx-h800"), ("H100", "dgx-h100"), ("A100-SXM4-40", "dgx-a100-40gb"),
               ("A100 40", "dgx-a100-40gb"), ("A100", "dgx-a100-80gb"), ("V100", "dgx1-v100"))
# A DGX-2 node: 16 V100 on NVSwitch (NVIDIA DGX-2 datasheet), the dgx1-v100 preset's GPU and links
DGX2_GPUS = 16
GPT_STYLE = dict(activation="gelu", norm="layernorm", position="learned", tied_embeddings=True, bias=True,
                 dropout=True)
LLAMA_STYLE = dict(activation="swiglu", norm="rmsnorm", position="rotary", tied_embeddings=False, bias=False,
                   dropout=False)
# case model key -> pipesim model key, for the dimensions a case may state
MODEL_DIMS = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
              "kv_heads": "num_kv_heads", "ffn_hidden": "ffn_hidden_size", "vocab": "vocab_size",
              "num_experts": "num_experts", "moe_top_k": "moe_top_k", "moe_ffn_hidden": "moe_ffn_hidden_size",
              "head_dim": "kv_channels", "num_shared_experts": "num_shared_experts",
              "moe_layer_freq": "moe_layer_freq", "first_dense_layers": "moe_first_dense_layers"}
# of those, the counts that may be 0
MODEL_COUNTS = ("num_shared_experts", "first_dense_layers")
# Names published tables give models, for the presets they are (NeMo AutoModel's performance summary
# names Qwen3-30B-A3B and Nemotron 3 by size: "Qwen3 MoE 30B", "Nemotron V3 Nano 30B (26.02)")
MODEL_ALIASES = {"Qwen3 MoE 30B": "qwen3-30b-a3b", "Qwen3 MoE 235B": "qwen3-235b-a22b",
                 "Nemotron V3 Nano 30B": "nemotron-3-nano", "Nemotron V3 Super 120B": "nemotron-3-super",
                 "Nemotron 3 Nano 30B": "nemotron-3-nano", "Nemotron 3 Super 120B": "nemotron-3-super"}
RECOMPUTE = {"none": "none", "no": "none", "false": "none", "not": "none", "selective": "selective", "full": "full"}
# Megatron-Core --recompute-modules names (and their short forms in published tables) -> pipesim's
RECOMPUTE_MODULES = {"norm": "layernorm", "layernorm": "layernorm", "act": "moe_act", "moe_act": "moe_act",
                     "core_attn": "core_attn", "mlp": "mlp", "moe": "moe", "mla_up_proj": "mla_up_proj",
                     "shared_experts": "shared_experts"}
OPTIMIZERS = ("adam", "sgd", "muon")
# training keys the mapping reads itself (a row's text there is not a pipesim value)
READ_TRAINING_KEYS = {"precision", "fp8_recipe", "recompute", "attention", "optimizer", "moe_routing", "moe_dispatcher"}
# torchtitan's activation_checkpoint modes (and a plain on / off) -> (recompute, every n-th layer):
# the torchtitan families read it with this table too (validation_titan)
ACTIVATION_CHECKPOINTING = {"no": ("none", None), "none": ("none", None), "false": ("none", None),
                            "full": ("full", None), "true": ("full", None), "selective layer": ("full", 2),
                            "selective op": ("selective_op", None)}
# torchao Float8 scaling recipes pipesim has (its rowwise scaling is not pipesim's 1x128 blockwise)
FLOAT8 = {"tensorwise": "tensorwise"}
ROUTING = {"balanced": "balanced", "dropless": "dropless", "capacity": "capacity"}
DISPATCHERS = {"alltoall": "alltoall", "deepep": "deepep", "hybridep": "hybridep", "hybrid-ep": "hybridep"}
ATTENTION = {"flash": "flash", "eager": "eager", "cudnn": "flash", "fused": "flash", "te": "flash", "sdpa": "flash",
             "flex": "flash", "fa1": "flash", "fa2": "flash", "fa3": "flash", "triton": "flash", "xformers": "flash"}
# an attention a row names by its kernel -> the published table it runs on (training.attention_kernel;
# "triton": a Triton FlashAttention, as MPT's attn_impl triton)
ATTENTION_KERNEL = {"fa1": "fa1", "fa2": "fa2", "fa3": "fa3", "triton": "fa-triton", "xformers": "xformers"}
# a batch per data-parallel rank, as tables state it when they give no global batch
PER_RANK_BATCH = ("batch_per_replica", "local_batch", "batch")
ABSENT = ("n/a", "na", "none", "-", "not stated", "not used", "")
BOOLEAN = {"true": True, "on": True, "yes": True, "1": True, "false": False, "off": False, "no": False, "0": False}


def measured_metric(measured: dict) -> tuple[str, str] | None:
    """(measured key, metric) of the first figure of MEASURED_KEYS the case gives, or None."""
    return next(((k, m) for k, m in MEASURED_KEYS.items() if k in measured), None)


def section(case_raw: dict, key: str, cid: str) -> dict:
    """A case's `key` section (model, parallel, hardware, training): a mapping, or absent ({})."""
    value = case_raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ScenarioError(f"{cid}: {key}: expected a mapping of keys, got {value!r}")
    return value


def other_target(case_raw: dict, where: str) -> tuple[str, float]:
    """(metric, published figure) of a case read by the generic mapping: the first figure of
    MEASURED_KEYS it measures (published_value); one line naming what is missing or wrong."""
    from pipesim.whatif.validation import measured_value
    measured = case_raw.get("measured")
    found = measured_metric(measured) if isinstance(measured, dict) else None
    if found is None:
        raise ScenarioError(f"{where}: measured: expected one of {', '.join(MEASURED_KEYS)} "
                            f"(the id names no family, so the case is read as `other`)")
    key, metric = found
    measured_value(measured, key, where, "the other suite's metric")
    model = case_raw.get("model") if isinstance(case_raw.get("model"), dict) else {}
    if metric == "megatron" and framework_of(case_raw) == "nemo" and "gpt" not in _flatten_lower(model):
        metric = "nemo"             # NeMo's own count (validation_longseq.nemo_llama_flops)
    return metric, published_value(case_raw, key, where)


def _flatten_lower(model: dict) -> str:
    return " ".join(str(model.get(k, "")) for k in ("family", "name", "label")).lower()


def published_value(case_raw: dict, key: str, where: str) -> float:
    """The published figure in the case's metric: a step time, or the run's tokens/s or samples/s,
    becomes tokens/s per GPU; an MFU becomes model TFLOP/s per GPU."""
    value = case_raw["measured"][key]
    hw = section(case_raw, "hardware", where)
    if key in ("tokens_per_s_per_gpu", "model_tflops_per_gpu", "tflops_per_gpu"):
        return float(value)
    if key == "mfu_pct":             # model FLOPs over the GPU's dense BF16 peak
        from pipesim.presets.systems import SYSTEMS
        return value / 100 * SYSTEMS[_gpu_preset(hw, where)]["gpu"]["peak_tflops_bf16"]
    par, m = section(case_raw, "parallel", where), section(case_raw, "model", where)
    n = _int(hw.get("num_gpus"), where, "hardware.num_gpus")
    seq = _int(m.get("seq_len"), where, "model.seq_len")
    if key == "tokens_per_s":        # the whole run's
        return value / n
    if key == "samples_per_s":
        return value * seq / n
    seconds = value / 1000.0 if key.endswith("_ms") else value
    tokens = _int(par.get("tokens_per_batch"), where, "parallel.tokens_per_batch") if "tokens_per_batch" in par \
        else _global_batch(par, where, n) * seq
    return tokens / seconds / n


def megatron_counted_flops(s) -> float:
    """FLOPs per step as Megatron reports them: SC'21 Eq. 3 for a GPT (4h MLP, full multi-head
    attention), counting the re-run forward of a full-recompute run as the paper does; Megatron-
    Core's logger count (no recompute) for any other model."""
    from pipesim.costs.summary import megatron_core_flops, megatron_flops
    m = s.model
    gpt = (m.activation == "gelu" and not m.is_moe and m.kv_heads == m.num_attention_heads
           and m.ffn == 4 * m.hidden_size)
    if gpt:
        return megatron_flops(s, recompute=s.training.recompute == "full")
    return megatron_core_flops(s)


def _int(value, cid: str, key: str, minimum: int = 1) -> int:
    """A published integer of at least `minimum` (1: a size; 0: a count that may be none)."""
    number = None if isinstance(value, bool) else published_int(value)
    if number is not None and number >= minimum:
        return number
    raise ScenarioError(f"{cid}: {key}: expected " + ("a positive integer" if minimum else "a count (0 or more)")
                        + f", got {value!r}")


def _absent(value) -> bool:
    """A value a published table writes for "not given": missing, "n/a", "none", "-", "not stated"."""
    return value is None or str(value).strip().lower() in ABSENT


def _opt_int(d: dict, key: str, cid: str, section: str, default: int = 1) -> int:
    value = d.get(key)
    return default if _absent(value) else _int(value, cid, f"{section}.{key}")


def _squash(name) -> str:
    return re.sub(r"[^a-z0-9.]", "", str(name).lower())


def _name_keys(label) -> list[str]:
    """The squashed forms a model's name is looked up by: as written; Llama 3.x as Llama 3; without
    a parenthesised remark ("DeepSeekV3 (w/o MTP)") or a trailing parameter count ("DeepSeek V3
    671B")."""
    if label is None:
        return []
    bare = re.sub(r"\s*\(.*?\)", "", str(label)).strip()
    forms = [_squash(label), _squash(bare), _squash(re.sub(r"[\s_-]+\d+(\.\d+)?\s*[BbMm]$", "", bare))]
    return forms + [re.sub(r"^(meta)?llama3\.\d", "llama3", f) for f in forms]


@lru_cache(maxsize=None)
def _known_names() -> dict:
    """Squashed model name -> its shape: pipesim's presets, NeMo's models, the tables' aliases."""
    from pipesim.presets.models import MODELS
    from pipesim.whatif.families import NEMO_MODELS
    return {**{_squash(n): {"preset": n} for n in MODELS}, **{_squash(n): v for n, v in NEMO_MODELS.items()},
            **{_squash(n): {"preset": p} for n, p in MODEL_ALIASES.items()}}


def _model(m: dict, cid: str) -> dict:
    """The model keys: a pipesim preset or a NeMo model (families.NEMO_MODELS) the name or label
    names (_name_keys; Llama 3.1 / 3.3 as Llama 3 of the same size: the same shapes, Dubey et al.
    2024 Table 3) whose shape agrees with the dimensions stated; else those dimensions in the
    family's style."""
    from pipesim.presets.models import MODELS
    seq = _int(m.get("seq_len"), cid, "model.seq_len")
    stated = {MODEL_DIMS[k]: _int(v, cid, f"model.{k}", 0 if k in MODEL_COUNTS else 1)
              for k, v in m.items() if k in MODEL_DIMS and v is not None}
    known = _known_names()
    for label in (m.get("name"), m.get("label")):
        shape = next((known[k] for k in _name_keys(label) if k in known), None)
        dims = shape and (MODELS[shape["preset"]] if "preset" in shape else shape)
        if shape and all(dims.get(k) == v for k, v in stated.items() if k in dims):
            return {**shape, "name": cid, "seq_length": seq}
    for key in ("layers", "hidden", "heads", "vocab"):
        if key not in m:
            raise ScenarioError(f"{cid}: model.{key}: missing (needed when model.name names no pipesim preset "
                                f"whose shape matches)")
    family = str(m.get("family", "")).lower()
    gpt = "gpt" in family or (not family and "ffn_hidden" not in m)
    if not gpt and "ffn_hidden" not in m:
        raise ScenarioError(f"{cid}: model.ffn_hidden: missing (a {m.get('family', 'non-GPT')!r} model is built "
                            f"as Llama, whose MLP width has no default)")
    return dict(GPT_STYLE if gpt else LLAMA_STYLE, name=cid, seq_length=seq, **stated)


def _system(hw: dict, cid: str, n: int, when) -> dict:
    """The system section: the preset the GPU's name picks (an A100 of unstated size reported
    before the 80 GB part existed: the 40 GB one), in nodes of hardware.gpus_per_node (the
    preset's, and always 4-GPU trays in an NVL72 rack), as Megatron-Bridge's rows are placed."""
    from pipesim.presets.systems import SYSTEMS
    from pipesim.whatif.validation_bridge import NVL72, node_system
    gpu = _gpu_text(hw)
    preset = _gpu_preset(hw, cid)
    if preset == "dgx-a100-80gb" and "80" not in gpu and not had("a100_80gb", when):
        preset = "dgx-a100-40gb"
    per_node = SYSTEMS[preset]["gpus_per_node"]
    if "dgx-2" in gpu.lower():
        per_node = DGX2_GPUS
    if preset not in NVL72:
        per_node = _opt_int(hw, "gpus_per_node", cid, "hardware", per_node)
    system = dict(node_system(cid, gpu, preset, per_node, n), gpus_per_node=min(per_node, n))
    nic = None if preset in NVL72 else _nic_GBps(hw, per_node)
    if nic:
        system["inter_node"] = {"bandwidth_GBps": nic}
    # a part of its own memory size ("H100-SXM-96GB"), where it is not the preset's in GB or GiB
    memory = re.search(r"(\d+)\s*GB\b", gpu)
    if memory and abs(int(memory[1]) / SYSTEMS[preset]["gpu"]["memory_GiB"] - 1.037) > 0.06:
        system["gpu"] = {"memory_GiB": int(memory[1])}
    return system


def _gpu_text(hw: dict) -> str:
    return " ".join(str(hw[k]) for k in ("gpu", "system", "node") if not _absent(hw.get(k)))


def _gpu_preset(hw: dict, cid: str) -> str:
    """The system preset the GPU's name picks (GPU_PRESETS); PCIe parts and unknown names refused."""
    gpu = _gpu_text(hw)
    preset = next((p for frag, p in GPU_PRESETS if frag.lower() in gpu.lower()), None)
    if preset is None or "pcie" in gpu.lower():
        raise ScenarioError(f"{cid}: hardware.gpu {gpu!r} has no system preset; known: "
                            f"{', '.join(dict.fromkeys(f for f, _ in GPU_PRESETS))} (SXM parts)")
    return preset


def _nic_GBps(hw: dict, per_node: int) -> float | None:
    """The network a row states (hardware.inter_node or .network), in GB/s per GPU: "8x 200 Gb/s
    HDR InfiniBand per node" is the node's NICs shared by its GPUs, "400 Gb/s per GPU" one GPU's;
    None when it states no rate (the preset's)."""
    text = " ".join(str(hw[k]) for k in ("inter_node", "network") if not _absent(hw.get(k)))
    per_gpu = re.search(r"(\d+(?:\.\d+)?)\s*(Gb|GB)(?:/s|ps)?\s*(?:\([^)]*\)\s*)?per GPU", text)
    if per_gpu:                           # Gb: bits, GB: bytes
        return float(per_gpu[1]) / (8 if per_gpu[2] == "Gb" else 1)
    nics = re.search(r"(\d+)\s*[x×]\s*(\d+(?:\.\d+)?)\s*Gb", text)
    return int(nics[1]) * float(nics[2]) / 8 / per_node if nics else None


def _precision(tr: dict, cid: str, framework: str = "megatron") -> dict:
    """training.precision (with training.fp8_recipe or .recipe) as stated: "FP8" is per-tensor
    current scaling (Megatron-Bridge's FP8-CS, TE's default recipe) unless the text names MX,
    delayed ("DS") or block scaling, or the run is NeMo's, whose plain FP8 recipe
    (bf16_with_fp8_mixed) is delayed scaling (its current-scaling and MXFP8 recipes are named
    ones); NVFP4 / FP4 the NVFP4 recipe (Blackwell only: pipesim refuses it elsewhere, in one
    line)."""
    text = f"{tr.get('precision') or 'bf16'} {tr.get('fp8_recipe') or tr.get('recipe') or ''}".lower()
    words = set(re.split(r"[^a-z0-9]+", text))
    if "fp4" in text:
        return {"precision": "fp8", "fp8_recipe": "nvfp4"}
    if "fp8" in text:
        recipe = ("mxfp8" if "mx" in text else "delayed" if "delayed" in text or "ds" in words
                  else "blockwise" if "block" in text else "tensorwise" if "cs" in words or "current" in text
                  else "delayed" if framework == "nemo" else "tensorwise")
        return {"precision": "fp8", "fp8_recipe": recipe}
    for name in ("fp16", "tf32", "fp32", "bf16"):
        if name in text:
            return {"precision": name}
    if "not stated" in text:
        return {"precision": "bf16"}
    raise ScenarioError(f"{cid}: training.precision {tr.get('precision')!r}: expected bf16, fp16, fp8, tf32 or fp32")


def _recompute(tr: dict, cid: str, when) -> dict:
    """training.recompute: none, selective, full (with any parenthesised detail), or a list of
    Megatron-Core recompute modules ("norm, act" = layernorm, moe_act) as selective; or, without
    one, torchtitan's / AutoModel's training.activation_checkpointing (ACTIVATION_CHECKPOINTING;
    `every`: the layers divisor of a checkpoint every n-th layer). Not stated: none, or full for a
    run reported before selective recompute existed (published_stack)."""
    if _absent(tr.get("recompute")) and not _absent(tr.get("activation_checkpointing")):
        ac = str(tr["activation_checkpointing"]).lower()
        recompute, every = mapped(ACTIVATION_CHECKPOINTING, ac, cid, "training.activation_checkpointing")
        return {"recompute": recompute, **({"every": every} if every else {})}
    text = str(tr.get("recompute") or "not stated").lower()
    if text.startswith("not stated"):
        return {"recompute": "none" if had("sequence_parallel", when) else "full"}
    words = [w for w in re.split(r"[\s,;()/]+", text) if w]
    if words and all(w in RECOMPUTE_MODULES for w in words):
        return {"recompute": "selective", "recompute_modules": [RECOMPUTE_MODULES[w] for w in words]}
    return {"recompute": mapped(RECOMPUTE, words[0] if words else "none", cid, "training.recompute")}


def _per_rank_batch(par: dict) -> str | None:
    return next((k for k in PER_RANK_BATCH if not _absent(par.get(k))), None)


def _global_batch(par: dict, cid: str, n: int) -> int:
    """parallel.global_batch; else a batch per data-parallel rank (PER_RANK_BATCH) times the ranks
    (dp, else the GPUs over tp x pp x cp)."""
    if not _absent(par.get("global_batch")):
        return _int(par["global_batch"], cid, "parallel.global_batch")
    key = _per_rank_batch(par)
    if key is None:
        raise ScenarioError(f"{cid}: parallel.global_batch: missing (or parallel.tokens_per_batch, or a batch per "
                            f"data-parallel rank: {', '.join(PER_RANK_BATCH)})")
    tp, pp, cp = (_opt_int(par, k, cid, "parallel") for k in ("tp", "pp", "cp"))
    return _int(par[key], cid, f"parallel.{key}") * _opt_int(par, "dp", cid, "parallel", n // (tp * pp * cp))


def _micro_batch(par: dict, cid: str, pp: int) -> int:
    """parallel.micro_batch; without one, a run with no pipeline that states its batch per rank
    runs it as one micro-batch (no accumulation stated); else 1."""
    key = _per_rank_batch(par)
    if _absent(par.get("micro_batch")) and pp == 1 and key is not None:
        return _int(par[key], cid, f"parallel.{key}")
    return _opt_int(par, "micro_batch", cid, "parallel")


def _preset_layers(model: dict) -> int:
    from pipesim.presets.models import MODELS
    return MODELS[model["preset"]]["num_layers"]


def _zero_stage(par: dict, cid: str, when) -> int:
    """parallel.zero_stage as stated; FSDP ("on", true, or the number of ranks it shards over) as
    ZeRO-3; Megatron's local DDP (no distributed optimizer) as 0; else the distributed optimizer,
    ZeRO-1, once it existed."""
    if par.get("zero_stage") is not None:
        return mapped({0: 0, 1: 1, 2: 2, 3: 3}, par["zero_stage"], cid, "parallel.zero_stage")
    fsdp = str(par.get("fsdp", "")).lower()
    if fsdp in ("on", "true", "yes") or (fsdp.isdigit() and int(fsdp) >= 1):
        return 3
    if str(par.get("ddp_impl", "")).lower() in ("local", "torch"):
        return 0
    return 1 if had("distributed_optimizer", when) else 0


def _data_parallel(par: dict, cid: str, when, dp: int, cp: int, precision: str) -> dict:
    """How gradients and parameters move over the data-parallel group. A ZeRO stage stated for a
    run from before Megatron's distributed optimizer is DeepSpeed's (its buckets; before its PR
    #1188 its ZeRO-3 gathers waited on the compute). Megatron's local DDP reduced after the
    backward, torch DDP and DeepSpeed during it; otherwise the reduction and the parameter gather
    overlap once Megatron could (published_stack). Gradients reduce in fp32 unless the run is fp16
    (Megatron-LM arguments.py sets accumulate_allreduce_grads_in_fp32 with --bf16 only)."""
    from pipesim.whatif.validation_sc21 import DEEPSPEED_03_ZERO3, DEEPSPEED_BUCKET_MB
    zero = _zero_stage(par, cid, when)
    ddp = str(par.get("ddp_impl", "")).lower()
    deepspeed = zero > 0 and not had("distributed_optimizer", when)
    out = {"zero_stage": zero,
           "overlap_grad_reduce": ddp == "torch" or deepspeed or (ddp != "local" and had("overlap_grad_reduce", when)),
           "overlap_param_gather": zero == 1 and had("overlap_param_gather", when),
           "grad_reduce_in_fp32": precision != "fp16",
           "grad_bucket_MB": DEEPSPEED_BUCKET_MB if deepspeed else megatron_bucket_MB(dp * cp)}
    if deepspeed and zero == 3 and not had("deepspeed_zero3_async_gather", when):
        out.update(DEEPSPEED_03_ZERO3)
    return out


def named_scenario(case, base: Path) -> dict:
    """The scenario file a row names (`scenario`: a YAML path relative to `base`) as a dict that
    loads from anywhere (the files it names made absolute), with the row's `set` overrides (dotted
    keys, as `--set` and `pipesim fit`'s runs take them), without its `run` section (the row
    compares one step)."""
    from pipesim.calibrate.runs_file import override_texts
    from pipesim.scenario.load import absolute_files, apply_override, read_yaml
    name, overrides = case.raw.get("scenario"), case.raw.get("set") or {}
    path = base / str(name)
    if not isinstance(name, str) or not path.is_file():
        raise ScenarioError(f"{case.id}: scenario: expected a scenario file (relative to {base}), got {name!r}")
    if not isinstance(overrides, dict):
        raise ScenarioError(f"{case.id}: set: expected a mapping of dotted keys, got {overrides!r}")
    bad = next((k for k in overrides if "." not in str(k)), None)
    if bad is not None:
        raise ScenarioError(f"{case.id}: set: {bad!r}: expected section.key")
    raw = absolute_files(read_yaml(path), path.parent)
    for text in override_texts(overrides, f"{case.id}: set"):
        raw = apply_override(raw, text)
    return {k: v for k, v in raw.items() if k != "run"}


def generic_scenario(case) -> dict:
    c, cid = case.raw, case.id
    if "scenario" in c:             # the row names the scenario it ran: its own mapping
        return named_scenario(case, Path(case.origin).parent if case.origin else Path.cwd())
    m, par, hw, tr = (section(c, k, cid) for k in ("model", "parallel", "hardware", "training"))
    if "precision" in c and "precision" not in tr:      # some tables state it beside the sections
        tr = {**tr, "precision": c["precision"]}
    tr = {**section(c, "settings", cid), **tr}            # a table's run settings, read as training keys
    n = _int(hw.get("num_gpus"), cid, "hardware.num_gpus")
    tp, pp, cp, ep = (_opt_int(par, k, cid, "parallel") for k in ("tp", "pp", "cp", "ep"))
    vp = _opt_int(par, "vp", cid, "parallel", _opt_int(par, "virtual_stages_per_gpu", cid, "parallel"))
    if n % (tp * pp * cp):
        raise ScenarioError(f"{cid}: hardware.num_gpus {n} is not a multiple of tp({tp}) x pp({pp}) x cp({cp})")
    dp = _opt_int(par, "dp", cid, "parallel", n // (tp * pp * cp))
    if tp * pp * cp * dp != n:
        raise ScenarioError(f"{cid}: parallel: tp({tp}) x pp({pp}) x cp({cp}) x dp({dp}) = {tp * pp * cp * dp}, "
                            f"not hardware.num_gpus {n}")
    model = _model(m, cid)
    seq = model["seq_length"]
    if _absent(par.get("global_batch")) and "tokens_per_batch" in par:
        tokens = _int(par["tokens_per_batch"], cid, "parallel.tokens_per_batch")
        if tokens % seq:
            raise ScenarioError(f"{cid}: parallel.tokens_per_batch {tokens} is not a multiple of model.seq_len {seq}")
        gbs = tokens // seq
    else:
        gbs = _global_batch(par, cid, n)
    when = reported_by(c)
    system = _system(hw, cid, n, when)
    recompute = _recompute(tr, cid, when)
    from pipesim.whatif.validation_cp import context_parallel
    sp = par.get("sequence_parallel")
    parallel = {"tensor": tp, "pipeline": pp, "data": dp, "virtual_stages": vp, **context_parallel(par, cid),
                "sequence_parallel": tp > 1 and (had("sequence_parallel", when) if sp is None
                                                 else mapped(BOOLEAN, str(sp).lower(), cid,
                                                             "parallel.sequence_parallel"))}
    if ep > 1:
        parallel["expert"] = ep
    layers = model.get("num_layers") or _preset_layers(model)
    every = recompute.pop("every", None)
    if every:
        recompute["recompute_num_layers"] = layers // every
    if layers % (pp * vp):
        from pipesim.scenario.stage_split import embedding_loss_split
        split = embedding_loss_split(layers, pp * vp)
        if not split:
            raise ScenarioError(f"{cid}: model.layers {layers} do not split over pp({pp}) x vp({vp}) stages, "
                                f"even counting the embedding and the loss as layers")
        parallel["layers_per_stage"] = list(split)    # Megatron's --account-for-embedding/loss-in-pipeline-split
    flags = str(par.get("overlap", ""))
    framework = framework_of(c)
    precision = _precision(tr, cid, framework)
    attention = str(tr.get("attention") or ("flash" if had("flash_attention", when) else "eager")).lower()
    training = {"micro_batch_size": _micro_batch(par, cid, pp), "global_batch_size": gbs,
                "schedule": "interleaved" if vp > 1 else "1f1b", **recompute, **precision,
                "attention": mapped(ATTENTION, attention, cid, "training.attention"),
                **_data_parallel(par, cid, when, dp, cp, precision["precision"]),
                "overlap_tp_comm": tp > 1 and ("--tp-comm-overlap" in flags or tr.get("tp_comm_overlap") is True
                                               or (framework == "nemo" and tr.get("tp_comm_overlap") is None)),
                "tp_grad_overlap": had("tp_grad_overlap", when),
                "p2p_sync": megatron_p2p_sync(vp, when.year if when else 2024)}
    if attention in ATTENTION_KERNEL:
        training["attention_kernel"] = ATTENTION_KERNEL[attention]
    routing = str(tr.get("moe_routing", "")).lower()
    if routing in ROUTING:
        training["moe_routing"] = routing
    if tr.get("moe_dispatcher") is not None:
        training["moe_dispatcher"] = mapped(DISPATCHERS, str(tr["moe_dispatcher"]).lower(), cid,
                                            "training.moe_dispatcher")
    training.update(_framework_stack(framework, tr, par, model, (tp, pp, ep), when, cid))
    if framework in ("torchtitan", "automodel") and cp > 1:
        parallel["context_mode"] = "allgather"          # PyTorch's context_parallel rotate method of the time
    optimizer = str(tr.get("optimizer", "")).lower().split()
    if optimizer and optimizer[0] in OPTIMIZERS:
        training["optimizer"] = optimizer[0]
    training.update(_pipesim_keys(tr), **_lora(tr, cid))
    return {"model": model, "system": system, "parallel": parallel, "training": training}


def _framework_stack(framework: str, tr: dict, par: dict, model: dict, sizes: tuple, when, cid: str) -> dict:
    """The training keys a framework other than Megatron-Core sets (published_stack.framework_of),
    each as its own family converter reads it; `sizes` = (tp, pp, ep)."""
    tp, pp, ep = sizes
    if framework == "torchtitan":
        return _torchtitan(tr, par, tp, pp, when, cid)
    if framework == "automodel":
        from pipesim.presets.models import MODELS
        from pipesim.whatif.validation_automodel import automodel_stack
        shared = model.get("num_shared_experts") or MODELS.get(model.get("preset"), {}).get("num_shared_experts")
        return automodel_stack(tr, ep, bool(shared), cid)
    if framework == "transformers":
        from pipesim.whatif.validation_sdpa import transformers_stack
        plain_ddp = "zero_stage" not in par and "fsdp" not in par       # no sharded optimizer stated
        return {**transformers_stack(tr, cid), **(dict(zero_stage=0, overlap_param_gather=False) if plain_ddp else {})}
    return {}


def _torchtitan(tr: dict, par: dict, tp: int, pp: int, when, cid: str) -> dict:
    """torchtitan's FSDP2 stack (validation_titan.torchtitan_stack, the torchtitan families'
    reading): compiled or eager kernels as training.compile says, the loss compiled from 2025, the
    embedding and output in FSDP2's root unit before 2025-07-28; a local batch cut into as many
    micro-batches as pipeline ranks (no accumulation); async_tp as TP overlap."""
    from pipesim.whatif.validation_titan import torchtitan_stack
    out = torchtitan_stack(bool(tr.get("compile")), tp, pp, had("torchtitan_compiled_loss", when))
    out.update(fsdp2_ends_in_root=not had("torchtitan_own_end_units", when))
    if not _absent(tr.get("float8")):           # torchao Float8 linears (--model.converters float8)
        out.update(precision="fp8", fp8_recipe=mapped(FLOAT8, str(tr["float8"]).lower(), cid, "training.float8"),
                   fp8_param_gather=bool(tr.get("fsdp_float8_all_gather")))
    if tr.get("async_tp") is not None:
        out["overlap_tp_comm"] = tp > 1 and bool(tr["async_tp"])
    key = _per_rank_batch(par)
    if key and _absent(par.get("micro_batch")) and pp > 1:
        local = _int(par[key], cid, f"parallel.{key}")
        if local % pp:
            raise ScenarioError(f"{cid}: parallel.{key} {local} does not split into {pp} pipeline micro-batches")
        out["micro_batch_size"] = local // pp
    return out


def _lora(tr: dict, cid: str) -> dict:
    """training.lora {rank, targets, dropout, a2a} as pipesim's lora_* keys (a fine-tuning run:
    the base weights frozen, adapters beside the targeted linears)."""
    lora = tr.get("lora")
    if lora is None:
        return {}
    if not isinstance(lora, dict) or "rank" not in lora:
        raise ScenarioError(f"{cid}: training.lora: expected a mapping with rank (and targets, dropout, a2a)")
    out = {"lora_rank": _int(lora["rank"], cid, "training.lora.rank")}
    for key in ("targets", "dropout", "a2a"):
        if key in lora:
            out[f"lora_{key}"] = list(lora[key]) if key == "targets" else lora[key]
    return out


@lru_cache(maxsize=None)
def _own_training_keys() -> dict:
    """pipesim's training keys the mapping does not read itself -> their types."""
    from typing import get_type_hints
    from pipesim.scenario.config import TrainingConfig
    return {k: t for k, t in get_type_hints(TrainingConfig).items() if k not in READ_TRAINING_KEYS}


def _pipesim_keys(tr: dict) -> dict:
    """The row's training keys that are pipesim's own (training.cuda_graphs, fp8_attention, ...)
    and that the mapping above does not read: taken as written (the scenario loader checks them),
    except a value outside the key's choices (`cuda_graphs: per_layer`), which pipesim has no
    setting for and so reads as not stated."""
    own = _own_training_keys()
    return {k: v for k, v in tr.items() if k in own
            and not (get_origin(own[k]) is Literal and v not in get_args(own[k]))}
