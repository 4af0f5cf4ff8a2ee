"""Loop-placed schedules (stage s on rank s % P): gpipe, 1f1b, interleaved-1f1b, looped-bfs."""
from __future__ import annotations

from pipesim.schedules.actions import Action
from pipesim.schedules.plan import loop_stage_map
from pipesim.schedules.registry import Layout, need, register


@register("gpipe", constraint="V = 1 (use looped-bfs for V > 1)")
def gpipe(lay: Layout):
    """Huang et al., GPipe, NeurIPS 2019: all forwards, then all backwards (peak in-flight = M)."""
    need(lay.virtual == 1, "gpipe", f"V={lay.virtual} chunks per rank")
    P, M = lay.ranks, lay.microbatches
    rows = [[Action(r, "F", m) for m in range(M)] + [Action(r, "B", m) for m in range(M)] for r in range(P)]
    return loop_stage_map(P, 1), rows


def one_f_one_b_row(r: int, P: int, M: int) -> list[Action]:
    # PipeDream-Flush / 1F1B (Narayanan et al. SC'21 Sec. 2.2.1): rank r warms up with P-1-r
    # forwards, then alternates one forward and one backward, then drains; in-flight <= P - r.
    warm = min(P - 1 - r, M)
    row = [Action(r, "F", m) for m in range(warm)]
    for k in range(M - warm):
        row += [Action(r, "F", warm + k), Action(r, "B", k)]
    row += [Action(r, "B", m) for m in range(M - warm, M)]
    return row


@register("1f1b", constraint="V = 1 (use interleaved for V > 1)")
def one_f_one_b(lay: Layout):
    need(lay.virtual == 1, "1f1b", f"V={lay.virtual} chunks per rank")
    P, M = lay.ranks, lay.microbatches
    return loop_stage_map(P, 1), [one_f_one_b_row(r, P, M) for r in range(P)]


def group_table(M: int, V: int, N: int) -> list[tuple[int, int]]:
    """Megatron-Core's order of (micro-batch, chunk) forwards on every rank (schedules.py
    get_schedule_table): micro-batches in groups of N; each group runs through chunk 0, then 1, ...;
    the last group holds whatever remains. The backward walks the same table with the chunks
    reversed. N = P is the SC'21 schedule (Narayanan et al. Sec. 2.2); N > P is Llama 3's
    "set N flexibly" (Dubey et al. 2024, Sec. 3.3.2, Fig. 6)."""
    table = []
    for first in range(0, M, N):
        last = min(first + N, M)
        table += [(m, c) for c in range(V) for m in range(first, last)]
    return table


def check_group(P: int, M: int, N: int) -> str | None:
    """Why N contiguous micro-batches per chunk cannot run on P ranks with M micro-batches, or None.
    Megatron-Core refuses N outside [P, M], and a last group of fewer than P micro-batches (its
    chunk-to-chunk hand-off would wait on the pipeline: dependency bubbles)."""
    if not P <= N <= M:
        return f"the micro-batch group N={N} must lie in [P={P}, M={M}]"
    if 0 < M % N < P:
        return (f"M={M} mod N={N} leaves a last group of {M % N} micro-batches, fewer than P={P}: it must "
                f"be 0 or at least P")
    return None


@register("interleaved", "interleaved-1f1b", "interleaved1f1b",
          constraint="V = 1 is plain 1f1b; V > 1 needs M % P == 0 because micro-batches enter in rounds of P "
                     "per chunk, or with a micro-batch group N (Megatron-Core microbatch_group_size_per_vp_stage) "
                     "P <= N <= M and M mod N = 0 or >= P (Narayanan et al. SC'21 Sec. 2.2; Megatron-LM imposes "
                     "the same)")
def interleaved(lay: Layout):
    P, M, V = lay.ranks, lay.microbatches, lay.virtual
    if V == 1:
        return one_f_one_b(lay)
    N = lay.group or P
    if lay.group is None:
        need(M % P == 0, "interleaved", f"M={M} is not a multiple of P={P}")
    else:
        problem = check_group(P, M, N)
        need(problem is None, "interleaved", problem or "")
    total = M * V  # chunk-forwards per rank
    table = group_table(M, V, N)

    rows = []
    for r in range(P):
        # warm-up: (V-1)*N forwards to reach the last chunk, plus 2 per hop to the last rank
        # (Narayanan et al. SC'21, interleaved schedule; Megatron-Core get_pp_rank_microbatches)
        # Megatron-LM before Megatron-Core (legacy_all_warmup): with M == P every forward first,
        # then every backward ("Run all forward passes and then all backward passes if number of
        # microbatches is just the number of pipeline stages"); Megatron-Core
        # (schedules.get_pp_rank_microbatches) and torch's ScheduleInterleaved1F1B have no such case
        warm = total if lay.legacy_all_warmup and M == P else min((V - 1) * N + 2 * (P - 1 - r), total)
        fwd = [Action(c * P + r, "F", m) for m, c in table]
        bwd = [Action((V - 1 - c) * P + r, "B", m) for m, c in table]
        row = fwd[:warm]
        for k in range(total - warm):
            row += [fwd[warm + k], bwd[k]]
        row += bwd[total - warm:]
        rows.append(row)
    return loop_stage_map(P, V), rows


@register("looped-bfs", "loopedbfs", "bfs", constraint="any P, M, V")
def looped_bfs(lay: Layout):
    """Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2023: each chunk runs all micro-batches
    before the next chunk; backward in reverse chunk order (peak in-flight = V*M)."""
    P, M, V = lay.ranks, lay.microbatches, lay.virtual
    rows = []
    for r in range(P):
        chunks = [c * P + r for c in range(V)]
        row = [Action(s, "F", m) for s in chunks for m in range(M)]
        row += [Action(s, "B", m) for s in reversed(chunks) for m in range(M)]
        rows.append(row)
    return loop_stage_map(P, V), rows
