"""Closed-form step time and memory from the stage costs: the screening model of `search` (and
`--engine analytic` for sweeps/validation). It shares the cost model with the simulator but
replaces the event simulation by the schedules' bubble formulas, so it is ~100x faster and
rougher: use it to discard hopeless layouts, then simulate the finalists.

step = M · T_rank - MoE all-to-all overlap saving + bubble + pipeline fill/drain p2p + blocking p2p
       + exposed DP/ZeRO communication (counted as the engine issues it) + per-step fixed ops
"""
from __future__ import annotations

from pipesim.costs.collectives import collective_time, p2p_time
from pipesim.costs.fp8 import gemm_dtype
from pipesim.model_stages import stage_costs_for as stage_costs
from pipesim.costs.summary import iteration_flops
from pipesim.costs.topology import placement, stage_link
from pipesim.costs.tp_overlap import userbuffers_bytes
from pipesim.costs.param_gather import exposed_param_gather
from pipesim.costs.zero3_reuse import (gathered_weight_bytes, gradient_buckets, param_allgather_seconds,
                                       stage_gathered_bytes, weight_gathers, zero3_gather_passes)
from pipesim.costs.zero_groups import shard_size, zero_collective_time
from pipesim.schedules.registry import legacy_warmup
from pipesim.sim.interference import lost_beside

V_SHAPE = ("zb-v", "dualpipe-v")
# schedules that run the weight-gradient pass W apart from the input-gradient pass I
SPLIT_W = ("zb-h1", "zb-h2") + V_SHAPE


def rank_chunks(s, stages) -> list[list]:
    """Stages held by each pipeline rank: loop placement k % P, or the V shape (r, 2P-1-r)."""
    P = s.parallel.pipeline
    if s.training.schedule in V_SHAPE and len(stages) == 2 * P:
        return [[stages[r], stages[2 * P - 1 - r]] for r in range(P)]
    return [[st for st in stages if st.stage % P == r] for r in range(P)]


def bubble_time(schedule: str, P: int, V: int, f, i, w, slow: int | None = None) -> float:
    """Idle time of the bottleneck rank per step. f, i, w: per pipeline rank, the per-micro-batch
    forward, input-grad and weight-grad times summed over its chunks (lists, or one float for
    uniform stages). With uniform stages:
    GPipe / 1F1B: (p-1)(F+B)            Narayanan et al. SC'21, Sec. 2.2.1 (fraction (p-1)/m)
    interleaved / looped: (p-1)(F+B)/v   ibid., Sec. 2.2.2 (fraction (p-1)/(v·m))
    ZB-H1: (p-1)(F+I-W), ZB-H2: (p-1)(F+I-2W) (>= 0)   Qi et al. ICLR'24 "Zero Bubble", Sec. 3.1
    ZB-V / DualPipe-V: as ZB-H2 on one chunk (V = 2)   ibid., Sec. 6
    With unequal stages the (p-1) copies of the bottleneck's time become the other ranks' times:
    fill and drain pass one micro-batch through every rank once, the steady state runs at the
    bottleneck's pace (critical path = (M-1)·T_max + Σ_r T_r for GPipe/1F1B).
    """
    if P <= 1:
        return 0.0
    if not isinstance(f, (list, tuple)):
        f, i, w = [f] * P, [i] * P, [w] * P
    if slow is None:
        slow = max(range(P), key=lambda r: f[r] + i[r] + w[r])
    others = [r for r in range(P) if r != slow]

    def total(per):
        return sum(max(0.0, per(r)) for r in others)

    if schedule == "zb-h1":
        return total(lambda r: f[r] + i[r] - w[r])
    if schedule == "zb-h2":
        return total(lambda r: f[r] + i[r] - 2 * w[r])
    if schedule in V_SHAPE:
        return total(lambda r: f[r] + i[r] - 2 * w[r]) / V
    if schedule in ("interleaved", "looped-bfs"):
        return total(lambda r: f[r] + i[r] + w[r]) / V
    return total(lambda r: f[r] + i[r] + w[r])


