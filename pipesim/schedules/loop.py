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


@register("interleaved", "interleaved-1f1b", "interleaved1f1b",
          constraint="V = 1 is plain 1f1b; V > 1 needs M % P == 0 because micro-batches enter in rounds of P "
                     "per chunk (Narayanan et al. SC'21 Sec. 2.2; Megatron-LM imposes the same)")
def interleaved(lay: Layout):
    P, M, V = lay.ranks, lay.microbatches, lay.virtual
    if V == 1:
        return one_f_one_b(lay)
    need(M % P == 0, "interleaved", f"M={M} is not a multiple of P={P}")
    total = M * V  # chunk-forwards per rank

    def fwd(r: int, k: int) -> Action:
        # k-th forward of rank r: chunks advance every P micro-batches, rounds of P*V (Megatron order)
        chunk = (k // P) % V
        return Action(chunk * P + r, "F", (k // (P * V)) * P + k % P)

    def bwd(r: int, k: int) -> Action:
        chunk = V - 1 - (k // P) % V
        return Action(chunk * P + r, "B", (k // (P * V)) * P + k % P)

    rows = []
    for r in range(P):
        # warm-up: (V-1)*P forwards to reach the last chunk, plus 2 per hop to the last rank
        # (Narayanan et al. SC'21, interleaved schedule; Megatron-LM get_num_warmup_microbatches)
        # M == P: every forward first, then every backward ("Run all forward passes and then all
        # backward passes if number of microbatches is just the number of pipeline stages")
        warm = total if M == P else min((V - 1) * P + 2 * (P - 1 - r), total)
        row = [fwd(r, k) for k in range(warm)]
        for k in range(total - warm):
            row += [fwd(r, warm + k), bwd(r, k)]
        row += [bwd(r, k) for k in range(total - warm, total)]
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
