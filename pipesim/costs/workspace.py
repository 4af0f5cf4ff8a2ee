"""Working memory a pass holds beyond the activations it keeps: what the memory timeline adds
while a stage's forward or backward runs and releases at its end (pipesim/sim/workload.py).

1. The loss. The logits are the largest tensors of a step (tokens x vocabulary / t), and every
   cross-entropy implementation briefly holds more of them than it keeps for the backward:

   bytes per logit beyond the kept ones   forward  backward
   torch  (F.cross_entropy(logits.float()); torchtitan, eager PyTorch stacks)      6        8
          forward: the 16-bit logits (2), which the caller holds until the loss returns (torchtitan
          train.py deletes `pred` only after loss_fn), and their fp32 copy (4) while log_softmax
          writes the kept fp32 output; backward: nll_loss's fp32 input gradient (4, zero-filled)
          and log_softmax's fp32 gradient (4) while the kept output is still alive
          (aten NLLLoss.cu, SoftMax.cu).
   torch_16bit (F.cross_entropy on the 16-bit logits: NeMo AutoModel's                2        4
          MaskedCrossEntropy with fp32_upcast false): the logits (2) beside the kept 16-bit
          log-softmax; backward: the 16-bit nll and log_softmax gradients (2 + 2).
   torch over tensor-parallel logits (PyTorch's loss_parallel,                       10       12
          torch/distributed/tensor/parallel/loss.py): `_log_softmax` holds the 16-bit logits (2),
          their fp32 cast (4), x - max (4) and exp of it (4) before writing the kept result;
          `_nll_loss_and_log_softmax_backward` holds the zero-filled gradient (4), exp(x) (4) and
          their sum (4) beside the kept log-softmax.
   torch_compiled (the same under torch.compile; costs/layers.py CE_BYTES)             0        2
          no fp32 copy is made: the fused forward reads the kept 16-bit logits, the backward
          writes their 16-bit gradient (2) beside them.
   megatron / megatron_fused (Megatron-Core's vocab-parallel cross-entropy)          2        2
          the fp32 cast of the logits is worked on in place and kept as the softmax
          (megatron/core/tensor_parallel/cross_entropy.py calculate_logits_max,
          calculate_predicted_logits: `-=`, `torch.exp(..., out=)`, `div_`; fused_cross_entropy.py
          likewise): the 16-bit logits (2) stay beside it in the forward; the backward turns the
          kept softmax into the gradient in place and casts it to 16 bits (2).
   te     (Transformer Engine's Triton kernels)                                       0        0
          online softmax over the 16-bit logits, the gradient written into them in place
          (transformer_engine/pytorch/triton/cross_entropy.py): nothing beyond the kept logits.
   flash_attn (flash-attn's CrossEntropyLoss: MPT / llm-foundry)                     0        2
          the forward writes per-row values only; the backward writes the 16-bit gradient into a
          new tensor beside the kept logits (flash_attn/ops/triton/cross_entropy.py,
          inplace_backward False).

   These are for 16-bit logits. Under fp32 training the logits are fp32 and `.float()` returns
   them as they are: the 16-bit copy becomes the fp32 logits themselves and the fp32 cast
   vanishes (torch 4 / 8, torch_16bit as torch, loss parallel 8 / 12, torch_compiled 0 / 4,
   Megatron's 0 / 0: it works in place on the logits it is given) (`ce_working`).
   The backward's loss working set and a recomputed layer's (StageCosts.recompute_working_bytes)
   are not alive together (the loss runs first), so the backward's peak takes the larger.

2. FSDP2's root unit (training.zero3_collectives fsdp2 with fsdp2_ends_in_root): when only the
   blocks are fully_shard-ed one by one and the model itself last, the embedding, the final norm
   and the output layer form the root unit (torchtitan parallelisms/parallelize_llama.py apply_fsdp
   until 2025-07-28, when commit 83e6941 wrapped them on their own, as NeMo AutoModel does too,
   components/moe/parallelizer.py). The root's forward is the whole model's: its gathered weights
   stay from the first layer's forward to the last one's, and likewise through the backward, when
   they are gathered again (reshard_after_forward, FSDP2's default without pipelining; under
   pipelining they stay gathered and count as resident weights). The root reduce-scatters its
   gradients only in the final post-backward callback, so the output layer's unsharded 16-bit
   weight gradient, made first in the backward, is held to its end.
"""
from __future__ import annotations