def in_flight(schedule: str, P: int, V: int, M: int, r: int, group: int | None = None,
              legacy: bool = False) -> float:
    """Micro-batch activations (in units of one rank's full set, all chunks) held at the peak.
    GPipe: all M (Huang et al. 2019); 1F1B / ZB-H1: p - r (Narayanan et al. 2021 PipeDream-Flush);
    interleaved: Megatron's warm-up of 2(p-r-1) + (v-1)N + 1 chunk-micro-batches (N = the
    micro-batch group, default p), /v in rank units (all M·v when m = p under `legacy`:
    Megatron-LM before Megatron-Core then ran every forward first, schedules/registry.py legacy_warmup);
    ZB-H2: 2(p-r)-1 (Qi et al. ICLR'24, Table 2: about 2x 1F1B); ZB-V, DualPipeV: p chunk-pairs
    (ibid. Sec. 6; the memory peak counts their two chunks apart: v_chunk_in_flight)."""
    if schedule == "gpipe" or schedule == "looped-bfs":
        return M
    if schedule == "interleaved" and V > 1:
        return M if legacy and M == P else min(M * V, 2 * (P - r - 1) + (V - 1) * (group or P) + 1) / V
    if schedule == "zb-h2":
        return min(M, 2 * (P - r) - 1)
    if schedule in V_SHAPE:
        return min(M, P)
    return min(M, P - r)


def v_chunk_in_flight(schedule: str, P: int, M: int, r: int, down: bool) -> int:
    """V-shaped schedules: micro-batches whose activations one chunk of rank r holds at the peak -
    the down-leg chunk (stage r) or the up-leg one (stage 2P-1-r) - counted until the activations
    are freed (by W when the backward is split), as pipesim's generators place them (the
    simulator's peaks, tests/test_whatif_analytic.py). DualPipeV: 2P - r and r + 1, 2P + 1 in all
    (DeepSeek-AI's DualPipe README, table: PP + 1 activations, 2P + 1 chunks); ZB-V: up to 2P on
    the down leg and its W lag 2r + 1 on the up leg (schedules/zero_bubble.py). Per chunk, because
    a V's first and last chunks differ (embedding, head, MTP): both on rank 0."""
    if schedule == "dualpipe-v":
        n = 2 * P - r if down else r + 1
    else:
        n = 2 * P if down else 2 * r + 1
    return min(M, n)


def a2a_overlap_saving(s, chunks, r: int) -> float:
    """Seconds per step that MoE all-to-all overlap (training.moe_a2a_overlap) saves on pipeline
    rank r: each steady-state forward runs paired with another micro-batch's backward as the
    engine pairs them (sim/a2a_overlap.py, one layer pair of the chunks' summed work per pair),
    saving F + B - T_pair; the warm-up forwards (in_flight) and the cool-down backwards run alone."""
    from pipesim.sim.a2a_overlap import pair_time
    P, V, M = s.parallel.pipeline, s.parallel.virtual_stages, s.num_microbatches
    sched = s.training.schedule
    if not s.training.moe_a2a_overlap or not any(c.ep_comm_fwd or c.ep_comm_bwd for c in chunks):
        return 0.0
    saved = 0.0
    for c in chunks:       # a chunk paired with itself stands for the rank's pairs (chunks alike)
        pair = pair_time(c.forward, c.ep_comm_fwd, c.moe_block_fwd, c.backward, c.ep_comm_bwd, c.moe_block_bwd,
                         c.moe_block_wgrad, c.moe_overlap_slow_fwd, c.moe_overlap_slow_bwd)
        saved += max(0.0, c.forward + c.backward - pair)
    warmup = in_flight(sched, P, V, M, r, s.training.microbatch_group_size, legacy_warmup(s)) * V - 1
    pairs = max(0.0, M * V - warmup) / V          # per chunk
    return pairs * saved


def first_forward_starts(s, chunks) -> tuple[list, list]:
    """(start, forward) seconds of each of a rank's chunks' first forward, with no idle: the
    interleaved schedule runs a micro-batch group (P by default) of each chunk before the next
    (schedules/loop.py), looped-bfs every micro-batch; other schedules are counted as reaching
    the next chunk after one forward (the least hiding). The engine reads them off the plan
    (costs/param_gather.py first_forwards)."""
    P, M, sched = s.parallel.pipeline, s.num_microbatches, s.training.schedule
    n = {"interleaved": min(s.training.microbatch_group_size or P, M), "looped-bfs": M}.get(sched, 1)
    forwards = [c.forward for c in chunks]
    return [n * sum(forwards[:k]) for k in range(len(chunks))], forwards


