"""All-to-all overlap between paired micro-batches (MoE expert parallelism).

Megatron-Core's 1F1B A2A overlap (--overlap-moe-expert-parallel-comm; "combined 1F1B") and
DeepSeek's DualPipe (DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.1, Fig. 4) run the forward of
one micro-batch together with the backward of another: layer by layer, the dispatch/combine
all-to-all of one runs on a communication stream while the other computes. Each layer's forward
is attention (F_att) -> dispatch (F_dis) -> MoE block (F_moe) -> combine (F_com), its backward
combine (B_com) -> MoE block (B_moe) -> dispatch (B_dis) -> attention (B_att); DeepSeek-V3's
schedule (arXiv 2412.19437, Sec. 3.2.1, Fig. 4) pairs them as B_com ‖ F_att, F_dis ‖ B_moe,
B_dis ‖ F_moe, F_com ‖ B_att. pipesim runs Megatron-Core's version of it as two streams with the
dependencies Megatron's TransformerLayerSchedulePlan.run imposes (`two_streams`): the MoE
backward's weight gradients run after its input gradients, under the dispatch backward, and
while a transfer runs its kernels hold SMs (DeepEP's normal kernels: 20 of H100's 132 in
Megatron-Core), so the compute under it advances more slowly — by the factor
pipesim/costs/moe_interference.py derives per pass for its attention part and its MoE block
(persistent GEMMs lose a wave to the held SMs). With no slowdown and no weight-gradient split
this reduces to the four slots
    T_pair = max(F_att, B_com) + max(F_dis, B_moe) + max(F_moe, B_dis) + max(F_com, B_att)
when each slot's longer side is the one the next slot waits for.
A pair of chunks is costed as one layer pair of the chunks' summed work (the makespan scales
with the work, and consecutive layer pairs wait on each other's results): attention =
everything that is not an MoE block (dense layers, embedding, head included), dispatch =
combine = half the chunk's all-to-all. The exposed all-to-all is T_pair - (C_F + C_B).

Pairing is a rewrite of a rank's lowered plan: an F followed by a B or I of another micro-batch,
with only sends/receives between them, becomes one step "FB"; the receives between them move
before it, the sends after it (both micro-batches' inputs must be there before the fused step
starts, as in Megatron's combined step). In 1F1B and interleaved 1F1B the gradient such a pair
waits for never depends on the forward it holds back, so the plan stays deadlock free. A B
followed by an F pairs only when no receive lies between them (without pipelining: every step
of a single stage). DualPipeV writes its overlapped pairs as F then B (pipesim/schedules/dualpipe.py).
Holding a forward's send back until the paired backward ends lengthens the pipeline's critical
path, which is why Megatron-Core runs the combined 1F1B only without pipelining or on interleaved
schedules; the loader refuses plain 1F1B over several stages as Megatron-Core does
(costs/moe_parallel.py check_a2a_overlap).
"""
from __future__ import annotations

from pipesim.sim.workload import KIND_CODE, STEP_COMPUTE, Cost, Step

PAIR_KIND = "FB"


# Megatron-Core's overlapped layer pair (TransformerLayerSchedulePlan.run,
# megatron/core/models/common/model_chunk_schedule_plan.py): the order of each stream and what
# each task waits for on the other. F_att includes the router and permute ("post_attn"), B_dg /
# B_wg are the MoE block's input and weight gradients (`mlp.backward`, then `mlp.backward_dw`
# after the dispatch backward is launched).
COMPUTE_ORDER = (("F_att", ()), ("B_dg", ("B_com",)), ("B_wg", ()), ("F_moe", ("F_dis",)), ("B_att", ("B_dis",)))
COMM_ORDER = (("B_com", ()), ("F_dis", ("F_att",)), ("B_dis", ("B_dg",)), ("F_com", ("F_moe",)))


def two_streams(work: dict, slow: dict | None = None) -> float:
    """Makespan of the overlapped layer pair: a compute and a communication stream, each running
    its tasks in order, a task starting when its stream predecessor and its cross-stream
    dependency are done. While a transfer runs, a compute task advances at 1 / slow[task] of its
    speed (slow: time beside the communication kernels / time alone, default 1; infinite: it
    waits for the transfer, as a cooperative norm kernel does); transfers keep their own speed.
    `work`: seconds per task name."""
    slow = slow or {}
    streams = [list(COMPUTE_ORDER), list(COMM_ORDER)]
    left = {name: work.get(name, 0.0) for order in streams for name, _ in order}
    done: set = set()
    now = 0.0
    while any(streams):
        ready = [s[0][0] if s and all(d in done for d in s[0][1]) else None for s in streams]
        if ready == [None, None]:
            raise RuntimeError("a2a overlap: the layer-pair schedule has a dependency cycle")
        comp, comm = ready
        rate = 1.0 / slow.get(comp, 1.0) if comp and comm is not None and left[comm] > 0 else 1.0
        if comp is None:
            comp_span = float("inf")
        elif left[comp] <= 0:
            comp_span = 0.0
        else:                           # a compute task that waits (rate 0) ends after the transfer
            comp_span = left[comp] / rate if rate > 0 else float("inf")
        spans = [comp_span, left[comm] if comm else float("inf")]
        dt = min(spans)
        if comp:
            left[comp] -= dt * rate
        if comm:
            left[comm] -= dt
        now += dt
        for i, name in enumerate(ready):
            if name is not None and left[name] <= 1e-15:
                done.add(name)
                streams[i].pop(0)
    return now


