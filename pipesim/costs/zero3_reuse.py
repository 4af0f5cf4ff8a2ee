"""How much of the model DeepSpeed ZeRO-3 gathers in each pass, from its release rule.

DeepSpeed gathers a module's weights before it runs and releases them after, unless the trace
says they are used again soon: `PartitionedParameterCoordinator.__params_to_release`
(deepspeed/runtime/zero/partitioned_param_coordinator.py) walks the recorded module order from
the next step, adding up each module's element count, and keeps every parameter it meets before
the count reaches `stage3_max_reuse_distance` (default 1e9 elements: `max_reuse_distance` in
DeepSpeedZeroOptimizer_Stage3's signature). Parameters below `stage3_param_persistence_threshold`
(1e5 elements) are never partitioned (`persistent_parameters`): norms and biases are not gathered.

With full recompute a layer's backward first re-runs its forward (every module gathered again,
its forward use being a whole model away) and then runs the module backwards in reverse: the
last module is reused at once and kept; an earlier one is kept only if the modules after it,
counted twice (recomputed forward, then backward), come to less than the reuse distance. So a
large layer (hidden 12288: 8·h² between the first MLP matrix's two uses, 1.2e9) gathers most of
its weights 2.67 times a step, a small one (hidden 4096) twice. The trace holds the layers; the
embedding and head (a few % of the weights) are gathered like them.
"""
from __future__ import annotations

import math
from functools import lru_cache
from itertools import accumulate

from pipesim.scenario.config import Scenario

MAX_REUSE_DISTANCE = 1e9      # stage3_max_reuse_distance default, elements
PERSISTENCE_THRESHOLD = 1e5   # stage3_param_persistence_threshold default, elements


def trace_gathers(uses: list[tuple[str, float, str]], max_reuse: float = MAX_REUSE_DISTANCE) -> dict[str, float]:
    """Elements gathered per phase for one step's module trace [(module, elements, phase)]:
    a use gathers unless the module's previous use kept its weights (fewer than `max_reuse`
    elements traversed in between, the release walk's rule)."""
    prefix = [0.0, *accumulate(n for _, n, _ in uses)]
    last: dict[str, int] = {}
    gathered: dict[str, float] = {}
    for i, (module, n, phase) in enumerate(uses):
        j = last.get(module)
        # elements of the uses strictly between the previous use j and this one
        kept = j is not None and prefix[i] - prefix[j + 1] < max_reuse
        if not kept:
            gathered[phase] = gathered.get(phase, 0.0) + n
        last[module] = i
    return gathered


def module_trace(layers: list[list[float]], recompute: bool) -> list[tuple[str, float, str]]:
    """One step's module uses: the forward through every layer, then per layer from the last its
    recomputed forward (with full recompute) and its modules' backward in reverse."""
    uses = [(f"{l}.{k}", n, "F") for l, mods in enumerate(layers) for k, n in enumerate(mods)]
    for l in reversed(range(len(layers))):
        mods = list(enumerate(layers[l]))
        if recompute:
            uses += [(f"{l}.{k}", n, "B") for k, n in mods]
        uses += [(f"{l}.{k}", n, "B") for k, n in reversed(mods)]
    return uses


def zero3_gather_passes(s: Scenario) -> tuple[float, float]:
    """(forward, backward) ZeRO-3 weight gathers per micro-batch, in multiples of the weights:
    DeepSpeed's (collectives per tensor) by its release rule; FSDP gathers a layer once a pass."""
    tr = s.training
    if tr.zero_stage < 3 or tr.zero3_per_layer:
        return 1.0, 1.0
    return deepspeed_gather_passes(s)


def deepspeed_gather_passes(s: Scenario) -> tuple[float, float]:
    """(forward, backward) weight gathers per micro-batch, as multiples of the gathered weights:
    (1, 1) without recompute for a large model, up to (1, 2) with full recompute."""
    from pipesim.costs.layers import layer_ops
    from pipesim.costs.summary import layer_counts
    counts = layer_counts(s)
    kinds = {kind: tuple(o.params for o in layer_ops(s, kind) if o.params >= PERSISTENCE_THRESHOLD)
             for kind, _ in counts}
    return _gather_passes(tuple((kinds[kind], n) for kind, n in counts), s.training.recompute == "full")


@lru_cache(maxsize=256)
def _gather_passes(runs: tuple[tuple[tuple[float, ...], int], ...], recompute: bool) -> tuple[float, float]:
    """deepspeed_gather_passes for layers given as runs of (module element counts, layers): a
    search screens thousands of layouts that share them (memoised)."""
    layers = [list(mods) for mods, n in runs for _ in range(n)]
    total = sum(map(sum, layers))
    if not total:
        return 1.0, 1.0
    got = trace_gathers(module_trace(layers, recompute))
    return got.get("F", 0.0) / total, got.get("B", 0.0) / total


