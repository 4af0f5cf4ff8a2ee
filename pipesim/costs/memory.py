"""Static memory per GPU: weights, gradients, optimizer states, with ZeRO sharding.

Mixed-precision Adam keeps 2Ψ bytes of fp16/bf16 weights, 2Ψ of gradients and KΨ = 12Ψ of fp32
master weights, momentum and variance (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1: 16Ψ in all).
ZeRO-1 shards the optimizer states over the N_d data-parallel ranks, ZeRO-2 also the gradients,
ZeRO-3 also the weights (ibid., Sec. 5.1, Fig. 1). fp32 training: 4Ψ + 4Ψ + 8Ψ (Adam m, v).
SGD with momentum keeps one state (plus fp32 master weights under mixed precision); so does Muon
for the matrices it manages, Adam's two for the rest (pipesim/costs/muon.py).
PyTorch FSDP2 under a MixedPrecisionPolicy keeps no 16-bit copy: the sharded parameter stays fp32
and is cast to the compute dtype on each all-gather, and its sharded gradient is fp32 too
(torch.distributed.fsdp.fully_shard: FSDPParam keeps `_sharded_param_data` in the original dtype;
the reduce-scatter output is cast back to it), so the shard is the master copy: 4Ψ + 4Ψ + 8Ψ
(Adam) over the group, whatever the reduce dtype (`fp32_shards`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StaticMemory:
    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer

    def plus(self, other: "StaticMemory") -> "StaticMemory":
        return StaticMemory(self.weights + other.weights, self.gradients + other.gradients,
                            self.optimizer + other.optimizer)


def weight_elem_bytes(precision: str) -> int:
    """Bytes of a weight (or gradient) element: fp32 / tf32 training keeps fp32 weights, mixed
    precision 16-bit ones (FP8 training keeps BF16 weights)."""
    return 4 if precision in ("fp32", "tf32") else 2


def elem_of(tr) -> int:
    """Bytes of a 16/32-bit weight or gradient element (FP8 training keeps BF16 weights)."""
    return weight_elem_bytes(tr.precision)


def grad_elem_bytes(tr) -> int:
    """Bytes per element of the gradient buffer the backward accumulates into."""
    return 4 if tr.grad_reduce_in_fp32 else elem_of(tr)


def optimizer_bytes_per_param(optimizer: str, precision: str, moment_bytes: int = 4, master_bytes: int = 4) -> float:
    """`moment_bytes`: bytes of each Adam moment (4; 2 with BF16 states, training.optimizer_state_dtype:
    Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype/--exp-avg-sq-dtype bf16; DeepSeek-V3
    technical report Sec. 3.3.2 keeps AdamW's moments in BF16, the master weights in FP32).
    `master_bytes`: of each master weight (4; 2 when only its low 16 bits are kept beside the BF16
    parameter, training.master_weights remainders: Megatron-Core optimizer_config.py
    store_param_remainders, "excluding the 16 bits shared with the BF16 parameters")."""
    mixed = precision not in ("fp32", "tf32")          # TF32 trains on fp32 weights
    states = 2 * moment_bytes if optimizer == "adam" else 4   # Adam: m and v; SGD, Muon: fp32 momentum
    return states + (master_bytes if mixed else 0)    # + the master weights when mixed


def static_memory(params: float, precision: str, optimizer: str, zero_stage: int, dp: int,
                  resident_weights: bool = False, adam_params: float = 0.0, moment_bytes: int = 4,
                  fp32_shards: bool = False, master_bytes: int = 4) -> StaticMemory:
    """Weights, gradients and optimizer states per GPU. `resident_weights`: ZeRO-3 weights that stay
    gathered from a micro-batch's forward to its backward (FSDP reshard_after_forward=False); at the
    peak every layer holds them (pipelined: every chunk has a micro-batch in flight), so they count
    unsharded. `adam_params`: those of `params` that Muon leaves to Adam; `moment_bytes`: per Adam
    moment, `master_bytes` per master weight. `fp32_shards`: ZeRO-3 as PyTorch FSDP2 keeps it (module
    docstring): fp32 weight and gradient shards, no separate master copy (resident weights add their
    16-bit gathered copy when there is a group to gather over)."""
    elem = weight_elem_bytes(precision)
    weights, grads = params * elem, params * elem
    opt = (params - adam_params) * optimizer_bytes_per_param(optimizer, precision, moment_bytes, master_bytes) + \
        adam_params * optimizer_bytes_per_param("adam", precision, moment_bytes, master_bytes)
    if fp32_shards and zero_stage >= 3 and elem < 4:
        opt -= 4 * params                                 # the fp32 shard is the master copy
        shard = 4 * params / dp
        return StaticMemory(shard + (weights if resident_weights and dp > 1 else 0.0), shard, opt / dp)
    if zero_stage >= 1:
        opt /= dp
    if zero_stage >= 2:
        grads /= dp
    if zero_stage >= 3 and not resident_weights:
        weights /= dp
    return StaticMemory(weights, grads, opt)


def frozen_memory(params: float, elem: int, zero_stage: int, dp: int, resident_weights: bool) -> StaticMemory:
    """Frozen weights (LoRA's base model, pipesim/costs/lora.py): the 16/32-bit copy alone, no
    gradient and no optimizer state (Hu et al. 2021, Sec. 4.2: "we do not need to store the
    optimizer states for the frozen parameters", GPT-3 175B's training memory 1.2 TB -> 350 GB).
    ZeRO-3 / FSDP shards them like any weight (FSDP shards every parameter of a wrapped module,
    trainable or not)."""
    sharded = zero_stage >= 3 and not resident_weights
    return StaticMemory(params * elem / (dp if sharded else 1), 0.0, 0.0)


def static_bytes_per_param(s) -> float:
    """Weights + gradients + optimizer bytes per parameter of scenario `s` over its data-parallel
    group (the partitioner's memory budget per parameter)."""
    tr = s.training
    if tr.lora_rank:        # the adapters are a tiny share: the frozen weights set the budget
        return frozen_memory(1.0, weight_elem_bytes(tr.precision), tr.zero_stage, s.parallel.data,
                             not tr.reshard_after_forward).total
    return static_memory(1.0, tr.precision, tr.optimizer, tr.zero_stage, s.parallel.data,
                         not tr.reshard_after_forward, moment_bytes=s.moment_bytes,
                         fp32_shards=tr.fsdp2, master_bytes=s.master_bytes).total
