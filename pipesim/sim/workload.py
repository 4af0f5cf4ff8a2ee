"""Lowering: a Scenario + a Plan -> timed work for the engine (no SimPy here).

A simulated rank is a *gang*: the `tensor` GPUs of one (data, pipeline) coordinate. Megatron's
tensor-parallel collectives are blocking inside every layer (Shoeybi et al. 2019, Sec. 3), so
the members of a TP group advance in lock-step at the pace of the slowest member; simulating them
as one process with per-GPU links, memory and trace rows is exact under that model and keeps
full mode cheap. Representative mode: one gang per pipeline rank (dp index 0) whose speed and
links are the slowest of every replica at that pipeline rank. Full mode: every (dp, pp) gang.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import NamedTuple

from pipesim.costs.collectives import GroupPlacement, Link, p2p_time
from pipesim.costs.param_gather import first_forwards
from pipesim.costs.zero3_reuse import (gathered_weight_bytes, gradient_buckets, stage_gathered_bytes,
                                       weight_gathers, zero3_gather_passes)
from pipesim.costs.topology import links as topology_links
from pipesim.costs.topology import island_of, node_of, p2p_link, placement, rank_of
from pipesim.costs.tp_overlap import userbuffers_bytes
from pipesim.errors import PlanError, ScenarioError
from pipesim.schedules.registry import legacy_warmup, schedule_options

# Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Table 1: a transformer layer's
# backward needs M_B = 34bsh + 5as^2b bytes of activations; the weight-gradient pass W only
# M_W = 32bsh of them (the linear layers' inputs and output gradients). So after I the rest is
# freed and M_W / M_B stays until W.
ZB_MW_PER_BSH = 32.0
ZB_MB_PER_BSH = 34.0
ZB_MB_SCORES = 5.0          # coefficient of a s^2 b (attention scores, softmax, dropout mask)


KIND_CODE = {"F": 0, "B": 1, "I": 2, "W": 3, "R": 4, "SEND_F": 5, "SEND_B": 6, "RECV_F": 7, "RECV_B": 8}
NKINDS = len(KIND_CODE)
_COMPUTE = frozenset(("F", "B", "I", "W", "R"))
_GATHER = frozenset(("F", "B", "I"))
# actions that produce weight gradients ("FB": an A2A-overlap pair, sim/a2a_overlap.PAIR_KIND)
GRAD_KINDS = frozenset(("B", "W", "FB"))


class Step(NamedTuple):
    """One action of a rank's lowered plan: structure only (shared by every cost model, and by
    every cached plan that has the same action: see `plan_steps`). A tuple, so that building one
    is a C call and the DAG pass unpacks it directly (its first seven fields)."""
    code: int           # STEP_COMPUTE | STEP_SEND | STEP_RECV
    key: int            # stage * NKINDS + KIND_CODE[kind]: index into a rank's cost table
    kind: str
    stage: int
    grad_last: bool     # last gradient-producing action of its stage (DP buckets)
    rkey: tuple         # mailbox key of the message: a RECV's own (kind, stage, mb), a SEND's matching RECV's
    peer: int           # pipeline rank at the other end (SEND/RECV), else -1
    mb: int
    compute: bool
    gather: bool        # needs the stage's weights (ZeRO-3)

    def __repr__(self):
        return f"Step({self.stage}{self.kind}{self.mb})"


STEP_COMPUTE, STEP_SEND, STEP_RECV = 0, 1, 2
# kind -> (code, compute, gather, kind code)
_KIND_INFO = {k: (STEP_COMPUTE if k in _COMPUTE else STEP_SEND if k.startswith("SEND") else STEP_RECV,
                  k in _COMPUTE, k in _GATHER, KIND_CODE[k]) for k in KIND_CODE}


def make_step(kind: str, stage: int, mb: int, peer: int = -1, grad_last: bool = False) -> Step:
    code, compute, gather, key = _KIND_INFO[kind]
    if kind == "SEND_F":
        rkey = ("RECV_F", stage + 1, mb)
    elif kind == "SEND_B":
        rkey = ("RECV_B", stage - 1, mb)
    else:
        rkey = (kind, stage, mb)
    return _new_tuple(Step, (code, stage * NKINDS + key, kind, stage, grad_last, rkey, peer, mb, compute, gather))


_new_tuple = tuple.__new__      # a NamedTuple without its Python-level __new__
_KIND = itemgetter(2)            # Step.kind


class Cost:
    """What a (stage, kind) costs on one rank: seconds, bytes, memory deltas, route."""
    __slots__ = ("dur", "tp", "cp", "nbytes", "extra", "gather", "mem0", "mem1", "port", "buf_alloc", "buf_free",
                 "a2a", "a2a_exposed", "moe_block", "moe_wgrad", "overlap_slow", "dp_slow", "dp_stall", "ids")

    def __init__(self, dur=0.0, tp=0.0, nbytes=0.0, extra=0.0, mem0=(), mem1=(), port="", a2a=0.0,
                 moe_block=0.0, overlap_slow=(1.0, 1.0), moe_wgrad=0.0, gather=0.0, cp=0.0):
        self.dur = dur          # compute seconds (after the speed factor) or wire seconds of a send
        self.tp = tp            # blocking TP communication inside `dur` (RECV: its `gather`)
        self.cp = cp            # ... of `tp`: the exposed context-parallel K/V exchange (reported apart)
        self.a2a = a2a          # MoE all-to-all inside `dur` (pipesim/sim/a2a_overlap.py)
        self.a2a_exposed = a2a  # ... of it on the critical path (all of it unless overlapped)
        self.moe_block = moe_block   # compute seconds of its MoE blocks (the rest is attention etc.)
        self.overlap_slow = overlap_slow   # (attention, MoE block) time beside the all-to-all / alone
        self.moe_wgrad = moe_wgrad   # of moe_block: weight gradients (B only; I leaves them to W)
        self.dp_slow = 1.0      # compute: its time beside an overlapped DP collective / alone (sim/interference.py)
        self.dp_stall = 0.0     # ... seconds of it between norm kernels that wait for such a collective (0: none)
        self.nbytes = nbytes    # bytes sent (SEND) or received (RECV)
        self.extra = extra      # quantize seconds before a SEND / dequantize after a RECV
        self.gather = gather    # RECV: TP all-gather of the received slices (scatter/gather), blocking
        self.mem0 = mem0        # (category, delta) when a compute op starts
        self.mem1 = mem1        # ... and when it ends
        self.port = port        # SEND: link class it leaves through ("intra" / "inter")
        self.buf_alloc = (("buffers", nbytes),)      # SEND/RECV buffer as memory-log entries
        self.buf_free = (("buffers", -nbytes),)
        self.ids = None         # (mem0, mem1, buf_alloc, buf_free) as memory.ChangeIds numbers (sim/dag.py)


def plan_steps(plan) -> tuple[tuple[Step, ...], ...]:
    """Per rank, the lowered plan as Steps (with the last gradient-producing action marked). Steps
    are immutable and interned: plans of one sweep share most of their actions, so each distinct
    (kind, stage, micro-batch, peer, last) is built once."""
    last = {}
    for r, row in enumerate(plan.ranks):
        for idx, (st, k, _) in enumerate(row):
            if k == "B" or k == "W":
                last[st] = (r, idx)
    lasts = [[] for _ in plan.ranks]
    for r, idx in last.values():
        lasts[r].append(idx)
    where = plan.stage_to_rank
    # Steps interned per stage map (which fixes every action's peer): Action -> Step, and the
    # same for the actions marked last-gradient; a row is one C-level map over its actions
    if len(_STEPS) > 64 or sum(len(c) for c, _ in _STEPS.values()) > 1 << 20:
        _STEPS.clear()
    cache, marked = _STEPS.setdefault(where, ({}, {}))
    rows = []
    for r, row in enumerate(plan.ranks):
        out = list(map(cache.get, row))
        if None in out:
            _fill(out, row, where, cache)
        for idx in lasts[r]:
            a = row[idx]
            step = marked.get(a)
            out[idx] = step if step is not None else marked.setdefault(a, _step_of(a, where, True))
        rows.append(tuple(out))
    return tuple(rows)


def _fill(out: list, row, where, cache: dict) -> None:
    """The Steps missing from `out` (None), built and interned: `_step_of` inlined, as a first
    call in a fresh process builds every action of its plan here."""
    info, new, n = _KIND_INFO, _new_tuple, NKINDS
    for idx, a in enumerate(row):
        if out[idx] is not None:
            continue
        st, k, mb = a
        code, compute, gather, kc = info[k]
        peer = -1
        if k == "SEND_F":
            rkey, peer = ("RECV_F", st + 1, mb), where[st + 1]
        elif k == "SEND_B":
            rkey, peer = ("RECV_B", st - 1, mb), where[st - 1]
        else:
            rkey = (k, st, mb)
            if k == "RECV_B":
                peer = where[st + 1]
            elif k == "RECV_F":
                peer = where[st - 1]
        out[idx] = cache[a] = new(Step, (code, st * n + kc, k, st, False, rkey, peer, mb, compute, gather))


def _step_of(action, where, grad_last: bool) -> Step:
    st, k, mb = action
    peer = -1
    if k == "SEND_F" or k == "RECV_B":
        peer = where[st + 1]
    elif k == "SEND_B" or k == "RECV_F":
        peer = where[st - 1]
    return make_step(k, st, mb, peer, grad_last)


SIM_BUCKETS = 256          # simulated gradient collectives per stage and reduction (bucket_time)
SIM_BUCKETS_EVERY_MICROBATCH = 128   # FSDP reduces per layer: every stage of <= 128 layers exact
_STEPS: dict = {}     # stage_to_rank -> ({Action: Step}, {Action: Step marked grad_last})


@dataclass
class Gang:
    """One simulated rank: the TP group at (dp, pp)."""
    id: int
    pp: int
    dp: int
    members: tuple[int, ...]  # global ranks of its GPUs
    speed: float
    steps: tuple              # its lowered plan row (Steps)
    table: list               # Cost per Step.key
    static: dict              # weights / gradients / optimizer bytes per GPU
    optimizer_s: float
    step_ops: tuple = ()      # per-step fixed work after the drain: (timeline name, seconds)
    # (stage, start_s, forward_s) of each chunk's first forward: what hides the ZeRO-1/2 parameter
    # all-gather (costs/param_gather.py)
    first_forwards: tuple = ()


@dataclass
class Workload:
    scenario: object
    plan: object              # the lowered plan
    steps: tuple              # plan_steps(plan)
    mode: str
    gangs: list[Gang]
    gang_at: dict             # (dp, pp) -> gang id
    p2p: dict                 # (pp_src, pp_dst) -> (Link, port "intra"|"inter")
    dp_group: dict            # pp -> (GroupPlacement, port)
    dp_size: int              # members of each DP collective simulated (1 in representative)
    stage_costs: list
    buckets: dict             # stage -> list of bytes of the simulated gradient collectives
    bucket_time: dict         # stage -> (bytes of one real bucket, real buckets per simulated one)
    grad_kind: str            # all_reduce | reduce_scatter
    zero_stage: int
    overlap_grad_reduce: bool
    weights_full: dict        # stage -> unsharded weight bytes per GPU (ZeRO-3 gather size)
    gathered_held: dict       # stage -> ZeRO-3 gathered bytes an action holds (costs/zero3_reuse.py)
    gather_tensors: dict      # stage -> parameter tensors (ZeRO-3: one all-gather each)
    gather_layers: dict       # stage -> layers (a prefetched ZeRO-3 gather arrives layer by layer)
    act_bytes: dict           # stage -> activation bytes per micro-batch
    w_fraction: float         # share of activations kept from I until W
    rc_working: dict          # stage -> recompute working bytes
    explicit_r: bool
    zero3_prefetch: bool = True   # ZeRO-3: gather one compute action ahead (else when it is reached)
    zero3_gather_rate: float | None = None   # ZeRO-3: the framework's gather bytes/s per GPU, if capped
    gather_passes: tuple = (1.0, 1.0)  # ZeRO-3: weights gathered for a forward, for a backward (multiples)
    reshard_after_forward: bool = True   # ZeRO-3: the backward gathers again (else only the forward)
    gather_once_per_step: bool = False   # ZeRO-3: only a stage's first forward gathers (FSDP2 under pipelining)
    grad_every_microbatch: bool = False  # sharded gradients: reduce-scatter after every backward
    p2p_sync: bool = False    # blocking, batched pipeline P2P (sim/p2p_sync.py)
    cache: dict = field(default_factory=dict)   # memoised collective times
    host_profile: object = None   # a CPU profile whose host model measured the all-reduce (calibrate/host.py)
    change_ids: object = None   # memory.ChangeIds numbering this workload's Cost.ids (set by sim/dag.py)


def merge_step_ops(per_chunk, speed: float) -> tuple:
    """A rank's per-step fixed ops over its model chunks, summed by name in first-seen order;
    communication (all-reduces, all-gathers) is not scaled by the GPU's speed, the rest is."""
    total: dict = {}
    for ops in per_chunk:
        for name, sec in ops:
            total[name] = total.get(name, 0.0) + (sec if name.endswith(("_AR", "_AG")) else sec / speed)
    return tuple(total.items())


