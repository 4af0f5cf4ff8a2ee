"""All-to-all overlap between paired micro-batches (MoE expert parallelism).

Megatron-Core's 1F1B A2A overlap (--overlap-moe-expert-parallel-comm; "combined 1F1B") and
DeepSeek's DualPipe (DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.1, Fig. 4) run the forward of
one micro-batch together with the backward of another: layer by layer, the dispatch/combine
all-to-all of one runs on a communication stream while the other computes. For such a pair with
compute C_F, C_B and all-to-all A_F, A_B (each micro-batch still alternates its own compute and
communication), two streams give
    T_pair = max(C_F + C_B, A_F + A_B, C_F + A_F, C_B + A_B)
(the compute stream, the communication stream, and each micro-batch's own chain); the exposed
all-to-all is T_pair - (C_F + C_B).

Pairing is a rewrite of a rank's lowered plan: an F followed by a B or I of another micro-batch,
with only sends/receives between them, becomes one step "FB"; the receives between them move
before it, the sends after it (both micro-batches' inputs must be there before the fused step
starts, as in Megatron's combined step). Pairing F-then-B only (never B-then-F) keeps the plan
deadlock free for 1F1B, interleaved 1F1B and DualPipeV: the gradient a pair waits for never
depends on the forward it holds back. DualPipeV writes its overlapped pairs exactly this way
(pipesim/schedules/dualpipe.py).
"""
from __future__ import annotations

from pipesim.sim.workload import KIND_CODE, Cost, Step

PAIR_KIND = "FB"


def pair_cost(f: Cost, b: Cost) -> Cost:
    """The fused step's cost: durations as above, memory deltas of both, TP time of both."""
    cf, cb = f.dur - f.a2a, b.dur - b.a2a
    dur = max(cf + cb, f.a2a + b.a2a, f.dur, b.dur)
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
    """Fuse F->B/I pairs of a rank's lowered plan; returns the new row and its cost table
    (the original table plus one entry per distinct fused pair of stages)."""
    out, table, keys = [], list(table), {}
    i, n = 0, len(row)
    while i < n:
        op = row[i]
        if op.kind == "F":
            j = i + 1
            while j < n and not row[j].compute:
                j += 1
            if j < n and row[j].kind in ("B", "I") and row[j].mb != op.mb and table[op.key].a2a + table[row[j].key].a2a > 0:
                b = row[j]
                mid = row[i + 1:j]
                pk = (op.key, b.key)
                if pk not in keys:
                    keys[pk] = len(table)
                    table.append(pair_cost(table[op.key], table[b.key]))
                out += [x for x in mid if x.kind.startswith("RECV")]
                out.append(_pair_step(op, b, keys[pk]))
                out += [x for x in mid if not x.kind.startswith("RECV")]
                i = j + 1
                continue
        out.append(op)
        i += 1
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