def zero3_pass_gather(s, stages_of_rank, zero) -> float:
    """Seconds of one pass's ZeRO-3 weight all-gathers of a rank's stages: one ring all-gather per
    parameter tensor (per layer with FSDP), each paying its ring latencies; `zero(kind, nbytes,
    algorithm)` times one collective inside the sharding group."""
    tr = s.training
    shard = shard_size(s.parallel.data * s.parallel.context, tr.zero_replicas)
    gather = 0.0
    for st in stages_of_rank:
        wbytes = gathered_weight_bytes(tr, st)
        n = weight_gathers(tr, st)
        g = n * zero("all_gather", wbytes / n, "ring") if wbytes else 0.0
        if tr.zero3_gather_GBps:       # the framework's own gather rate, when it is the slower
            g = max(g, wbytes * (1 - 1 / shard) / (tr.zero3_gather_GBps * 1e9))
        gather += g
    return gather


def dp_exposed(s, stages_of_rank, backward_last: float) -> tuple[float, float, float, float, float]:
    """(exposed seconds per step, total seconds) of data-parallel gradient/parameter traffic, the
    seconds of one pass's ZeRO-3 gather a prefetch can run ahead (0 without one), and the seconds
    of its gradient reductions and of its weight gathers that run beside compute (what slows that
    compute: sim/interference.py)."""
    # CP ranks hold the same weights: the gradient group is data x context
    d, tr = s.parallel.data * s.parallel.context, s.training
    if d <= 1:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    group = placement(s, "dp_cp")
    alg, replicas = s.parallel.collective, tr.zero_replicas

    def zero(kind: str, nbytes: float, algorithm: str | None = None) -> float:   # inside one sharding
        return zero_collective_time(kind, nbytes, group, replicas, algorithm or alg)  # replica (zero_groups.py)
    grad = sum(st.grad_bytes for st in stages_of_rank)

    def bucketed(kind: str) -> float:
        """The gradients' collectives as the engine's DP stream runs them (sim/workload.py
        buckets): grad_bucket_MB buckets (one per layer with FSDP), each with its latencies."""
        return sum(n * zero(kind, st.grad_bytes / n) for st in stages_of_rank if (n := gradient_buckets(tr, st)))
    if tr.zero_stage >= 3:
        # ZeRO-3: all-gather the parameters before F and before B of every micro-batch, and
        # reduce-scatter the gradients (Rajbhandari et al. 2020, Sec. 7.2.2: 1.5x DP volume per pass);
        # prefetching overlaps it with that micro-batch's compute. Counted as the engine issues
        # them (sim/engine.py dp_stream): one ring all-gather per parameter tensor (per layer with
        # FSDP), each paying its ring latencies, and the gradients in buckets - at large data
        # parallelism the latencies, not the bytes, can set the time.
        gather = zero3_pass_gather(s, stages_of_rank, zero)
        rs_mb = bucketed("reduce_scatter")
        # DeepSpeed's backward gathers again what the recomputed forward released
        # (pipesim/costs/zero3_reuse.py); weights kept from the forward to the backward
        # (reshard_after_forward false): one gather
        fwd, bwd = zero3_gather_passes(s)
        gathers = fwd if not tr.reshard_after_forward else fwd + bwd
        per_mb = gathers * gather + rs_mb
        compute = sum(st.forward + st.backward for st in stages_of_rank)
        # FSDP2 under pipelining: one gather and one reduce-scatter for the step (sim/workload.py)
        M = 1 if s.fsdp2_gathers_once_per_step else s.num_microbatches
        # without prefetch every gather waits for the compute before it: nothing hides
        hidden = compute if tr.zero3_prefetch else 0.0
        # (exposed, total, one pass's gather: what an idle stretch lets a prefetched gather hide)
        exposed = M * max(0.0, per_mb - hidden)
        beside = M * per_mb - exposed
        grads = beside * rs_mb / per_mb if per_mb > 0 else 0.0
        return exposed, M * per_mb, gather if tr.zero3_prefetch else 0.0, grads, beside - grads
    rs = bucketed("reduce_scatter") if tr.zero_stage >= 1 else 0.0
    reduce = rs if tr.zero_stage >= 1 else bucketed("all_reduce")
    gather = gather_exposed = 0.0
    if tr.zero_stage >= 1:
        # ZeRO-1/2: reduce-scatter the gradients, all-gather the updated parameters (same volume
        # as one all-reduce; Rajbhandari et al. 2020, Sec. 7.2.1) - the weights in the dtype they
        # are gathered in, after the optimizer step, bucket by bucket; with Megatron's
        # --overlap-param-gather under the next step's forwards, chunk by chunk as Megatron issues
        # it (costs/param_gather.py, as the engine runs it: sim/dp_time.py param_gather_exposed)
        per_chunk = [param_allgather_seconds(tr, st, zero) for st in stages_of_rank]
        gather = sum(per_chunk)
        gather_exposed = exposed_param_gather(list(zip(
            per_chunk, *first_forward_starts(s, stages_of_rank), (gradient_buckets(tr, st) for st in stages_of_rank)))) \
            if tr.overlap_param_gather else gather
    # sharded gradients are reduce-scattered after every micro-batch's backward
    # (pipesim/sim/workload.py grad_every_microbatch): M - 1 more of them than once per step
    earlier = s.num_microbatches - 1 if tr.zero_stage == 2 else 0
    total = reduce + earlier * rs + gather
    if not tr.overlap_grad_reduce:
        return reduce + earlier * rs + gather_exposed, total, 0.0, 0.0, 0.0     # each reduction blocks the rank
    bucket = min(grad, tr.grad_bucket_MB * 1e6)
    last = collective_time("all_reduce", bucket, group, alg)
    exposed = max(last, reduce - backward_last) + gather_exposed
    if earlier:
        # each earlier one hides under the next micro-batch's compute
        per_mb = sum(st.forward + st.backward for st in stages_of_rank)
        exposed += earlier * max(0.0, rs - per_mb)
    # beside compute: the gradient collectives not exposed, and the parameter gather's part that
    # runs under the next step's forwards (costs/param_gather.py; sim/dp_time.py)
    return exposed, total, 0.0, max(0.0, reduce + earlier * rs - (exposed - gather_exposed)), gather - gather_exposed


