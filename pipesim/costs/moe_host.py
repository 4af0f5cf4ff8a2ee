"""Host time an MoE layer exposes after its dispatcher's device-to-host synchronisation.

Dropless dispatchers need the per-expert token counts on the host before they can size the
receive buffers and the grouped GEMM: Megatron-Core's alltoall dispatcher copies the splits to
the CPU (MoEAlltoAllTokenDispatcher.preprocess: `num_local_tokens_per_expert ...
.to(torch.device("cpu"), non_blocking=True)`, then a stream synchronisation before the
all-to-all needs them); DeepEP's dispatch likewise synchronises with the CPU to learn the
received counts (deepseek-ai/DeepEP README: only with a cached handle "the layout is reused
without CPU synchronization").
The sync drains the CPU's run-ahead: once it returns, the GPU queue is empty and every op up to
the next layer's sync runs in lockstep with the host that issues it —

    host_j = Σ_{i≤j} n_i·h            (n_i kernels of op i, h host seconds per kernel)
    end_j  = max(end_{j−1}, host_j) + d_j
    exposed = end_last − Σ d_j         (0 when the GPU work always outruns the host)

plus the sync's own device-to-host round trip (SYNC_ROUND_TRIP_S), during which the GPU idles.

h = the preset's kernel launch cost (`gpu.kernel_launch_us`, CUDA C++ Best Practices Guide) plus
PyTorch's eager per-op dispatch on the host (TORCH_OP_HOST_S below). Only the forward syncs: the
backward reuses the counts the forward saved. Megatron's Python around the ops (router aux loss,
dispatcher bookkeeping, module hooks) is not in pipesim's op list and so not counted here.
Under full-iteration CUDA graphs (training.cuda_graphs) there is no such sync: a graph capture
admits no host synchronisation, which is why Megatron-Bridge's full-iteration recipes pair it with
fixed per-rank receive buffers (moe_expert_rank_capacity_factor) and paged stashing (Megatron-Core
transformer/moe/paged_stash.py), and the host launches nothing during the step.
"""
from __future__ import annotations

from pipesim.costs.ops import Op

# PyTorch eager host time per op: the PyTorch operator micro-benchmark of a tiny `split` on CUDA,
# 3.3 µs per call (pytorch/pytorch PR #32194, "Forward Execution Time (us) : 3.333" for
# split_M8_N8_parts2_cuda; 2.3 µs after that PR) — the host cost of an op whose GPU work is nil.
TORCH_OP_HOST_S = 3.3e-6
# The sync itself: from the GPU's last kernel before it until the host resumes, a device-to-host
# round trip, measured at 26.1 µs on bare-metal Linux (2x RTX 3090; jingyaogong/minimind PR #837,
# "device->host round trip : 26.11 us", kernel launch 9.0 µs in the same probe). A community
# micro-benchmark on consumer GPUs, the only measured figure found; H100 hosts may differ.
SYNC_ROUND_TRIP_S = 26.1e-6


def kernels_of(op: Op, local_experts: int) -> int:
    """Kernels the host launches for `op` in the forward: Transformer Engine's grouped linear on
    Hopper runs one cuBLAS GEMM per local expert (TE general_grouped_gemm ->
    nvte_multi_stream_cublas_gemm); every other op is one kernel."""
    return max(1, local_experts) if op.name.startswith("expert_fc") else 1


def lockstep_exposed(seq: list[tuple[float, int]], per_kernel: float) -> float:
    """Seconds the GPU idles waiting for the host over `seq` = [(GPU seconds, kernels), ...]
    issued right after a sync (the recurrence in the module docstring); an op with n kernels is
    n equal kernels."""
    host = end = busy = 0.0
    for seconds, n in seq:
        for _ in range(n):
            host += per_kernel
            end = max(end, host) + seconds / n
        busy += seconds
    return max(0.0, end - busy)


def post_sync_sequence(ops: list[Op], fwd_seconds: list[float], local_experts: int,
                       dispatch: float, combine: float) -> list[tuple[float, int]]:
    """The forward ops of one MoE layer in the order they run after the dispatcher's sync:
    permute, dispatch, the experts, combine, unpermute and the rest of the layer, then the next
    layer's attention and router up to its own sync (the layer's ops taken cyclically)."""
    names = [o.name for o in ops]
    start = names.index("permute")
    order = list(range(start, len(ops))) + list(range(start))
    seq: list[tuple[float, int]] = []
    for i in order:
        if names[i] == "unpermute":
            seq.append((combine, 1))
        seq.append((fwd_seconds[i], kernels_of(ops[i], local_experts)))
        if names[i] == "permute":
            seq.append((dispatch, 1))
    return seq


def host_exposed_fwd(s, cm, ops: list[Op], a2a_fwd: float) -> float:
    """Exposed host seconds per MoE layer forward (0 for synchronous hosts, which already pay
    every launch in the cost model, and without expert parallelism: no counts to sync)."""
    gpu = s.system.gpu
    if not gpu.launch_overlaps or s.parallel.expert <= 1 or s.training.cuda_graphs == "full_iteration":
        return 0.0
    local = s.model.num_experts // s.parallel.expert
    seq = post_sync_sequence(ops, [cm.time(o, "fwd").seconds for o in ops], local, a2a_fwd / 2, a2a_fwd / 2)
    return SYNC_ROUND_TRIP_S + lockstep_exposed(seq, gpu.kernel_launch + TORCH_OP_HOST_S)