def _min_link(ls) -> Link:
    ls = list(ls)
    return Link(min(x.bandwidth for x in ls), max(x.latency for x in ls))


def node_links(s, node: int) -> tuple[Link, Link]:
    """Effective (intra, inter) links of a node, with its heterogeneity override."""
    return topology_links(s, node)


def gang_members(s, dp: int, pp: int) -> tuple[int, ...]:
    """The tensor x context GPUs of (dp, pp): ring attention is blocking in every layer, so the CP
    ranks advance in lock-step with their TP groups."""
    return tuple(rank_of(s, tp=t, dp=dp, pp=pp, cp=c) for c in range(s.parallel.context)
                 for t in range(s.parallel.tensor))


def speed_of(s, ranks) -> float:
    """A lock-stepped group runs at its slowest member (heterogeneity.rank_speed, default 1)."""
    table = s.system.heterogeneity.rank_speed
    return min(table.get(r, 1.0) for r in ranks) if table else 1.0


def pp_link(s, src_pp: int, dst_pp: int, dps) -> tuple[Link, str]:
    """Link a stage-to-stage send crosses: each TP member sends its slice over its own link; the
    gang waits for the slowest (min bandwidth over the members and the dp replicas given)."""
    ls, inter = [], False
    for dp in dps:
        for t in range(s.parallel.tensor):
            a, b = rank_of(s, tp=t, dp=dp, pp=src_pp), rank_of(s, tp=t, dp=dp, pp=dst_pp)
            ls.append(p2p_link(s, a, b))
            inter = inter or island_of(s, a) != island_of(s, b)
    return _min_link(ls), ("inter" if inter else "intra")