def dp_contention(s, chunks, grads: float, gathers: float) -> float:
    """Seconds of compute lost beside `grads` seconds of gradient reductions and `gathers` of
    weight gathers, the compute at 1 / ratio meanwhile (sim/interference.py): the reductions run
    beside the backward, ZeRO-1/2's parameter gather beside the forwards, ZeRO-3's gathers beside
    both (the passes' mean); all of them when the compute's norm kernels wait for them."""
    fwd = [(c.forward, c.dp_overlap_slow_fwd) for c in chunks]
    bwd = [(c.backward, c.dp_overlap_slow_bwd) for c in chunks]
    stall_f, stall_b = any(c.dp_norm_waits_fwd for c in chunks), any(c.dp_norm_waits_bwd for c in chunks)
    zero3 = s.training.zero_stage >= 3
    return lost_beside(grads, bwd, stall_b) + lost_beside(gathers, fwd + bwd if zero3 else fwd,
                                                          stall_f or zero3 and stall_b)


def analytic_report(s, mode: str = "representative") -> dict:
    """A report dict with the DESIGN.md contract's scalar keys, from closed forms."""
    stages = stage_costs(s)
    P, V, M = s.parallel.pipeline, s.parallel.virtual_stages, s.num_microbatches
    sched = s.training.schedule
    per_rank = rank_chunks(s, stages)
    S = len(stages)
    # a chunk's received activation (gradient) is all-gathered over its TP group first (scatter/gather)
    f = [sum(c.forward + c.quantize + c.dequantize + (c.recv_gather if c.stage > 0 else 0.0) for c in ch)
         for ch in per_rank]
    # I: the input-gradient pass where the schedule runs W apart; elsewhere B's share beside W
    # (B hides TP reductions behind its weight-gradient GEMM that a lone I keeps, costs/stage.py)
    i = [sum((c.input_grad if sched in SPLIT_W else c.backward - c.weight_grad)
             + (c.recv_gather if c.stage < S - 1 else 0.0) for c in ch) for ch in per_rank]
    w = [sum(c.weight_grad for c in ch) for ch in per_rank]
    # per step, with the MoE all-to-all overlap's saving (paired steady-state F and B)
    step_rank = [M * (a + b + c) - a2a_overlap_saving(s, ch, r)
                 for r, (a, b, c, ch) in enumerate(zip(f, i, w, per_rank))]
    slow = max(range(P), key=lambda r: step_rank[r])
    compute = step_rank[slow]
    bubble = bubble_time(sched, P, V, f, i, w, slow)
    # Fill and drain: one micro-batch crosses every stage boundary forward and backward once.
    fill = 0.0
    if P > 1:
        link = stage_link(s, 0, 1)
        fill = (P * V - 1) * (p2p_time(stages[0].send_bytes, link) + p2p_time(stages[0].grad_send_bytes, link))
    # Blocking P2P (training.p2p_sync, sim/p2p_sync.py): each send holds its sender for its wire
    # time; an interior rank sends one activation and one gradient per chunk and micro-batch.
    sync = 0.0
    if P > 1 and s.training.p2p_sync:
        sync = M * V * (p2p_time(stages[0].send_bytes, link) + p2p_time(stages[0].grad_send_bytes, link))
    dp_exp, dp_total, pass_gather, contention = 0.0, 0.0, 0.0, 0.0
    for r in range(P):
        e, tot, g, grads, gathers = dp_exposed(s, per_rank[r], i[r] + w[r])
        if e > dp_exp:
            dp_exp, dp_total, pass_gather = e, tot, g
        contention = max(contention, dp_contention(s, per_rank[r], min(grads, step_rank[r]),
                                                   min(gathers, step_rank[r])))
    # the per-step fixed ops after the drain (optimizer, gradient norm, Muon, FP8 casts), as simulated
    opt = max(sum(sec for c in ch for _, sec in (c.step_ops or (("OPTIMIZER", c.optimizer_step),)))
              for ch in per_rank)
    # ZeRO-3's prefetched gather keeps running while a rank waits for its pipeline neighbours (the
    # engine's DP stream does not wait for the compute stream, and pipeline sends share the port
    # with it: sim/network.py Port.send). A rank's bubble comes as two idle stretches, the fill and
    # the drain, and with one action prefetched each lets at most one pass's gather run ahead.
    waits = bubble + dp_exp - min(bubble, dp_exp, 2 * pass_gather)
    step = compute + waits + fill + sync + opt + contention
    peaks = []
    ub = userbuffers_bytes(s)
    for r, ch in enumerate(per_rank):
        static = sum(c.static.total for c in ch) + ub
        # offloaded activations are on the GPU one layer at a time, for the pass that runs
        held = [in_flight(sched, P, V, M, r, s.training.microbatch_group_size, legacy_warmup(s))] * len(ch)
        if sched in V_SHAPE and len(ch) == 2:
            held = [v_chunk_in_flight(sched, P, M, r, c.stage < P) for c in ch]
        act = sum((c.activation_bytes - c.offload_bytes) * n + c.offload_window for c, n in zip(ch, held))
        # what a running pass holds beside them (sim/workload.py): the backward's recompute working
        # set, CP receive buffers and workspace, or the forward's buffers and workspace
        working = max((max(c.recompute_working_bytes + c.cp_buffer_bwd
                           + c.workspace.backward(c.recompute_working_bytes),
                           c.cp_buffer_fwd + c.workspace.forward()) for c in ch), default=0.0)
        # ZeRO-3: the gathered weights live beside them, as the engine holds them: the running
        # action's and, with prefetch, the next one's issued at its start
        gathered = max((stage_gathered_bytes(s, c) for c in ch), default=0.0) * (2 if s.training.zero3_prefetch else 1)
        peaks.append(static + act + working + gathered)
    peak = max(peaks)
    tr = s.training
    flops = iteration_flops(s)
    tflops = flops / step / s.num_gpus
    run = {}
    if s.run.tokens is not None:
        from pipesim.report.goodput import run_estimate
        run = {"run": run_estimate(s, step, tr.global_batch_size * s.model.seq_length / step)}
    return {**run,
        "engine": "analytic",
        "step_time_s": step,
        "throughput_samples_per_s": tr.global_batch_size / step,
        "tokens_per_s": tr.global_batch_size * s.model.seq_length / step,
        "model_tflops_per_gpu": tflops / 1e12,
        "mfu": tflops / s.system.gpu.matrix_peak(gemm_dtype(tr)),
        "bubble_fraction": 1.0 - compute / step,
        "num_gpus": s.num_gpus,
        "peak_memory_bytes": peak,
        "oom": peak > s.system.gpu.memory,
        "compute_s": compute,
        "pipeline_bubble_s": bubble,
        "p2p_fill_s": fill,
        "p2p_sync_s": sync,
        "dp_comm_exposed_s": dp_exp,
        "dp_comm_total_s": dp_total,
        "compute_contention_s": contention,
        "optimizer_s": opt,
        "recompute_s": M * sum(c.recompute for c in per_rank[slow]),
        "tp_comm_s": M * sum(c.tp_comm_fwd + c.tp_comm_bwd for c in per_rank[slow]),
        "cp_comm_exposed_s": M * sum(c.cp_comm_fwd + c.cp_comm_bwd for c in per_rank[slow]),
    }
