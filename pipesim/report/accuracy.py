"""How far to trust a prediction: pipesim's error on the published runs most like a scenario.

`pipesim validate --snapshot` writes SNAPSHOT: every published case pipesim ran (the given and
held-out families, the MoE model zoo and its long-sequence table) with its GPU generation, model
kind and throughput error, + when pipesim is faster than the measurement. A report reads it:
`class_of` puts a scenario in a class (GPU generation x dense / dense LoRA / MoE / fine-grained
MoE) and `accuracy_of` sums up the snapshot's cases of that class and names the most alike (model size,
GPU count, sequence length, tensor and pipeline sizes). Runs on PyTorch FSDP2 (`stack_of`) are summed apart from
the others: the same MoE models are +15 .. +170 % on Megatron-Core's published tables and within
about ±14 % on NeMo AutoModel's (docs/WHATIF.md), so one band for both would mislead either user. The error of a class is what the validation measured, not
a correction: nothing here changes a prediction. tests/test_accuracy.py reruns the validation and
fails when the snapshot is stale.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

SNAPSHOT = Path(__file__).resolve().parents[2] / "scenarios" / "validation" / "accuracy.json"
GENERATION = {"v100": "Volta", "a100": "Ampere", "h100": "Hopper", "h800": "Hopper", "h200": "Hopper",
              "b200": "Blackwell", "gb200": "Blackwell", "b300": "Blackwell", "gb300": "Blackwell"}
# Many small experts (DeepSeekMoE's fine-grained segmentation, Dai et al. 2024: 64 and more; gpt-oss
# 20B's 32 counted too) make a layer's expert GEMMs small and its per-expert host work large: the
# published runs of such models behave apart from Mixtral-like ones (8 experts), so they are a class.
FINE_GRAINED_EXPERTS = 32
STACK_FSDP2 = "PyTorch FSDP2"
STACK_EAGER = "PyTorch eager"
STACK_GRAPHS = "full-iteration CUDA graphs"


def class_of(s) -> tuple[str, str] | None:
    """(GPU generation, model kind) of a scenario; None for GPUs without a kernel curve (CPU
    profiles, custom GPUs), which no published run describes."""
    generation = GENERATION.get(s.system.gpu.kernel_curve or "")
    if generation is None or s.model.arch == "cnn":
        return None
    if not s.model.is_moe:     # LoRA fine-tuning's step has no weight gradients: a class of its own
        return generation, "dense LoRA" if s.training.lora_rank else "dense"
    return generation, "fine-grained MoE" if s.model.num_experts >= FINE_GRAINED_EXPERTS else "MoE"


def stack_of(s) -> str:
    """The training stack a scenario describes, as far as the published runs tell stacks apart:
    PyTorch FSDP2 (ZeRO-3 with FSDP2's collectives: torchtitan, NeMo AutoModel), other PyTorch-native
    code with eager kernels (kernel_fusion eager: Hugging Face models, NVIDIA's SDPA benchmark), a step
    replayed as one CUDA graph (training.cuda_graphs: Megatron-Bridge's 26.06 / 26.08 MXFP8 MoE
    recipes, whose host-side time the graph removes: their MoE rows average +22 % where the same
    models' rows with the host launching kernels average +66 %, docs/WHATIF.md) or "" (the
    others: Megatron-Core / NeMo / Megatron-Bridge, DeepSpeed, Meta's Llama 3)."""
    if s.training.fsdp2:
        return STACK_FSDP2
    if s.training.kernel_fusion == "eager":
        return STACK_EAGER
    return STACK_GRAPHS if s.training.cuda_graphs == "full_iteration" else ""


def size_of(s) -> float:
    """A cheap measure of a layer stack's size for finding the nearest published run: layers x
    hidden^2, in billions (12x that is a dense model's weights, Narayanan et al. SC'21 Eq. 2)."""
    return s.model.num_layers * s.model.hidden_size ** 2 / 1e9


def _distance(c: dict, size: float, gpus: int, tensor: int, pipeline: int, seq: int) -> float:
    """How unlike a published run is: model size, GPU count and sequence length as log ratios (the
    attention's share of a step grows with the sequence: a 1M-token run is unlike an 8K one of the
    same model), then (half weight) the tensor and pipeline sizes, so a 3D-parallel layout meets
    its like before a ZeRO-3 one. A row without a sequence length (an older snapshot) is not
    compared on it."""
    length = abs(math.log(c["seq"] / seq)) if isinstance(c.get("seq"), int) and c["seq"] > 0 else 0.0
    return (abs(math.log(c["size"] / size)) + abs(math.log(c["gpus"] / gpus)) + length
            + 0.5 * (abs(math.log(c["tensor"] / tensor)) + abs(math.log(c["pipeline"] / pipeline))))


@lru_cache(maxsize=1)
def _cases(path: str) -> tuple:
    """The snapshot's well-formed rows; none when the file is missing or unreadable (a report
    must never fail over it: it then says nothing of accuracy)."""
    try:
        rows = json.loads(Path(path).read_text())["cases"]
    except (OSError, ValueError, KeyError, TypeError):
        return ()
    keys = ("id", "family", "generation", "kind", "error_pct", "gpus", "size", "tensor", "pipeline")

    def ok(c) -> bool:
        return (isinstance(c, dict) and all(k in c for k in keys) and isinstance(c["error_pct"], (int, float))
                and all(isinstance(c[k], int) and c[k] > 0 for k in ("gpus", "tensor", "pipeline"))
                and isinstance(c["size"], (int, float)) and c["size"] > 0)
    return tuple(c for c in rows if ok(c)) if isinstance(rows, list) else ()


def accuracy_of(s, path: Path = SNAPSHOT) -> dict | None:
    """The snapshot's published runs of the scenario's class: how many, from which families, and
    pipesim's signed throughput error on them (min, max, mean absolute); None without a class."""
    cls = class_of(s)
    if cls is None:
        return None
    stack = stack_of(s)
    kin = [c for c in _cases(str(path)) if (c["generation"], c["kind"]) == cls]
    same = [c for c in kin if c.get("stack", "") == stack]
    label = f"{cls[0]}, {cls[1]}" + (f", {stack}" if stack else "")
    if kin and not same:             # none on this stack: the class's runs on the others, said so
        same, label = kin, f"{cls[0]}, {cls[1]} (other stacks: none published on this one)"
    errors = [c["error_pct"] for c in same]
    out = {"class": label, "runs": len(same),
           "families": ", ".join(sorted({c["family"] for c in same}))}
    if same:
        out.update(min_pct=min(errors), max_pct=max(errors), mape_pct=sum(map(abs, errors)) / len(errors))
        this = (size_of(s), s.num_gpus, s.parallel.tensor, s.parallel.pipeline, s.model.seq_length)
        near = min(same, key=lambda c: _distance(c, *this))
        out.update(nearest=near["id"], nearest_gpus=near["gpus"], nearest_pct=near["error_pct"])
    if s.training.document_length is not None:
        # no published run states its documents: the errors are of one document per sequence
        out["unmeasured"] = "packed documents"
    return out


def accuracy_text(a: dict) -> str:
    if not a["runs"]:
        return (f"no published run of this class ({a['class']}) to measure the prediction against; "
                f"{FIT_HINT}")
    text = (f"{a['class']}: on {a['runs']} published runs ({a['families']}) pipesim was "
            f"{a['min_pct']:+.0f} .. {a['max_pct']:+.0f} % (MAPE {a['mape_pct']:.1f} %; + = faster than "
            f"measured; pipesim validate); the most alike, {a['nearest']} on {a['nearest_gpus']} GPUs: "
            f"{a['nearest_pct']:+.1f} %")
    if a.get("unmeasured"):
        text += f"; none of them with {a['unmeasured']}"
    return text + f"; {FIT_HINT}" if a["mape_pct"] > WIDE_MAPE else text


# Beyond this class MAPE (issue 13's bar for a single case) a plan should lean on the team's own
# measured steps: `pipesim fit` fits the stack's efficiencies to them (docs/FIT.md).
WIDE_MAPE = 15.0
FIT_HINT = "a few measured steps of your own narrow it: pipesim fit (docs/FIT.md)"