def gradient_buckets(tr, c) -> int:
    """How many collectives reduce stage costs `c`'s gradients: grad_bucket_MB buckets (Megatron's
    DDP, DeepSpeed), one per wrapped layer with FSDP (training.zero3_per_layer); 0 without
    gradients. The engine's DP stream (sim/workload.py) and the closed form share it."""
    if c.grad_bytes <= 0:
        return 0
    if tr.zero3_per_layer:
        return max(1, c.layers)
    # (a stage that exactly fills its buckets must not gain one from float rounding)
    return max(1, math.ceil(c.grad_bytes / (tr.grad_bucket_MB * 1e6) - 1e-9))


def param_allgather_seconds(tr, c, collective) -> float:
    """Seconds of the ZeRO-1/2 parameter all-gather of stage costs `c` after the optimizer step.
    Megatron-Core's distributed optimizer gathers the updated weights bucket by bucket, over the
    buckets its gradients were reduce-scattered in (one _ParamAndGradBuffer bucket holds both), so
    each bucket is a collective that pays its own latency; `collective(kind, nbytes)` times one.
    An MoE stage's expert bytes enter at their bucket-level time ratio (costs/moe.py edp_ratio),
    which is only exact for collectives of that bucket's size."""
    from pipesim.costs.memory import elem_of
    learn = getattr(c, "trainable_params", None)
    # LoRA: only the adapters changed, in the 16-bit compute dtype (pipesim/costs/lora.py)
    n, full = gradient_buckets(tr, c), gathered_weight_bytes(tr, c) if learn is None else learn * elem_of(tr)
    return n * collective("all_gather", full / n) if n and full else 0.0


def param_bucket_bytes(tr) -> float:
    """Bytes of one ZeRO-1/2 parameter all-gather bucket: grad_bucket_MB of gradients holds as many
    parameters, gathered in their 16/32-bit compute copy."""
    from pipesim.costs.memory import elem_of, grad_elem_bytes
    return tr.grad_bucket_MB * 1e6 * elem_of(tr) / grad_elem_bytes(tr)


def weight_gathers(tr, c) -> int:
    """How many all-gathers bring stage costs `c`'s weights in, per pass under ZeRO-3: one per
    parameter tensor (DeepSpeed), one per layer with FSDP."""
    return max(1, c.layers if tr.zero3_per_layer else c.param_tensors)


def gathered_weight_bytes(tr, c) -> float:
    """Unsharded bytes a ZeRO weight all-gather of stage costs `c` moves, at gathered_param_bytes
    each; MoE experts over expert-data parallelism enter at gather_params, their data-parallel-
    equivalent count (a time ratio, costs/moe.py)."""
    params = c.params if getattr(c, "gather_params", None) is None else c.gather_params
    return params * gathered_param_bytes(tr, c)


def gathered_param_bytes(tr, c) -> float:
    """Bytes per parameter a ZeRO weight all-gather moves: the compute copy, FP8 under fp8 ZeRO-3
    (FP8 parameter all-gather, Transformer Engine fp8_model_init / torchao float8 FSDP2), the
    FP8-GEMM weights in FP8 under training.fp8_param_gather, else 16 or 32 bits."""
    from pipesim.costs.fp8 import gathered_bytes_per_param, gemm_dtype, stored_bytes
    from pipesim.costs.memory import elem_of
    if gemm_dtype(tr) == "fp8" and tr.zero_stage >= 3:
        return 1.0     # FP8 weights gathered as such; NVFP4 (fp4 GEMMs) in 16 bits or stored FP4
    if tr.fp8_param_gather and c.params:
        return gathered_bytes_per_param(elem_of(tr), c.fp8_params / c.params, stored_bytes(tr.fp8_recipe))
    return elem_of(tr)


def gather_units(c) -> int:
    """Units a stage's weights are gathered in, one at a time: its layers, and the embedding and
    the LM head each as a unit of its own (FSDP wraps them apart from the blocks; DeepSpeed gathers
    module by module)."""
    return max(1, c.layers) + bool(getattr(c, "has_embedding", False)) + bool(getattr(c, "has_head", False))


def stage_gathered_bytes(s: Scenario, c) -> float:
    """ZeRO-3 gathered weight bytes a running action of stage costs `c` holds beyond the rank's own
    shards (0 unless ZeRO-3 re-gathers every pass): one of its gather_units. DeepSpeed gathers
    module by module with a prefetch bucket (Rajbhandari et al. 2020, Sec. 5.3), FSDP layer by
    layer with the next one prefetched: one unit in use plus one prefetched is live, the second
    being the next action's gather, which the engine issues during this one when it prefetches
    (and the closed form doubles). Dense weights are gathered over the ZeRO shard group, an MoE
    stage's experts over expert-data parallelism (nothing when EDP is 1: they stay whole), at
    their bytes in the gathered dtype."""
    from pipesim.costs.moe_parallel import expert_data_size
    from pipesim.costs.zero_groups import shard_size
    tr = s.training
    if tr.zero_stage < 3 or not tr.reshard_after_forward:
        return 0.0
    dp_shard = shard_size(s.parallel.data * s.parallel.context, tr.zero_replicas)
    experts = c.expert_params
    edp_shard = shard_size(expert_data_size(s), tr.zero_replicas) if experts else 1
    beyond = (c.params - experts) * (1 - 1 / dp_shard) + experts * (1 - 1 / edp_shard)
    return gathered_param_bytes(tr, c) * beyond / gather_units(c)
