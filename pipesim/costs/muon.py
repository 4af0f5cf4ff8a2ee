"""Muon's optimizer step (`training.optimizer: muon`) as Megatron-Core runs it.

Muon (K. Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"; at scale:
Liu et al. 2025, "Muon is Scalable for LLM Training", arXiv 2502.16982) keeps one momentum buffer
per 2-D hidden weight and replaces the update by its orthogonalisation, a quintic Newton-Schulz
iteration run in bf16 (torch.optim.Muon `_zeropower_via_newtonschulz`, PyTorch 2.9+), per step on
X (m x n, m <= n after a transpose):

    A = X Xᵀ                2m²n FLOPs
    B = b·A + c·A A         2m³
    X = a·X + B X           2m²n          -> T·(4m²n + 2m³) for T steps (muon_ns_steps, 5)

Which weights (Megatron-Core megatron/core/optimizer/emerging_optimizers.py `_is_muon_excluded`):
every 2-D weight but the embedding and output layer; Q, K and V apart (`muon_split_qkv`); each
expert's matrices apart (TE GroupedLinear keeps one weight per expert); the router's gate too.
The rest (embeddings, output layer, norms, biases) runs Adam (`muon_scalar_optimizer`).

Tensor parallelism (`muon_tp_mode`, TensorParallelMuon.orthogonalize): duplicated = all-gather the
momentum shard over the tensor group, orthogonalise the whole matrix on every rank, keep the own
shard; blockwise = orthogonalise the shard alone.

Data parallelism: without a distributed optimizer every rank orthogonalises all its matrices.
Megatron-Core's `dist_muon` (megatron/core/optimizer/layer_wise_optimizer.py,
LayerWiseDistributedOptimizer) gives each data-parallel rank whole matrices instead of a flat
shard, bin-packed by Newton-Schulz cost (longest processing time first: largest first onto the
least-loaded rank, per gradient buffer, i.e. per model chunk and for the dense and expert
parameters apart); gradients are reduce-scattered and the updated weights all-gathered as under
ZeRO-1. A rank's Newton-Schulz time is its bin's load: rank 0 takes the largest matrix of every
buffer (ties go to the lowest rank), so the chunk loads add up on it.

Elementwise bytes per Muon-managed parameter (torch.optim.Muon `_single_tensor_muon`, momentum
without Nesterov as Megatron's default muon_nesterov=False; fp32 master, gradient and momentum):
momentum lerp (read m, g; write m) 12; cast to bf16 6; Frobenius norm 2; scale 4; weight decay
(read, write) 8; update (read p, bf16 update; write p) 10 = 42.
The CPU emulator runs the same step (pipesim/emulator/muon.py) and times it as NEWTON_SCHULZ.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from pipesim.costs.collectives import collective_time
from pipesim.costs.ops import Op
from pipesim.costs.topology import placement
from pipesim.scenario.config import Scenario

UPDATE_BYTES = 42                       # per Muon-managed parameter, the table above
EXCLUDED = ("lm_head",)                 # the output layer stays on Adam (the embedding has no matrices)


def managed(op: Op) -> tuple:
    """The (count, rows, cols, row_div, col_div) matrices Muon orthogonalises in `op` (none when
    the op uses weights held elsewhere, as the MTP head the output layer's)."""
    return () if op.name in EXCLUDED or not op.params else op.matrices


def local_matrix_params(ops: list[Op]) -> float:
    """Parameters of `ops` (per GPU) that Muon manages; the op's others (biases) stay on Adam."""
    return sum(c * r * k / (rd * cd) for o in ops for c, r, k, rd, cd in managed(o))


def ns_gemms(rows: float, cols: float, steps: int) -> tuple:
    """The Newton-Schulz GEMMs of one matrix, (batch, M, N, K, dtype): m <= n after the transpose."""
    m, n = sorted((rows, cols))
    return ((1, m, m, n, "bf16"), (1, m, m, m, "bf16"), (1, m, n, m, "bf16")) * steps


def ns_flops(rows: float, cols: float, steps: int) -> float:
    m, n = sorted((rows, cols))
    return steps * (4 * m * m * n + 2 * m ** 3)


def ns_seconds(cm, rows: float, cols: float, steps: int) -> float:
    """One matrix's orthogonalisation on the cost model (GEMM curve, a profile's GEMMs, or the
    roofline), as one op reading and writing the bf16 matrix once per GEMM."""
    m, n = sorted((rows, cols))
    flops = ns_flops(rows, cols, steps)
    nbytes = steps * 2 * (3 * m * n + 3 * m * m)            # bf16 operands and results per step
    gemms = ns_gemms(rows, cols, steps)
    op = Op("newton_schulz", "matmul", flops, 0.0, nbytes, 0.0, gemms_fwd=gemms,
            measure_fwd=tuple(("gemm", dict(m=int(g[1]), k=int(g[3]), n=int(g[2]), dtype="bf16")) for g in gemms))
    return cm.time(op, "fwd").seconds


def matrix_jobs(cm, ops_counts, steps: int, gather_time) -> list[tuple[float, float]]:
    """(Newton-Schulz seconds, tensor-group all-gather seconds) of every matrix in `ops_counts` =
    [(ops, how many times they occur), ...]; `gather_time(bytes)` times an all-gather of the fp32
    momentum over the matrix's tensor group, None for blockwise (each shard alone, no gather)."""
    jobs, memo = [], {}
    for ops, repeats in ops_counts:
        for o in ops:
            for count, rows, cols, rdiv, cdiv in managed(o):
                whole = gather_time is not None and rdiv * cdiv > 1
                key = (rows, cols, rdiv, cdiv, whole)
                if key not in memo:
                    shape = (rows, cols) if gather_time is not None else (rows / rdiv, cols / cdiv)
                    memo[key] = (ns_seconds(cm, *shape, steps), gather_time(rows * cols * 4) if whole else 0.0)
                jobs += [memo[key]] * int(count * repeats)
    return jobs


def step_seconds(jobs: list[tuple[float, float]], bins: int) -> tuple[float, float]:
    """(Newton-Schulz, all-gather) seconds of the most loaded of `bins` data-parallel ranks: each
    matrix gathered then orthogonalised on its owner; the load split between the two by their
    shares of the total."""
    if not jobs:
        return 0.0, 0.0
    load = lpt_max([a + b for a, b in jobs], bins)
    ns, gather = sum(a for a, _ in jobs), sum(b for _, b in jobs)
    return load * ns / (ns + gather), load * gather / (ns + gather)


def lpt_max(times: list[float], bins: int) -> float:
    """The largest bin of a longest-processing-time-first packing of `times` into `bins` (Megatron's
    LayerWiseDistributedOptimizer._compute_per_buffer_param_layout, its numel cap aside)."""
    if bins <= 1 or not times:
        return sum(times)
    if len(times) <= bins:
        return max(times)
    loads = [0.0] * bins
    for t in sorted(times, reverse=True):
        heapq.heapreplace(loads, loads[0] + t)
    return max(loads)


@dataclass(frozen=True)
class MuonParts:
    """What Muon changes in one model chunk's step: the matrix parameters it manages (per GPU)
    and its Newton-Schulz and tensor-group gather seconds on the most loaded rank."""
    active: bool = False
    dense_matrix_params: float = 0.0
    expert_matrix_params: float = 0.0
    ns: float = 0.0
    gather: float = 0.0

    def adam_params(self, dense: float, expert: float) -> tuple[float, float]:
        """(dense, expert) parameters Muon leaves to Adam (none when another optimizer runs)."""
        if not self.active:
            return 0.0, 0.0
        return dense - self.dense_matrix_params, expert - self.expert_matrix_params


def is_expert(op: Op) -> bool:
    return op.name.startswith("expert_")      # routed experts (pipesim/costs/moe.py expert_params)


def muon_split(s: Scenario, cm, layers: list[tuple[list[Op], int]], extras: list[Op], moe, n_moe: int,
               dense_bins: int, expert_bins: int) -> MuonParts:
    """Muon's share of a model chunk of dense `layers` ([(ops, count)]), `n_moe` MoE layers
    (`moe.ops`) and the `extras` (embedding, head, MTP); the dense matrices are packed over
    `dense_bins` ranks, the experts' over `expert_bins` (1 without a distributed optimizer)."""
    if s.training.optimizer != "muon":
        return MuonParts()
    moe_ops = moe.ops if moe is not None and n_moe else []
    dense = layers + [(extras, 1), ([o for o in moe_ops if not is_expert(o)], n_moe)]
    experts = [([o for o in moe_ops if is_expert(o)], n_moe)]
    steps, duplicated = s.training.muon_ns_steps, s.training.muon_tp_mode == "duplicated"

    def gather(group):
        algo = s.parallel.collective
        return (lambda nbytes: collective_time("all_gather", nbytes, group, algo)) if duplicated else None

    ns_d, ag_d = step_seconds(matrix_jobs(cm, dense, steps, gather(placement(s, "tp"))), dense_bins)
    ns_e, ag_e = 0.0, 0.0
    if moe_ops:
        from pipesim.costs.moe_parallel import expert_placement
        ns_e, ag_e = step_seconds(matrix_jobs(cm, experts, steps, gather(expert_placement(s, "etp"))), expert_bins)
    return MuonParts(True, sum(n * local_matrix_params(ops) for ops, n in dense),
                     sum(n * local_matrix_params(ops) for ops, n in experts), ns_d + ns_e, ag_d + ag_e)
