"""Tensor-parallel algorithms: how each matmul's operands are sharded and what it communicates.

1D  - Megatron (Shoeybi et al. 2019, Sec. 3): column-parallel then row-parallel linear; one
      all-reduce per block in forward (after the row-parallel matmul) and one in backward (of the
      column-parallel input gradient). With sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2)
      each all-reduce becomes an all-gather + reduce-scatter pair and norms/dropouts are sharded.
2D  - Optimus (Xu et al. 2021, "An Efficient 2D Method for Training Super-Large Deep Learning
      Models", Sec. 3, SUMMA): t = q*q; A, W and C all split q x q; each matmul runs q steps, each
      broadcasting an A block along the row and a W block along the column. Backward does two such
      products (dA = dC W^T, dW = A^T dC) with broadcasts and reduces of the same sizes.
2.5D- Tesseract (Wang et al. 2021, "Tesseract: Parallelize the Tensor Parallelism Efficiently",
      Sec. 3): t = q*q*d; the batch is split over d layers of q x q grids, W split q x q and
      replicated over depth; SUMMA within each layer; weight gradients all-reduced over depth.
3D  - Bian et al. 2021, "Maximizing Parallelism in Distributed Training for Huge Neural Networks",
      Sec. 3: t = q^3; A and W all-gathered along one axis each, C reduce-scattered along the third;
      backward mirrors it (two products).
"""
from __future__ import annotations

from dataclasses import dataclass

from pipesim.costs.ops import Comm


@dataclass(frozen=True)
class TensorSplit:
    mode: str
    size: int            # GPUs in the tensor group
    q: int               # grid side (1D: = size)
    depth: int = 1       # 2.5D depth
    sequence_parallel: bool = False

    @property
    def head_div(self) -> int:
        """Split of attention heads / MLP columns (the 'inner' dimension)."""
        return self.q

    @property
    def token_div(self) -> int:
        """Split of the token dimension for tensors outside the attention/MLP cores
        (norm inputs, dropout masks, residuals): 1D shards them only with sequence parallelism;
        2D/2.5D/3D shard every activation over the whole group."""
        if self.mode == "1d":
            return self.size if self.sequence_parallel else 1
        return self.size // self.head_div

    @property
    def weight_div(self) -> int:
        """How many ways each weight matrix is split (2.5D replicates over depth)."""
        return {"1d": self.size, "2d": self.size, "2.5d": self.q * self.q, "3d": self.size}[self.mode]

    def matmul_comms(self, role: str, a_bytes: float, w_bytes: float, c_bytes: float, regather: bool = True):
        """Forward and backward collectives of one matmul C = A @ W.

        role: "column" (1D: output dim split; qkv, fc1) or "row" (1D: input dim split; proj, fc2).
        a_bytes, w_bytes, c_bytes: full (unsharded) operand sizes in bytes.
        regather: with sequence parallelism a column-parallel linear keeps only its input's
        sequence shard and all-gathers it again in the backward for its weight gradient
        (Korthikanti et al. 2022, Sec. 4.2.2; Megatron-Core tensor_parallel/layers.py
        LinearWithGradAccumulationAndAsyncCommunication.backward, Transformer Engine's bulk
        overlap of it); False when the gathered input is kept (training.tp_keeps_gathered_input).
        Returns (fwd, bwd) tuples of Comm.
        """
        if self.size == 1:
            return (), ()
        n = self.size
        if self.mode == "1d":
            if self.sequence_parallel:
                if role == "column":   # gather the sharded input; reduce-scatter its gradient
                    again = (Comm("all_gather", a_bytes, "tp", n, wgrad_input=True),) if regather else ()
                    return (Comm("all_gather", a_bytes, "tp", n),), again + (Comm("reduce_scatter", a_bytes, "tp", n),)
                return (Comm("reduce_scatter", c_bytes, "tp", n),), (Comm("all_gather", c_bytes, "tp", n),)
            if role == "column":       # Megatron's f operator: identity fwd, all-reduce bwd
                return (), (Comm("all_reduce", a_bytes, "tp", n),)
            return (Comm("all_reduce", c_bytes, "tp", n),), ()   # g operator: all-reduce fwd
        q = self.q
        if self.mode == "2d":
            # q SUMMA steps; per step a block of A (|A|/q^2) and of W (|W|/q^2) broadcast over q GPUs.
            fwd = (Comm("broadcast", a_bytes / (q * q), "tp_row", q, count=q),
                   Comm("broadcast", w_bytes / (q * q), "tp_col", q, count=q))
            bwd = (Comm("broadcast", c_bytes / (q * q), "tp_row", q, count=q),
                   Comm("broadcast", w_bytes / (q * q), "tp_col", q, count=q),
                   Comm("reduce_scatter", a_bytes / q, "tp_row", q),
                   Comm("reduce_scatter", w_bytes / q, "tp_col", q))
            return fwd, bwd
        if self.mode == "2.5d":
            d = self.depth
            fwd = (Comm("broadcast", a_bytes / (q * q * d), "tp_row", q, count=q),
                   Comm("broadcast", w_bytes / (q * q), "tp_col", q, count=q))
            bwd = (Comm("broadcast", c_bytes / (q * q * d), "tp_row", q, count=q),
                   Comm("broadcast", w_bytes / (q * q), "tp_col", q, count=q),
                   Comm("reduce_scatter", a_bytes / (q * d), "tp_row", q),
                   Comm("reduce_scatter", w_bytes / q, "tp_col", q),
                   Comm("all_reduce", w_bytes / (q * q), "tp_depth", d))
            return fwd, bwd
        # 3D: gather A over one axis and W over another, reduce-scatter C over the third.
        fwd = (Comm("all_gather", a_bytes / (q * q), "tp_row", q),
               Comm("all_gather", w_bytes / (q * q), "tp_col", q),
               Comm("reduce_scatter", c_bytes / (q * q), "tp_depth", q))
        bwd = (Comm("all_gather", c_bytes / (q * q), "tp_depth", q),
               Comm("reduce_scatter", a_bytes / (q * q), "tp_row", q),
               Comm("reduce_scatter", w_bytes / (q * q), "tp_col", q))
        return fwd, bwd


def tensor_split(parallel) -> TensorSplit:
    t, mode = parallel.tensor, parallel.tensor_mode
    if mode == "1d":
        return TensorSplit("1d", t, t, sequence_parallel=parallel.sequence_parallel)
    if mode == "2d":
        return TensorSplit("2d", t, round(t ** 0.5))
    if mode == "2.5d":
        d = parallel.tensor_depth
        return TensorSplit("2.5d", t, round((t // d) ** 0.5), depth=d)
    return TensorSplit("3d", t, round(t ** (1 / 3)))