from dataclasses import dataclass

FP32 = 4


def ce_working(kernel: str, e: int) -> tuple[float, float]:
    """(forward, backward) bytes per logit the cross-entropy `kernel` (costs/layers.py loss_kernel)
    holds beyond the kept ones, for logits of `e` bytes (module docstring, item 1)."""
    cast = FP32 if e < FP32 else 0          # the fp32 copy of 16-bit logits; none of fp32 ones
    upcast = e if e < FP32 else 0           # a 16-bit tensor beside its fp32 working copy
    if kernel == "torch" or (kernel == "torch_16bit" and e == FP32):
        return e + cast, 2 * FP32           # logits + their cast; nll and log_softmax gradients
    if kernel == "torch_16bit":
        return e, 2 * e
    if kernel == "torch_loss_parallel":
        return e + cast + FP32, 3 * FP32    # logits, cast, x - max, exp (the result is kept)
    if kernel == "torch_compiled":
        return 0, e
    if kernel in ("megatron", "megatron_fused"):
        return upcast, upcast
    if kernel == "te":
        return 0, 0
    if kernel == "flash_attn":
        return 0, e
    raise ValueError(f"unknown cross-entropy kernel {kernel!r}")


@dataclass(frozen=True)
class Workspace:
    """Bytes a stage's passes hold beyond their kept activations, per micro-batch."""
    loss_fwd: float = 0.0     # at the loss in the forward
    loss_bwd: float = 0.0     # at the loss in the backward (the backward's peak: max with recompute)
    held_fwd: float = 0.0     # through the whole forward (FSDP2's gathered root unit)
    held_bwd: float = 0.0     # through the whole backward (root unit and its head weight gradient)

    def forward(self) -> float:
        return self.held_fwd + self.loss_fwd

    def backward(self, recompute_working: float) -> float:
        """Beyond `recompute_working`, which the timeline already holds during the backward."""
        return self.held_bwd + max(0.0, self.loss_bwd - recompute_working)


def stage_workspace(s, embedding_ops, head_ops, shard: int) -> Workspace:
    """The Workspace of a stage holding `embedding_ops` (its first stage's) and `head_ops` (the
    last's: final norm, output layer, loss; an MTP depth's loss runs after the main one, so one
    loss's working set is the peak), its weights sharded over `shard` GPUs."""
    loss_f = loss_b = 0.0
    if head_ops:
        loss_f, loss_b = loss_working(s)
    held_f, held_b = fsdp2_root(s, sum(o.params for o in embedding_ops), sum(o.params for o in head_ops), shard)
    return Workspace(loss_fwd=loss_f, loss_bwd=loss_b, held_fwd=held_f, held_bwd=held_b)


def loss_working(s) -> tuple[float, float]:
    """(forward, backward) bytes the cross-entropy over one micro-batch's logits on a GPU holds
    beyond what it keeps."""
    from pipesim.costs.layers import logits_per_gpu, loss_kernel, shapes_of
    sh = shapes_of(s)
    fwd, bwd = ce_working(loss_kernel(s), sh.e)
    logits = logits_per_gpu(sh)
    return fwd * logits, bwd * logits


def fsdp2_root(s, embedding_params: float, head_params: float, shard: int) -> tuple[float, float]:
    """(forward, backward) bytes FSDP2's root unit holds on a stage with `embedding_params` and
    `head_params` of it on this GPU (unsharded counts), sharded over `shard` GPUs: its gathered
    weights beyond the rank's shard, and in the backward the head weight's unsharded gradient
    (module docstring, item 2). Nothing unless the stage re-gathers per pass with the ends in the
    root unit (training.fsdp2_ends_in_root, which the scenario checks allow only under fsdp2)."""
    from pipesim.costs.memory import weight_elem_bytes
    tr = s.training
    if not tr.fsdp2_ends_in_root or not tr.reshard_after_forward or shard <= 1:
        return 0.0, 0.0
    elem = weight_elem_bytes(tr.precision)
    gathered = (embedding_params + head_params) * elem * (1 - 1 / shard)
    return gathered, gathered + head_params * elem
