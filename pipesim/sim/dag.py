"""Exact timing without an event queue: the longest path through the plan's action DAG.

Where it applies (see `applies`), a step is a DAG: every rank runs its lowered plan in order (an
action starts when the previous one ends), a RECV also waits for its message, and a message
lands at its SEND's wire end. Every send leaves through its own rank's port, in that rank's
program order, so the port's FIFO horizon is computed in the same pass; the rank's
data-parallel stream (gradient buckets, the ZeRO-1/2 all-gather) is the only other user of a
rank's port, and it depends on nothing but that rank's own times, so it is advanced lazily
beside the rank: before a send reserves the port at time T, every bucket requested before T
reserves first (at equal times the rank goes first: the engine's DP_PRIORITY rule).

The pass is Kahn's topological order with one cursor per rank: a rank runs until it reaches a
RECV whose SEND has not been issued, then the next rank continues; each action is visited once,
so the cost is linear in ranks x actions with no event objects, heap or generator switches. A
plan that leaves every rank blocked deadlocks: the SimPy engine is run to report it.

Blocking P2P (training.p2p_sync, sim/p2p_sync.py) adds POST and WAIT steps to the walked row:
a SEND also waits for its receiver to have posted the receive (parking the rank as a RECV does),
and a batch ends when its sends have.

The arithmetic is the engine's (end = start + duration, max of ready times), so step time, every
timeline interval and the memory log are bit-identical to sim/engine.py (tests/test_sim_dag.py
checks every schedule). Not covered here, and left to the engine: ZeRO-3 (weight gathers block
compute on the DP stream), ZeRO-2 without overlap (each backward's reduce-scatter blocks the
rank), full mode whose data-parallel replicas differ (a collective then joins
different ranks' streams and ports; identical replicas are walked once, see `symmetric`), trace
events (trace=True), and a workload an extension marks with a `needs_engine` reason (e.g. overlap
the engine models and this pass does not).
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace

from pipesim.report.metrics import RankTimeline
from pipesim.sim.memory import MemoryTracker
from pipesim.sim.network import Port
from pipesim.sim.p2p_sync import POST, WAIT, batched_row, dag_steps
from pipesim.sim.summary import flat_memory_logs, row_memo, summarize
from pipesim.sim.dp_time import bucket_seconds, param_gather_contention, param_gather_exposed
from pipesim.sim.interference import finish_time
from pipesim.sim.workload import GRAD_KINDS, STEP_COMPUTE, STEP_RECV, STEP_SEND, Workload


def grad_group(w: Workload) -> int:
    """GPUs a gradient is reduced over: data x context (as the engine's dp_n)."""
    return w.scenario.parallel.data * w.scenario.parallel.context


def applies(w: Workload, trace: bool) -> str | None:
    """None if the DAG path is exact for `w`, else why the SimPy engine must run."""
    if trace:
        return "trace events requested"
    if w.zero_stage == 3 and grad_group(w) > 1:
        return "ZeRO-3 weight gathers"
    if w.grad_every_microbatch and not w.overlap_grad_reduce and grad_group(w) > 1:
        return "blocking gradient reduce-scatters after every micro-batch (ZeRO-2 without overlap)"
    if w.mode == "full" and grad_group(w) > 1 and not symmetric(w):
        return "full mode with unequal data-parallel replicas (collectives join different timelines)"
    if getattr(w, "needs_engine", None):
        return w.needs_engine
    return None


COMPUTE, SEND, RECV = STEP_COMPUTE, STEP_SEND, STEP_RECV


def symmetric(w: Workload) -> bool:
    """Full mode whose data-parallel replicas are identical: every gang of a pipeline rank shares
    one cost table (same speed, same links) and static memory. Then every DP collective sees
    identical arrivals and identical port horizons on all its members, so each replica's timeline
    is replica 0's, bit for bit (as the engine computes it), and only replica 0 is walked."""
    first = {}
    for g in w.gangs:
        f = first.setdefault(g.pp, g)
        if g.table is not f.table or g.speed != f.speed or g.static != f.static or \
                g.step_ops != f.step_ops or g.optimizer_s != f.optimizer_s or \
                g.first_forwards != f.first_forwards:
            return False
    return True


class DPStream:
    """One rank's data-parallel stream, advanced lazily: a FIFO of gradient jobs whose bucket
    reservations are issued in time order (engine.py `_grad_reduce` with one member)."""
    __slots__ = ("w", "pp", "port", "jobs", "t", "cur", "b", "ivs", "dp_ivs")

    def __init__(self, w: Workload, pp: int, port: Port, dp_ivs: list):
        self.w, self.pp, self.port = w, pp, port
        self.jobs: deque = deque()
        self.t = 0.0          # when the stream is next free
        self.cur = None       # (bucket ready times as a list and an array, seconds per bucket) of the job in progress
        self.b = 0
        self.ivs: list = []
        self.dp_ivs = dp_ivs  # the rank timeline's DP intervals

    def put(self, stage: int, t0: float, dur: float) -> None:
        self.jobs.append((stage, t0, dur))

    def _start_job(self) -> bool:
        """Take the next job with buckets to reduce; False if none is queued."""
        w = self.w
        while self.cur is None:
            if not self.jobs:
                return False
            stage, t0, dur = self.jobs.popleft()
            sizes = w.buckets[stage]
            if t0 > self.t:
                self.t = t0   # an idle stream wakes when the job is queued
            if grad_group(w) <= 1 or not sizes:
                continue
            arr = ready_times(t0, dur, len(sizes))
            self.cur = (arr.tolist(), arr, bucket_seconds(w, stage, self.pp))
            self.b = 0
        return True

    def advance(self, before: float | None = None) -> None:
        """Issue every bucket reservation requested before `before` (all pending ones if None).
        Bucket b is requested at max(stream free, its ready time) and holds the port for `sec`
        (the engine's `_grad_reduce` with one member, same arithmetic); back-to-back buckets
        extend one interval (the same union). Long stretches run in numpy (`_stretch`)."""
        port, ivs = self.port, self.ivs
        limit = INF if before is None else before
        while self._start_job():
            ready, arr, sec = self.cur
            n = len(ready)
            t, b = self.t, self.b
            free = port.free_at
            # the current run of back-to-back buckets, merged into ivs when it ends
            run_start, run_end = (ivs.pop() if ivs else (None, None))
            python = 1                    # buckets to step in Python before trying numpy
            while b < n:
                stop = b + python
                while b < n and b < stop:
                    r = ready[b]
                    req = r if r > t else t
                    if req >= limit:
                        break
                    start = req if req > free else free
                    if start != run_end:
                        if run_end is not None:
                            ivs.append((run_start, run_end))
                        run_start = start
                    free = t = run_end = start + sec
                    b += 1
                if b < stop or b >= n:    # stopped at `before`, or done
                    break
                m, run_start, run_end = _stretch(arr, b, t, sec, limit, run_start, run_end, ivs)
                if m:
                    b += m
                    free = t = run_end
                python = 1 if m >= 16 else 32   # short stretches: numpy costs more than it saves
            if run_end is not None:
                ivs.append((run_start, run_end))
            port.free_at = free
            self.t, self.b = t, b
            if b < n:
                return
            self.dp_ivs.extend(ivs)
            ivs.clear()
            self.cur = None


INF = float("inf")
_SYNC_ROWS: dict = {}     # id(steps row) -> (row, the row with p2p_sync's POST / WAIT steps)


def _stretch(ready, b: int, t: float, sec: float, limit: float, run_start, run_end, ivs):
    """Buckets b, b+1, ... of one job while they stay in one regime, with the stream free at t
    (= the port's horizon, = run_end): returns (how many, run start, run end).
    Behind (bucket b ready by t): bucket b+j starts at T_j = t + sec + ... + sec, summed left to
    right (cumsum is sequential, as the Python loop adds), while it is ready by T_j and T_j is
    before `limit`: all one interval. Ahead: bucket b+j starts at its ready time S_j and ends at
    S_j + sec, while S_j is at or after the previous end and before `limit`."""
    import numpy as np
    rest = ready[b:]
    if rest[0] <= t:
        T = np.cumsum(np.concatenate(([t], np.full(len(rest), sec))))
        ok = (rest <= T[:-1]) & (T[:-1] < limit)
        m = len(rest) if ok.all() else int(np.argmin(ok))
        if m:
            run_end = float(T[m])
        return m, run_start, run_end
    E = rest + sec
    ok = rest < limit
    ok[1:] &= rest[1:] >= E[:-1]
    m = len(rest) if ok.all() else int(np.argmin(ok))
    if not m:
        return 0, run_start, run_end
    S, E = rest[:m], E[:m]
    new = np.empty(m, dtype=bool)
    new[0] = True                        # S_0 > t = run_end
    new[1:] = S[1:] != E[:-1]
    last = np.empty(m, dtype=bool)
    last[:-1] = new[1:]
    last[-1] = True
    if run_end is not None:
        ivs.append((run_start, run_end))
    runs = list(zip(S[new].tolist(), E[last].tolist()))
    run_start, run_end = runs.pop()
    ivs.extend(runs)
    return m, run_start, run_end


def ready_times(t0: float, dur: float, n: int):
    """Bucket b of n is ready at t0 + dur (b+1)/n: numpy's elementwise IEEE operations in the
    engine's order ((b+1)/n, times dur, plus t0), so every value equals the engine's."""
    import numpy as np
    return t0 + dur * (np.arange(1, n + 1) / n)


class DagRun:
    """The engine's outputs (tl, mem, events) from one topological pass; `run()` returns None
    when the plan deadlocks (the caller runs the SimPy engine for its error report)."""

    def __init__(self, w: Workload):
        self.w = w
        self.tl = [RankTimeline(rank=g.id, stage=g.pp, stages=tuple(w.plan.stages_of(g.pp))) for g in w.gangs]
        self.mem = [MemoryTracker(g.static) for g in w.gangs]
        self.events: list = []
        flat_memory_logs(w, self.mem)       # memory logs as flat (time, change id) lists

    def run(self):
        w = self.w
        n = len(w.gangs)
        boxes = [{} for _ in range(n)]       # per rank: message key -> (wire start, arrival)
        ports = [{"intra": Port(), "inter": Port()} for _ in range(n)]
        state = [None] * n
        walked = [g for g in w.gangs if g.dp == 0]      # all of them, except in symmetric full mode
        for g in walked:
            tl = self.tl[g.id]
            tl.comm["P2P"] = []               # key order as the engine's
            dp_port = ports[g.id][w.dp_group[g.pp][1]]
            dp = DPStream(w, g.pp, dp_port, tl.comm.setdefault("DP", []) if grad_group(w) > 1 else [])
            peers = {q: w.gang_at[(g.dp, q)] for q in range(w.plan.num_ranks) if (g.dp, q) in w.gang_at}
            # [next op index, clock, receive buffer bytes, dp stream, peers]
            state[g.id] = [0, 0.0, 0.0, dp, peers]
        pending = deque(g.id for g in walked)
        blocked: dict = {}                    # (dst gang, message key) -> gang waiting for it
        # p2p_sync (sim/p2p_sync.py): per gang, receive key -> when it was posted; a sender
        # waiting for a receive to be posted parks under ("post", dst gang, message key)
        self.posted = [{} for _ in range(n)]
        walks = {gid: self._walk(gid, state[gid], boxes, ports, blocked, pending) for gid in pending}
        done = 0
        while pending:
            gid = pending.popleft()
            if next(walks[gid], None) is None:   # the rank ran its whole plan
                self._finish(gid, state[gid])
                done += 1
        if done < len(walked):
            return None
        for g in walked:
            if not self.tl[g.id].comm.get("DP"):
                self.tl[g.id].comm.pop("DP", None)
        summarize(w, [self.tl[g.id] for g in walked], [self.mem[g.id] for g in walked], False, walked)
        if len(walked) < n:                   # symmetric replicas: replica 0's timelines, shared
            rep = {g.pp: g.id for g in walked}
            for g in w.gangs:
                if g.dp:
                    src = self.tl[rep[g.pp]]
                    self.tl[g.id] = replace(src, rank=g.id)
                    self.mem[g.id] = self.mem[rep[g.pp]]
        return self

    def _walk(self, gid, st, boxes, ports, blocked, pending):
        """Rank `gid`'s plan as a generator: it runs until a RECV finds no message (yields True;
        the sender queues it on `pending` when the message is posted) or the plan ends. A generator
        keeps the rank's locals bound between resumptions."""
        g = self.w.gangs[gid]
        ops, table = g.steps, g.table
        sync = self.w.p2p_sync
        if sync:                              # blocking batches: POST / WAIT pseudo-steps
            plan = self.w.plan
            ops = row_memo(_SYNC_ROWS, ops, lambda row: dag_steps(batched_row(row, plan)))
            post_times = self.posted
            sent_end = sent_wire = 0.0
        tl = self.tl[gid]
        mtimes, mids, reg = self.mem[gid].flat
        compute, recv = tl.compute, tl.recv
        p2p = tl.comm["P2P"]
        t, recv_buffer, dp, peers = st[1], st[2], st[3], st[4]
        recv_free = 0
        box = boxes[gid]
        my_ports = ports[gid]
        dp_port = dp.port
        overlap = self.w.overlap_grad_reduce
        every = self.w.grad_every_microbatch
        for code, key, kind, stage, grad_last, rkey, peer, _, _, _ in ops:
            c = table[key]
            if code == COMPUTE:
                start = t
                m0, m1, _, _ = c.ids
                if m0:
                    mtimes.append(start)
                    mids.append(m0)
                if overlap and (grad_last or every and kind in GRAD_KINDS):
                    dp.put(stage, start, c.dur)
                t = start + c.dur
                if c.dp_slow > 1.0 or c.dp_stall:
                    if dp.cur is not None or dp.jobs:
                        dp.advance(t)         # the collectives requested before t reserve first
                    if dp.ivs or dp.dp_ivs:
                        end = finish_time((dp.dp_ivs, dp.ivs), start, c.dur, c.dp_slow, c.dp_stall)
                        if end > t:
                            tl.contention_s += end - t
                            t = end
                compute.append((start, t, kind))
                if m1:
                    mtimes.append(t)
                    mids.append(m1)
                if recv_buffer:
                    mtimes.append(t)
                    mids.append(recv_free or reg.buffer_free(recv_buffer))
                    recv_buffer = 0.0
            elif code == SEND:
                if c.extra:
                    start = t
                    t = start + c.extra
                    compute.append((start, t, "QUANTIZE"))
                if sync:                      # the receiver must have posted the receive
                    dst = peers[peer]
                    tb = post_times[dst].pop(rkey, None)
                    while tb is None:
                        blocked[("post", dst, rkey)] = gid
                        yield True
                        tb = post_times[dst].pop(rkey, None)
                    if tb > t:
                        t = tb
                port = my_ports[c.port]
                if port is dp_port and (dp.cur is not None or dp.jobs):
                    dp.advance(t)         # buckets requested before now reserve first
                wire, end = port.send(t, c.dur)
                dst = peers[peer]
                boxes[dst][rkey] = (wire, end)
                if blocked:
                    waiter = blocked.pop((dst, rkey), None)
                    if waiter is not None:
                        pending.append(waiter)
                if c.nbytes:
                    _, _, alloc, free = c.ids
                    mtimes.append(t)
                    mids.append(alloc)
                    mtimes.append(end)
                    mids.append(free)
                p2p.append((wire, end))
                if sync and end > sent_end:
                    sent_end, sent_wire = end, wire
            elif sync and code == POST:       # the batch's receives are posted: wake their senders
                mine = post_times[gid]
                for k in rkey:
                    mine[k] = t
                    waiter = blocked.pop(("post", gid, k), None)
                    if waiter is not None:
                        pending.append(waiter)
            elif sync and code == WAIT:       # the batch ends when its sends have finished
                if sent_end > t:
                    recv.append((t, sent_end, sent_wire, "SEND_WAIT"))
                    t = sent_end
                sent_end = 0.0
            else:
                posted = box.pop(rkey, None)
                while posted is None:         # message not sent yet: park this rank
                    blocked[(gid, rkey)] = gid
                    yield True
                    posted = box.pop(rkey, None)
                wire, arrived = posted
                recv.append((t, arrived if arrived > t else t, wire, kind))
                if arrived > t:
                    t = arrived
                if c.nbytes:
                    mtimes.append(t)
                    mids.append(c.ids[2])
                    # one message to free: its own buffer_free entry; several: their sum's
                    recv_free = 0 if recv_buffer else c.ids[3]
                    recv_buffer += c.nbytes
                if c.gather:                  # the TP group all-gathers the slices (scatter/gather)
                    start = t
                    t = start + c.gather
                    compute.append((start, t, "P2P_GATHER"))
                if c.extra:
                    start = t
                    t = start + c.extra
                    compute.append((start, t, "DEQUANTIZE"))
        st[0], st[1], st[2] = len(ops), t, recv_buffer

    def _finish(self, gid, st) -> None:
        """End of step (engine.py `rank` after its plan): drain the DP stream, the per-step fixed
        ops (optimizer, ...), the ZeRO-1/2 all-gather of the updated weights."""
        w, g, tl = self.w, self.w.gangs[gid], self.tl[gid]
        t, dp = st[1], st[3]
        tl.pipe_end = t
        if not w.overlap_grad_reduce:
            for stage in tl.stages:
                dp.put(stage, t, 0.0)
        dp.advance()
        if dp.t > t:
            t = dp.t
        for name, sec in (g.step_ops or (("OPTIMIZER", g.optimizer_s),)):   # per-step fixed ops
            if sec <= 0:
                continue
            start = t
            t = start + sec
            tl.compute.append((start, t, name))
        if w.zero_stage in (1, 2) and grad_group(w) > 1:
            sec = param_gather_exposed(w, g)
            if sec > 0:
                start, end = dp.port.reserve(t, sec)
                tl.comm.setdefault("ZERO_ALLGATHER", []).append((start, end))
                t = end
            lost = param_gather_contention(w, g)
            if lost > 0.0:                    # the forwards beside its hidden part (engine.py)
                start = t
                t = start + lost
                tl.compute.append((start, t, "CONTENTION"))
                tl.contention_s += lost
        tl.end = t
