"""Zero-bubble family: zb-h1, zb-h2 (Qi et al., ICLR 2024) and zb-v (Qi et al. 2024, V-shape)."""
from __future__ import annotations

from pipesim.schedules.placer import place
from pipesim.schedules.plan import loop_stage_map, v_stage_map
from pipesim.schedules.registry import Layout, need, register


def _costs(lay: Layout) -> dict[str, float]:
    c = lay.costs
    return {"F": c["f"], "I": c["i"], "W": c["w"], "B": c["b"]}


@register("zb-h1", "zbh1", "zb1p", constraint="V = 1")
def zb_h1(lay: Layout):
    # ZB-H1 (Qi et al. ICLR 2024, Sec. 2.1, Fig. 3 top): 1F1B's in-flight limit P - r on rank r
    # (same activation memory), B split into I and W; rank r's W lags its I by at most r others
    # (the later the stage, the longer W waits), which fills the tail; bubble (P-1)(F+I-W).
    need(lay.virtual == 1, "zb-h1", f"V={lay.virtual} chunks per rank")
    P, M = lay.ranks, lay.microbatches
    stage_map = loop_stage_map(P, 1)
    return stage_map, place(P, M, stage_map, _costs(lay), [P - r for r in range(P)], True, list(range(P)))


@register("zb-h2", "zbh2", "zb2p", constraint="V = 1")
def zb_h2(lay: Layout):
    # ZB-H2 (Qi et al. ICLR 2024, Sec. 2.2, Fig. 3 bottom): warm-up extended to 2(P - r) - 1
    # forwards so rank r's first I arrives just as its warm-up ends (memory (2P-1) M_B on rank 0);
    # W lags I by up to 2r others, so rank r ends on 2r+1 W's and the step is a parallelogram.
    need(lay.virtual == 1, "zb-h2", f"V={lay.virtual} chunks per rank")
    P, M = lay.ranks, lay.microbatches
    stage_map = loop_stage_map(P, 1)
    limits = [2 * (P - r) - 1 for r in range(P)]
    return stage_map, place(P, M, stage_map, _costs(lay), limits, True, [2 * r for r in range(P)])


@register("zb-v", "zbv", constraint="V = 2 (V-shape: rank r holds stages r and 2P-1-r)")
def zb_v(lay: Layout):
    # ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", Sec. 4): two chunks per
    # rank in a V, every rank capped at 2P chunk micro-batches between F and I, W lag up to 2r as in
    # zb-h2 (no gaps once M >= 2P with F=I=W, checked in tests). A deferred W keeps most of its
    # activations (the memory model: I frees 6 %), so rank r peaks near 2P + 2r chunk activations,
    # above the paper's 2P (1F1B's peak) on all but the first rank; capping F + pending W at 2P
    # instead, this greedy placement lost 1-6 points of bubble (P 4-16, I 1.2 / W 0.8), so the
    # paper's hand-built V-ZB blocks are not reproduced here.
    need(lay.virtual == 2, "zb-v", f"V={lay.virtual} chunks per rank")
    P, M = lay.ranks, lay.microbatches
    stage_map = v_stage_map(P)
    return stage_map, place(P, M, stage_map, _costs(lay), [2 * P] * P, True, [2 * r for r in range(P)])