def pair_time(f_dur: float, f_a2a: float, f_moe: float, b_dur: float, b_a2a: float, b_moe: float,
              b_wgrad: float, f_slow: tuple = (1.0, 1.0), b_slow: tuple = (1.0, 1.0)) -> float:
    """Makespan of one fused F+B pair from the two passes' totals (all-to-all included), their
    all-to-all, MoE-block compute and (backward) MoE weight-gradient seconds: the task split of
    the module docstring, then two_streams."""
    cf, cb = f_dur - f_a2a, b_dur - b_a2a
    work = {"F_att": cf - f_moe, "F_moe": f_moe, "F_dis": f_a2a / 2, "F_com": f_a2a / 2,
            "B_att": cb - b_moe, "B_dg": b_moe - b_wgrad, "B_wg": b_wgrad, "B_com": b_a2a / 2, "B_dis": b_a2a / 2}
    (fa, fm), (ba, bm) = f_slow, b_slow
    return two_streams(work, dict(F_att=fa, F_moe=fm, B_att=ba, B_dg=bm, B_wg=bm))


def pair_cost(f: Cost, b: Cost, layers: int = 1) -> Cost:
    """The fused step's cost: durations as above, memory deltas of both, TP time of both.
    Megatron-Core runs the pair layer by layer, the forward's layer i beside the backward's layer
    L-1-i (TransformerModelChunkSchedulePlan.run: "Phase 1: forward_layer[0] + backward_layer[3]"),
    so the forward's activations grow as the backward's shrink: at the step's start the forward
    holds one of its chunk's `layers` layers, the rest is allocated when it ends, after the
    backward's release (the same net change; the peak one layer above the held micro-batches, not
    a whole micro-batch)."""
    cf, cb = f.dur - f.a2a, b.dur - b.a2a
    dur = pair_time(f.dur, f.a2a, f.moe_block, b.dur, b.a2a, b.moe_block, b.moe_wgrad, f.overlap_slow, b.overlap_slow)
    first = 1.0 / max(1, layers)
    f_start = tuple((cat, delta * first) for cat, delta in f.mem0)
    f_rest = tuple((cat, delta - d0) for (cat, delta), (_, d0) in zip(f.mem0, f_start))
    c = Cost(dur, f.tp + b.tp, mem0=f_start + b.mem0, mem1=b.mem1 + f_rest + f.mem1, cp=f.cp + b.cp)
    c.a2a = f.a2a + b.a2a
    c.a2a_exposed = dur - (cf + cb)
    if dur > 0:      # the two passes' losses beside a DP collective (sim/interference.py)
        c.dp_slow = 1.0 + ((f.dp_slow - 1.0) * f.dur + (b.dp_slow - 1.0) * b.dur) / dur
        # both passes' norm kernels, spread over the pair
        waits = sum(p.dur / p.dp_stall for p in (f, b) if p.dp_stall > 0)
        c.dp_stall = dur / waits if waits else 0.0
    return c


def _pair_step(f: Step, b: Step, key: int) -> Step:
    return Step(STEP_COMPUTE, key, PAIR_KIND, b.stage, b.grad_last, (PAIR_KIND, b.stage, b.mb), -1, b.mb,
                True, f.gather or b.gather)


def pair_row(row: tuple, table: list, layers: dict | None = None) -> tuple[tuple, list]:
    """Fuse F->B/I pairs (and B/I->F pairs with no receive between them) of a rank's lowered
    plan; returns the new row and its cost table (the original table plus one entry per distinct
    fused pair of stages). `layers`: Transformer layers per stage (model chunk), for the pair's
    layer-by-layer memory (pair_cost)."""
    layers = layers or {}
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
            table.append(pair_cost(table[f.key], table[bw.key], layers.get(f.stage, 1)))
        mid = row[i + 1:j]
        out += [x for x in mid if x.kind.startswith("RECV")]
        out.append(_pair_step(f, bw, keys[pk]))
        out += [x for x in mid if not x.kind.startswith("RECV")]
        i = j + 1
    return tuple(out), table


def exposed_a2a(row, table) -> float:
    """Seconds of all-to-all a rank's plan leaves on its critical compute stream."""
    if not any(c is not None and c.a2a_exposed for c in table):
        return 0.0          # no all-to-all (dense models): skip the walk over the plan
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