def dp_placement(s, pp: int) -> tuple[GroupPlacement, str]:
    """The DP communicator of pipeline rank `pp`; a node with a slower NIC (node_inter_bandwidth)
    slows the whole ring, so the slowest node hosting this pipeline rank sets the inter link."""
    g = placement(s, "dp_cp")       # CP ranks hold the same weights: gradients reduce over data x context
    over = s.system.heterogeneity.node_inter_bandwidth
    if over:
        nodes = {node_of(s, rank_of(s, tp=t, dp=d, pp=pp, cp=c)) for c in range(s.parallel.context)
                 for d in range(s.parallel.data) for t in range(s.parallel.tensor)}
        inter = _min_link(node_links(s, n)[1] for n in nodes)
        pods = g.inter.bandwidth / node_links(s, None)[1].bandwidth      # the pod share (costs/pods.py), 1 without
        g = GroupPlacement(g.size, g.per_node, g.intra, Link(inter.bandwidth * pods, inter.latency))
    return g, ("inter" if g.nodes > 1 else "intra")


def rank_links(s, link_dps) -> tuple[dict, dict]:
    """(p2p, dp_group) of Workload: the link between neighbouring pipeline ranks and each pipeline
    rank's DP communicator. Without heterogeneity they depend only on the system's shape and links,
    the parallel layout and the communicators' CTA caps, so a sweep computes them once per such key."""
    het = s.system.heterogeneity
    key = None
    if not het.rank_speed and not het.node_inter_bandwidth:
        sysc = s.system
        key = (sysc.num_nodes, sysc.gpus_per_node, sysc.nvlink_domain, sysc.intra_node, sysc.inter_node,
               sysc.pod_gpus, sysc.pod_oversubscription, s.parallel, sysc.gpu.kernel_curve,
               tuple(sorted(s.training.nccl_max_ctas.items())))
        hit = _LINKS.get(key)
        if hit is not None:
            return hit
    P = s.parallel.pipeline
    p2p = {}
    for r in range(P):
        for q in {(r + 1) % P, (r - 1) % P} if P > 1 else ():
            p2p[(r, q)] = pp_link(s, r, q, link_dps if link_dps is not None else (0,))
    out = p2p, {r: dp_placement(s, r) for r in range(P)}
    if key is not None:
        if len(_LINKS) > 4096:
            _LINKS.clear()
        _LINKS[key] = out
    return out


