"""All-to-all overlap between paired micro-batches (MoE expert parallelism).

Megatron-Core's 1F1B A2A overlap (--overlap-moe-expert-parallel-comm; "combined 1F1B") and
DeepSeek's DualPipe (DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.1, Fig. 4) run the forward of
one micro-batch together with the backward of another: layer by layer, the dispatch/combine
all-to-all of one runs on a communication stream while the other computes. Each layer's forward
is attention (F_att) -> dispatch (F_dis) -> MoE block (F_moe) -> combine (F_com), its backward
combine (B_com) -> MoE block (B_moe) -> dispatch (B_dis) -> attention (B_att); DeepSeek-V3's
schedule (arXiv 2412.19437, Sec. 3.2.1, Fig. 4; the same pairing in Megatron-Core's combined
1F1B) overlaps them in four slots, each as long as the longer of its compute and its transfer:
    T_pair = max(F_att, B_com) + max(F_dis, B_moe) + max(F_moe, B_dis) + max(F_com, B_att)
except that the communication kernels hold some SMs while they run (DeepEP's normal kernels:
20 of H100's 132 in Megatron-Core, pipesim/costs/moe_host.py), so compute under a transfer runs
slower (`slot`).
Over a pair of chunks the slots are summed over their layers: attention = everything that is not
an MoE block (dense layers, embedding, head included), dispatch = combine = half the chunk's
all-to-all. The exposed all-to-all is T_pair - (C_F + C_B).

Pairing is a rewrite of a rank's lowered plan: an F followed by a B or I of another micro-batch,
with only sends/receives between them, becomes one step "FB"; the receives between them move
before it, the sends after it (both micro-batches' inputs must be there before the fused step
starts, as in Megatron's combined step). In 1F1B and interleaved 1F1B the gradient such a pair
waits for never depends on the forward it holds back, so the plan stays deadlock free. A B
followed by an F pairs only when no receive lies between them (without pipelining: every step
of a single stage). DualPipeV writes its overlapped pairs as F then B (pipesim/schedules/dualpipe.py).
Holding a forward's send back until the paired backward ends lengthens the pipeline's critical
path: with plain (non-interleaved) 1F1B and several stages the simulated step can get longer,
which is why Megatron-Core runs the combined 1F1B on interleaved schedules.
"""
from __future__ import annotations

from pipesim.sim.workload import KIND_CODE, Cost, Step

PAIR_KIND = "FB"


def slot(compute: float, comm: float, sm_share: float) -> float:
    """One overlap slot: while the all-to-all runs, its kernels hold `sm_share` of the SMs, so the
    compute advances at (1 − sm_share) of its speed (compute-bound kernels scale with the SMs
    they get: wave quantisation, pipesim/costs/gemm.py); what is left after the transfer runs at
    full speed. sm_share 0 gives max(compute, comm)."""
    during = comm * (1.0 - sm_share)
    return comm if compute <= during else comm + compute - during


def pair_cost(f: Cost, b: Cost) -> Cost:
    """The fused step's cost: durations as above, memory deltas of both, TP time of both."""
    cf, cb = f.dur - f.a2a, b.dur - b.a2a
    f_att, b_att = cf - f.moe_block, cb - b.moe_block
    sm = max(f.comm_sm_share, b.comm_sm_share)
    dur = (slot(f_att, b.a2a / 2, sm) + slot(b.moe_block, f.a2a / 2, sm) + slot(f.moe_block, b.a2a / 2, sm)
           + slot(b_att, f.a2a / 2, sm))
    c = Cost(dur, f.tp + b.tp, mem0=f.mem0 + b.mem0, mem1=f.mem1 + b.mem1)
    c.a2a = f.a2a + b.a2a
    c.a2a_exposed = dur - (cf + cb)
    return c


def _pair_step(f: Step, b: Step, key: int) -> Step:
    st = Step.__new__(Step)
    st.kind, st.stage, st.mb, st.key, st.peer = PAIR_KIND, b.stage, b.mb, key, -1
    st.grad_last = b.grad_last
    st.gather, st.compute = f.gather or b.gather, True
    st.rkey = (PAIR_KIND, b.stage, b.mb)
    return st


def pair_row(row: tuple, table: list) -> tuple[tuple, list]:
    """Fuse F->B/I pairs (and B/I->F pairs with no receive between them) of a rank's lowered
    plan; returns the new row and its cost table (the original table plus one entry per distinct
    fused pair of stages)."""
    out, table, keys = [], list(table), {}
    n = len(row)

    def next_compute(i: int) -> int:
        j = i + 1
        while j < n and not row[j].compute:
            j += 1
        return j

    def pairable(i: int) -> int | None:
        """Index of the step op i fuses with, or None."""
        a, j = row[i], next_compute(i)
        if j >= n or row[j].mb == a.mb or table[a.key].a2a + table[row[j].key].a2a <= 0:
            return None
        b = row[j]
        if a.kind == "F" and b.kind in ("B", "I"):
            return j
        # B then F: only with no receive between (the fused step then waits on nobody it did not
        # wait on before, so no cycle can form) and when that F has no B of its own to pair with.
        if (a.kind in ("B", "I") and b.kind == "F" and not any(x.kind.startswith("RECV") for x in row[i + 1:j])
                and pairable(j) is None):
            return j
        return None

    i = 0
    while i < n:
        j = pairable(i) if row[i].kind in ("F", "B", "I") else None
        if j is None:
            out.append(row[i])
            i += 1
            continue
        a, b = row[i], row[j]
        f, bw = (a, b) if a.kind == "F" else (b, a)
        pk = (f.key, bw.key)
        if pk not in keys:
            keys[pk] = len(table)
            table.append(pair_cost(table[f.key], table[bw.key]))
        mid = row[i + 1:j]
        out += [x for x in mid if x.kind.startswith("RECV")]
        out.append(_pair_step(f, bw, keys[pk]))
        out += [x for x in mid if not x.kind.startswith("RECV")]
        i = j + 1
    return tuple(out), table


def exposed_a2a(row, table) -> float:
    """Seconds of all-to-all a rank's plan leaves on its critical compute stream."""
    return sum(table[op.key].a2a_exposed for op in row if op.compute)


assert "FB" not in KIND_CODE


def moe_summary(w, timelines) -> dict:
    """The report's `moe` section: all-to-all total and exposed on the slowest rank, routing."""
    from pipesim.costs.moe import load_factor
    from pipesim.costs.moe_parallel import expert_data_size
    s = w.scenario
    total = max((sum(g.table[op.key].a2a for op in g.steps if op.compute) for g in w.gangs), default=0.0)
    return {"a2a_total_s": total, "a2a_exposed_s": max((tl.a2a_s for tl in timelines), default=0.0),
            "a2a_overlap": s.training.moe_a2a_overlap, "dispatcher": s.training.moe_dispatcher,
            "routing": s.training.moe_routing, "load_factor": load_factor(s),
            "expert_parallel": s.parallel.expert, "expert_tensor_parallel": s.parallel.expert_tensor,
            "expert_data_parallel": expert_data_size(s)}
