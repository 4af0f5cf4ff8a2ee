"""How much of the distributed optimizer's parameter all-gather the next step's forward hides.

After the optimizer step, ZeRO-1/2 (Megatron-Core's distributed optimizer) all-gathers the updated
weights over the data-parallel group. With `--overlap-param-gather` the gather runs under the
next step's forward, and how much of it hides depends on when each model chunk's gather is issued
(Megatron-LM megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_
interleaving, and megatron/core/distributed/param_and_grad_buffer.py finish_param_sync):

- one chunk per rank: the first bucket is gathered when the chunk's forward starts, and each
  bucket's wait issues the next one, so the gather runs under that one forward;
- interleaved chunks (align_param_gather, the default with virtual stages): chunks 0 and 1 are
  issued at the start of the step, chunk k+1 when chunk k runs its first micro-batch, and each
  bucket is waited on by the forward pre-hook of the module that uses it. So chunk k's gather has
  the forwards of chunk k-1 before it (a micro-batch group of them, P by default) and its own
  first forward to finish in.

The gathers of one rank run one after another on its data-parallel communicator. A chunk's
buckets are taken as used evenly through its first forward; the first is needed as it starts.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

# cost attribute of each compute kind (costs/stage.py StageCosts)
_KIND_COST = {"F": "forward", "B": "backward", "I": "input_grad", "W": "weight_grad", "R": "recompute"}


def first_forwards(row: Iterable, costs: Sequence, speed: float = 1.0) -> tuple:
    """(stage, start_s, forward_s) of each chunk of a rank, in the order its first forward runs in
    plan row `row` (Actions): start_s is the compute before it in the row, forward_s one forward
    of that chunk. Idle time waiting for other ranks is left out, so the hiding it gives is too."""
    chunks = {a.stage for a in row if a.kind == "F"}
    out, seen, t = [], set(), 0.0
    for a in row:
        attr = _KIND_COST.get(a.kind)
        if attr is None:
            continue
        c = costs[a.stage]
        if a.kind == "F" and a.stage not in seen:
            seen.add(a.stage)
            out.append((a.stage, t, c.forward / speed))
            if len(seen) == len(chunks):
                break
        t += getattr(c, attr) / speed
    return tuple(out)


def exposed_param_gather(chunks: Sequence[tuple[float, float, float, int]]) -> float:
    """Seconds the next step's compute waits for the parameter all-gather.

    `chunks`: (gather_s, start_s, forward_s, buckets) per model chunk in the order its first
    forward runs (start_s: compute before that forward). Chunks 0 and 1 are issued at once, chunk
    k >= 2 when chunk k-1 starts its first forward; gathers run one at a time. A chunk's n buckets
    are used evenly through its first forward: bucket j (gathered at (j+1)/n of the gather) is
    needed at j/n of the forward, so the first bucket always waits and the chunk holds the compute
    up by max(gather / n, gather - forward (n-1)/n) past the moment its gather began. Each wait
    delays all the compute after it."""
    delay = 0.0        # how far the compute has been pushed back so far
    free = 0.0         # when the data-parallel communicator is next free
    delay_at = []      # the delay in force when each chunk's first forward started
    for k, (gather, start, forward, buckets) in enumerate(chunks):
        delay_at.append(delay)
        if gather <= 0:
            continue
        issued = 0.0 if k < 2 else chunks[k - 1][1] + delay_at[k - 1]
        begin = max(free, issued)
        free = begin + gather
        n = max(1, buckets)
        delay = max(delay, begin + max(gather / n, gather - forward * (n - 1) / n) - start)
    return delay