_LINKS: dict = {}


def clear_shape_caches() -> None:
    """Forget what is cached per layout (links, stage costs), keeping the plan cache: what a
    benchmark clears to time a warm plan cache without re-used per-scenario results."""
    from pipesim.model_stages import clear_cache
    _LINKS.clear()
    clear_cache()


def w_fraction(s) -> float:
    m = s.model
    if m.arch != "transformer" or m.hidden_size <= 0:
        # the zero-bubble activation split is a transformer-layer formula; a CNN keeps its
        # activations until the weight gradient (no I/W split of its activations is modelled)
        return 1.0
    # flash attention keeps no s x s scores, so the 5as^2b term vanishes
    scores = 0.0 if s.training.attention == "flash" else (
        ZB_MB_SCORES * m.num_attention_heads * m.seq_length / m.hidden_size)
    return min(1.0, ZB_MW_PER_BSH / (ZB_MB_PER_BSH + scores))


def plan_family(s) -> tuple | None:
    """What a scenario's plan depends on besides cost hints: (schedule, P, M, V), or None for a
    CSV plan. Sweeps send scenarios of one family to one worker, so that each distinct plan is
    generated once per sweep (whatif/evaluate.py)."""
    name = s.training.schedule
    if name.endswith(".csv"):
        return None
    return (name, s.parallel.pipeline, s.num_microbatches, s.parallel.virtual_stages,
            s.training.microbatch_group_size)


