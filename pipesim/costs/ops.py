"""Op records: what one operation of the model costs per micro-batch on one GPU (no times here)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Comm:
    """A collective tied to an op. `bytes` is the full buffer the collective works on (the
    all-reduced tensor, the all-gather output, the reduce-scatter input), per GPU.
    group: "tp" (1D tensor group), "tp_row"/"tp_col"/"tp_depth" (2D/2.5D/3D axes), "dp".
    wgrad_input: the all-gather of a column-parallel linear's sequence-parallel input, again in the
    backward, for its weight gradient (Korthikanti et al. 2022, Sec. 4.2.2); it runs beside the
    input-gradient GEMM (stage.exposed_tp_backward)."""
    kind: str            # all_reduce | all_gather | reduce_scatter | all_to_all | broadcast
    bytes: float
    group: str
    size: int
    count: int = 1       # how many such collectives (SUMMA issues q broadcasts per matmul)
    wgrad_input: bool = False

    @property
    def total_bytes(self) -> float:
        return self.bytes * self.count


@dataclass(frozen=True)
class Op:
    """One operation of a layer for one micro-batch on one GPU.

    kind: "matmul" (tensor cores) or "vector" (elementwise/reduction units).
    flops_*: floating-point operations; bytes_*: device-memory traffic (roofline memory time);
    saved_bytes: activation bytes kept from forward to backward (recompute "none");
    params: parameters of this op held by this GPU;
    dgrad_fraction: share of the backward that computes input gradients (zero-bubble I);
    the rest (weight gradients) is W. attention_core: the core attention (scores, softmax,
    dropout and the product with V, or a fused kernel doing them all), re-run in the backward by
    selective recompute (Korthikanti et al. 2022, Sec. 4.2); selective_dropped_bytes: the saved bytes that
    selective recompute does not keep (the s x s score tensors).
    measure_*: profile lookups (op key, shape) that replace the roofline when measured.
    gemms_*: the GEMMs the op runs, (batch, M, N, K, dtype), timed by the GEMM curve
    (pipesim/costs/gemm.py); flash: (batch·heads, seq, head_dim, causal[, "fp8" | "mxfp8" under FP8
    attention]) of a fused attention, timed by the attention table (pipesim/costs/flash.py);
    fused_attention: (kernel, useful share, ...) of a fused kernel with its own published rate
    (CostModel.fused_rate: "sparse_mla", "scores"), the share being the FLOPs the kernel does that
    the op counts (padding).
    matrices: the op's weight matrices as a matrix optimizer (Muon) sees them, (count, rows,
    cols, row_div, col_div): `count` matrices of full rows x cols (out x in features), split over
    row_div x col_div tensor-parallel ranks.
    serial_bytes_*: device-memory traffic of memory-bound kernels the op runs one after another
    with its main kernels (not under them): timed at the memory roof and added (the SSD scan's
    sequential state passing between its GEMM kernels).
    attention_io: (Q + K + V elements, O elements) a fused attention kernel keeps for its backward,
    on the op that keeps them (one per layer): what FP8 attention quantizes and stores in FP8.
    window_seq: the sequence length a sliding-window attention band (flash's seq = the window)
    runs over, for the GPUs with measured window kernels (flash.window_tflops).
    frozen: its parameters do not learn (LoRA's base weights, pipesim/costs/lora.py): no gradient,
    optimizer state or data-parallel reduction for them.
    seq_mix: ((weight, seq, window_seq), ...) of a fused attention over the pieces of packed
    documents (pipesim/costs/documents.py): the share of its FLOPs at each key length (and band
    sequence length), each timed at that length's table rate instead of flash's `seq`; the weights
    add up to the slowest data-parallel replica's work over the mean (1 when balanced).
    """
    name: str
    kind: str
    flops_fwd: float
    flops_bwd: float
    bytes_fwd: float
    bytes_bwd: float
    saved_bytes: float = 0.0
    params: float = 0.0
    comm_fwd: tuple[Comm, ...] = ()
    comm_bwd: tuple[Comm, ...] = ()
    dgrad_fraction: float = 1.0
    attention_core: bool = False
    selective_dropped_bytes: float = 0.0
    param_tensors: int = 0       # parameter tensors (weight, bias, ...): ZeRO-3 gathers each one
    measure_fwd: tuple = field(default=(), compare=False)
    measure_bwd: tuple = field(default=(), compare=False)
    gemms_fwd: tuple = field(default=(), compare=False)
    gemms_bwd: tuple = field(default=(), compare=False)
    flash: tuple = field(default=(), compare=False)
    fused_attention: tuple = field(default=(), compare=False)
    matrices: tuple = field(default=(), compare=False)
    serial_bytes_fwd: float = 0.0
    serial_bytes_bwd: float = 0.0
    attention_io: tuple = field(default=(), compare=False)
    window_seq: float = 0.0
    seq_mix: tuple = field(default=(), compare=False)
    frozen: bool = False


def is_wgrad(gemm: tuple) -> bool:
    """A weight-gradient GEMM of an op's gemms_bwd: (batch, M, N, K, dtype, "wgrad")."""
    return gemm[5:] == ("wgrad",)


def is_norm(op: Op) -> bool:
    """A layer's LayerNorm / RMSNorm kernel (the ops layers.py times as `layer_norm_*`)."""
    return any(key == "layer_norm_fwd" for key, _ in op.measure_fwd)