def load_plan(s, costs):
    """The scenario's plan: a registry schedule (cost hints from the stage costs) or a CSV."""
    P, V, M = s.parallel.pipeline, s.parallel.virtual_stages, s.num_microbatches
    name = s.training.schedule
    if name.endswith(".csv"):
        from pipesim.schedules import lower, read_csv, validate
        plan = read_csv(name)
        if (plan.num_ranks, plan.num_stages, plan.num_microbatches) != (P, P * V, M):
            raise PlanError(f"{name}: plan has {plan.num_ranks} ranks, {plan.num_stages} stages, "
                            f"{plan.num_microbatches} micro-batches but the scenario needs pipeline({P}), "
                            f"pipeline·virtual_stages = {P * V} stages, {M} micro-batches")
        validate(plan)
        return lower(plan), None
    if name.lower().replace("_", "-") not in COST_PLACED:
        # loop schedules ignore cost hints
        return _generated(name, P, M, V, None, s.training.microbatch_group_size, legacy_warmup(s))
    n = len(costs)
    f = sum(c.forward for c in costs) / n
    # Relative costs to one decimal: finer hints barely move the zero-bubble placement, and
    # coarse keys let a sweep reuse plans (the placer dominates sweep time otherwise).
    hints = tuple(round(max(x, 1e-12) / f, 1) or 0.1 for x in (
        f, sum(c.backward for c in costs) / n, sum(c.input_grad for c in costs) / n,
        sum(c.weight_grad for c in costs) / n))
    return _generated(name, P, M, V, hints)


# schedules whose generator places W (and F/B) by the cost hints (pipesim/schedules/zero_bubble.py)
COST_PLACED = {"zb-h1", "zbh1", "zb1p", "zb-h2", "zbh2", "zb2p", "zb-v", "zbv"}


@lru_cache(maxsize=2048)   # a sweep cycles through its plans: an LRU smaller than the set evicts each before reuse
def _generated(name, P, M, V, hints, group=None, legacy=False):
    """Plans carry no durations, so one plan serves every cost model: cache them for sweeps."""
    from pipesim.schedules import generate, lower, validate
    if hints is None:
        plan = generate(name, stages=P, microbatches=M, virtual=V, **schedule_options(group, legacy))
    else:
        f, b, i, w = hints
        plan = generate(name, stages=P, microbatches=M, virtual=V, f=f, b=b, i=max(i, 0.1), w=max(w, 0.1))
    validate(plan, deadlock=False)   # the engine (or the DAG pass) reports deadlocks itself
    plan = lower(plan)
    return plan, plan_steps(plan)


def has_recompute_steps(steps) -> bool:
    """Whether a lowered plan has explicit R actions (memoised per cached plan: a sweep asks once
    per configuration and the answer is a walk over every action)."""
    hit = _EXPLICIT_R.get(id(steps))
    if hit is not None and hit[0] is steps:
        return hit[1]
    if len(_EXPLICIT_R) > 4096:
        _EXPLICIT_R.clear()
    out = any("R" in map(_KIND, row) for row in steps)
    _EXPLICIT_R[id(steps)] = (steps, out)
    return out


_EXPLICIT_R: dict = {}


def build(s, mode: str = "representative", costs=None, plan=None) -> Workload:
    from pipesim.model_stages import stage_costs_for as stage_costs
    from pipesim.schedules import lower
    if mode not in ("representative", "full"):
        raise ScenarioError(f"simulation mode must be 'representative' or 'full', got {mode!r}")
    costs = list(costs) if costs is not None else stage_costs(s)
    steps = None
    if plan is None:
        plan, steps = load_plan(s, costs)
    plan = lower(plan)
    if steps is None:
        steps = plan_steps(plan)
    P, D = s.parallel.pipeline, s.parallel.data
    if plan.num_ranks != P or plan.num_stages != len(costs):
        raise PlanError(f"plan {plan.name!r} has {plan.num_ranks} ranks and {plan.num_stages} stages; the "
                        f"scenario has pipeline({P}) and {len(costs)} model stages")
    tr = s.training
    explicit_r = has_recompute_steps(steps)
    dps = range(D) if mode == "full" else (0,)
    het_links = bool(s.system.heterogeneity.node_inter_bandwidth)
    link_dps = range(D) if (het_links and mode == "representative") else None
    p2p, dp_group = rank_links(s, link_dps)
    # ZeRO >= 1 reduce-scatters gradients (Rajbhandari et al. 2020 Sec. 5.2; Megatron's
    # distributed optimizer), then all-gathers updated weights; plain DP all-reduces them.
    grad_kind = "reduce_scatter" if tr.zero_stage >= 1 else "all_reduce"
    buckets, bucket_time = {}, {}
    for c in costs:
        n = gradient_buckets(tr, c)       # FSDP: one reduce-scatter per wrapped layer
        # at most SIM_BUCKETS simulated collectives (fewer when they recur after every micro-batch),
        # each the time of n / m real ones (every real bucket's latency counted): 25 MB buckets
        # on a stage of tens of GB, reduced after every micro-batch under ZeRO-2/3, were millions
        # of engine events
        m = min(n, SIM_BUCKETS_EVERY_MICROBATCH if tr.zero_stage >= 2 else SIM_BUCKETS)
        buckets[c.stage] = [c.grad_bytes / m] * m if n else []
        bucket_time[c.stage] = (c.grad_bytes / n, n / m) if n else (0.0, 1.0)
    wf = w_fraction(s)
    rc_on = tr.recompute != "none"

    def cost_table(r: int, speed: float) -> list:
        """Cost of every (stage, kind) on pipeline rank r running at `speed`."""
        table = [None] * (len(costs) * NKINDS)
        for st in plan.stages_of(r):
            c = costs[st]
            rc = c.recompute / speed if explicit_r else 0.0
            act = c.activation_bytes
            rcw = c.recompute_working_bytes if rc_on else 0.0
            keep = (lambda *xs: tuple(x for x in xs if x[1]))
            rc0 = keep(("recompute", rcw)) if not explicit_r else ()
            # TP, EP (all-to-all), exposed CP time and offload copies are communication: not scaled
            # by the GPU's speed
            cf = c.tp_comm_fwd + c.ep_comm_fwd + c.cp_comm_fwd + c.offload_fwd
            cb = c.tp_comm_bwd + c.ep_comm_bwd + c.cp_comm_bwd + c.offload_bwd
            # CP K/V receive buffers live while the pass runs (pipesim.costs.context)
            kf, kb = c.cp_buffer_fwd, c.cp_buffer_bwd
            # offloaded activations (costs.stage.activation_offload) never sit on the GPU beyond the
            # one layer being copied: `res` stays, `win` comes and goes with each pass
            win = c.offload_window
            res = act - c.offload_bytes
            # what the pass holds beyond its kept activations while it runs (costs/workspace.py)
            wsf, wsb = c.workspace.forward(), c.workspace.backward(rcw)
            table[st * NKINDS + 0] = Cost((c.forward - cf) / speed + cf, c.tp_comm_fwd + c.cp_comm_fwd,
                                          cp=c.cp_comm_fwd,
                                          mem0=keep(("activations", res + win), ("cp_buffers", kf), ("workspace", wsf)),
                                          mem1=keep(("cp_buffers", -kf), ("activations", -win), ("workspace", -wsf)),
                                          a2a=c.ep_comm_fwd,
                                          moe_block=c.moe_block_fwd / speed, overlap_slow=c.moe_overlap_slow_fwd)
            table[st * NKINDS + 1] = Cost((c.backward - cb) / speed + cb - rc, c.tp_comm_bwd + c.cp_comm_bwd,
                                          cp=c.cp_comm_bwd,
                                          mem0=rc0 + keep(("cp_buffers", kb), ("activations", win), ("workspace", wsb)),
                                          mem1=keep(("activations", -(res + win)), ("recompute", -rcw),
                                                    ("cp_buffers", -kb), ("workspace", -wsb)),
                                          a2a=c.ep_comm_bwd, moe_block=c.moe_block_bwd / speed,
                                          overlap_slow=c.moe_overlap_slow_bwd, moe_wgrad=c.moe_block_wgrad / speed)
            ci = cb - c.tp_comm_bwd + c.tp_comm_input_grad     # I: no weight-gradient GEMM to hide TP behind
            table[st * NKINDS + 2] = Cost((c.input_grad - ci) / speed + ci - rc,
                                          c.tp_comm_input_grad + c.cp_comm_bwd, cp=c.cp_comm_bwd,
                                          mem0=rc0 + keep(("cp_buffers", kb), ("activations", win), ("workspace", wsb)),
                                          mem1=keep(("activations", -(res + win - res * wf)), ("recompute", -rcw),
                                                    ("cp_buffers", -kb), ("workspace", -wsb)),
                                          a2a=c.ep_comm_bwd, moe_block=c.moe_block_bwd * (
                                              c.input_grad / c.backward if c.backward else 1.0) / speed,
                                          overlap_slow=c.moe_overlap_slow_bwd)
            table[st * NKINDS + 3] = Cost(c.weight_grad / speed, mem1=keep(("activations", -res * wf)))
            table[st * NKINDS + 4] = Cost(c.recompute / speed, mem0=keep(("recompute", rcw)))
            # beside a DP collective only the compute slows, not the blocking communication inside;
            # its norm kernels (none in W) may wait for the collective
            fwd, bwd = (c.dp_overlap_slow_fwd, c.dp_norm_waits_fwd), (c.dp_overlap_slow_bwd, c.dp_norm_waits_bwd)
            for kind, comm, (ratio, waits) in ((0, cf, fwd), (1, cb, bwd), (2, ci, bwd),
                                               (3, 0.0, (bwd[0], 0)), (4, 0.0, fwd)):
                e = table[st * NKINDS + kind]
                if ratio > 1.0 and e.dur > 0:
                    e.dp_slow = 1.0 + (ratio - 1.0) * max(0.0, e.dur - comm) / e.dur
                if waits and e.dur > 0:
                    e.dp_stall = e.dur / waits
            if st + 1 < len(costs):
                q = plan.rank_of(st + 1)
                if q != r:
                    link, port = p2p[(r, q)]
                    table[st * NKINDS + 5] = Cost(p2p_time(c.send_bytes, link), nbytes=c.send_bytes,
                                                  extra=c.quantize / speed, port=port)
                    table[st * NKINDS + 8] = Cost(nbytes=costs[st + 1].grad_send_bytes, tp=c.recv_gather,
                                                  gather=c.recv_gather)
            if st > 0:
                q = plan.rank_of(st - 1)
                if q != r:
                    link, port = p2p[(r, q)]
                    table[st * NKINDS + 6] = Cost(p2p_time(c.grad_send_bytes, link), nbytes=c.grad_send_bytes,
                                                  port=port)
                    table[st * NKINDS + 7] = Cost(nbytes=costs[st - 1].send_bytes, extra=c.dequantize / speed,
                                                  tp=c.recv_gather, gather=c.recv_gather)
        return table

    gangs, gang_at, cache = [], {}, {}
    ub_bytes = userbuffers_bytes(s)         # Transformer Engine's TP-overlap buffers, every rank
    for pp in range(P):
        chunks = plan.stages_of(pp)
        static = dict(weights=sum(costs[k].static.weights for k in chunks),
                      gradients=sum(costs[k].static.gradients for k in chunks),
                      optimizer=sum(costs[k].static.optimizer for k in chunks), buffers=ub_bytes)
        rep_speed = None
        if mode == "representative":
            rep_speed = speed_of(s, [m for d in range(D) for m in gang_members(s, d, pp)]
                                 ) if s.system.heterogeneity.rank_speed else 1.0
        for dp in dps:
            members = gang_members(s, dp, pp)
            speed = rep_speed if rep_speed is not None else speed_of(s, members)
            key = (pp, speed)
            if key not in cache:
                cache[key] = (steps[pp], cost_table(pp, speed))
                if tr.moe_a2a_overlap:
                    from pipesim.sim.a2a_overlap import pair_row
                    cache[key] = pair_row(*cache[key], layers={c.stage: c.layers for c in costs})
                cache[key] += (first_forwards(plan.ranks[pp], costs, speed),)
            row, table, firsts = cache[key]
            gid = len(gangs)
            gang_at[(dp, pp)] = gid
            gangs.append(Gang(gid, pp, dp, members, speed, row, table, static,
                              sum(costs[k].optimizer_step for k in chunks) / speed,
                              merge_step_ops([costs[k].step_ops for k in chunks], speed),
                              firsts))
    return Workload(
        scenario=s, plan=plan, steps=steps, mode=mode, gangs=gangs, gang_at=gang_at, p2p=p2p, dp_group=dp_group,
        dp_size=len(dps), stage_costs=costs, buckets=buckets, bucket_time=bucket_time, grad_kind=grad_kind,
        zero_stage=tr.zero_stage, overlap_grad_reduce=tr.overlap_grad_reduce,
        # what a ZeRO weight all-gather moves per stage (its dtype and expert share: zero3_reuse.py)
        weights_full={c.stage: gathered_weight_bytes(tr, c) for c in costs},
        gathered_held={c.stage: stage_gathered_bytes(s, c) for c in costs},
        gather_tensors={c.stage: weight_gathers(tr, c) for c in costs},
        gather_layers={c.stage: max(1, c.layers) for c in costs},
        act_bytes={c.stage: c.activation_bytes for c in costs},
        w_fraction=wf,
        rc_working={c.stage: (c.recompute_working_bytes if tr.recompute != "none" else 0.0) for c in costs},
        explicit_r=explicit_r, zero3_prefetch=tr.zero3_prefetch,
        # DeepSpeed releases a module's weights after each use unless it is reused soon, the
        # recomputed forward's too (pipesim/costs/zero3_reuse.py); FSDP gathers a layer once per pass
        gather_passes=zero3_gather_passes(s),
        zero3_gather_rate=tr.zero3_gather_GBps * 1e9 if tr.zero3_gather_GBps else None,
        reshard_after_forward=tr.reshard_after_forward,
        gather_once_per_step=s.fsdp2_gathers_once_per_step,
        # A gradient held sharded (ZeRO-2/3) cannot accumulate unreduced partial sums over
        # micro-batches, so each backward reduce-scatters its gradients: DeepSpeed ZeRO-2/3 reduce
        # in every micro-step's backward hooks (deepspeed/runtime/zero/stage_1_and_2.py,
        # reduce_ready_partitions_and_remove_grads), and PyTorch FSDP does so unless no_sync() keeps
        # full, unsharded gradients instead (torch.distributed.fsdp docs, FullyShardedDataParallel.
        # no_sync). The distributed optimizer (ZeRO-1) accumulates full gradients and reduces once.
        # Without overlap_grad_reduce each of them blocks the rank (DeepSpeed's overlap_comm false).
        grad_every_microbatch=tr.zero_stage >= 2 and not s.fsdp2_deferred_grad_sync,
        p2p_sync=tr.p2p_sync and s.parallel.pipeline > 1,
        host_profile=host_profile_for(s))


def host_profile_for(s):
    """The scenario's cost profile when it carries a CPU host model (calibrate/host.py), else None."""
    if s.costs.profile is None:
        return None
    from pipesim.calibrate.host import host_of
    from pipesim.costs.stage import load_profile_for
    profile = load_profile_for(s)
    return profile if host_of(profile) else None
