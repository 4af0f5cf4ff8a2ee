"""The SimPy engine: one process per simulated rank walking its lowered plan.

Per rank (a TP gang, see workload.py): the rank process is the compute stream (F/B/I/W/R,
quantize, dequantize, optimizer run one after another); sends leave through the network's ports
without blocking it (isend); RECV blocks it until the message is delivered (irecv + wait); a
second process is its data-parallel stream, which serves a FIFO queue of gradient buckets and
ZeRO gathers, so DP communication overlaps the backward (Megatron `overlap_grad_reduce`; Li et
al. VLDB 2020 "PyTorch Distributed", Sec. 3.2: gradient bucketing overlapped with the backward).

Gradient buckets: a stage's gradients are final during its last gradient-producing action (B,
or W with an I/W split); that action is cut into n = ceil(grad_bytes / bucket) equal slices and
bucket k is ready at the end of slice k (backward runs from the last layer to the first, filling
buckets in order). After its plan the rank waits for its DP queue, runs the optimizer step and,
under ZeRO-1/2, all-gathers the updated weights (Rajbhandari et al. 2020, Sec. 5).
ZeRO-3: the weights of a stage are all-gathered before every F and backward (B or I), prefetched
one action ahead on the DP stream; the gathered copy is held until that action ends.
"""
from __future__ import annotations

from collections import deque
from heapq import heappush

from pipesim.costs.zero_groups import shard_size
from pipesim.errors import PlanError
from pipesim.report.metrics import RankTimeline
from pipesim.sim.driver import DP_PRIORITY, NORMAL, Proc, at, bind_simpy, ready_event, release_env, run_queue
from pipesim.sim.gc_pause import no_gc
from pipesim.sim.interference import add_busy, finish_time
from pipesim.sim.memory import MemoryTracker
from pipesim.sim.network import Network, reserve_all
from pipesim.sim.p2p_sync import batched_row, comm_batches, post_receives, wait_receiver, wait_sends
from pipesim.sim.summary import flat_memory_logs, row_memo, summarize
from pipesim.sim.dp_time import bucket_seconds, collective_seconds, param_gather_contention, param_gather_exposed
from pipesim.sim.workload import GRAD_KINDS, STEP_COMPUTE as COMPUTE, STEP_SEND as SEND, Workload


_CODES: dict = {}       # id(steps row) -> (row, {cost key: step code})


def step_info(steps, table, ports) -> list:
    """Per cost-table key, what the rank loop reads, unpacked in one go: compute (seconds,
    memory change ids at start and end), send (wire seconds, port, quantize seconds, buffer
    alloc / free ids, 0 without bytes), receive (bytes, dequantize seconds, alloc / free ids, TP
    all-gather seconds)."""
    codes = row_memo(_CODES, steps, lambda row: {op.key: op.code for op in row})
    info = [None] * len(table)
    for key, code in codes.items():
        c = table[key]
        m0, m1, alloc, release = c.ids
        if code == COMPUTE:
            info[key] = (c.dur, m0, m1, c.dp_slow, c.dp_stall)
        elif code == SEND:
            info[key] = (c.dur, ports[c.port], c.extra, alloc if c.nbytes else 0, release)
        else:
            info[key] = (c.nbytes, c.extra, alloc, release, c.gather)
    return info


class Engine:
    def __init__(self, w: Workload, trace: bool = False):
        import simpy
        bind_simpy()
        self.w = w
        self.trace = trace
        self.env = simpy.Environment()
        self.net = Network(self.env, len(w.gangs))
        n = len(w.gangs)
        self.queues = [deque() for _ in range(n)]
        self.wake = [None] * n
        self.pc = [-1] * n          # -1: inside its plan (the frame's `idx`), else where it stopped
        self.posted = [{} for _ in range(n)]   # p2p_sync: receive key -> time posted, or a waiting sender
        self.tl = [RankTimeline(rank=g.id, stage=g.pp, stages=tuple(w.plan.stages_of(g.pp))) for g in w.gangs]
        self.mem = [MemoryTracker(g.static) for g in w.gangs]
        flat_memory_logs(w, self.mem)
        self.events: list = []
        self.dp_peers: dict = {}
        for g in w.gangs:
            self.dp_peers.setdefault(g.pp, []).append(g.id)
        self.dp_n = w.scenario.parallel.data * w.scenario.parallel.context   # gradient group: data x context
        self.shard_n = shard_size(self.dp_n, w.scenario.training.zero_replicas)   # ZeRO shards over one replica
        # per DP group (pipeline rank): its collectives' intervals, which slow the compute beside
        # them (sim/interference.py)
        self.busy = {g.pp: [] for g in w.gangs}

    # ---------------------------------------------------------------- helpers
    def record(self, gid, stream, kind, stage, mb, start, end, nbytes=0.0, **args):
        if self.trace:
            self.events.append((gid, stream, kind, stage, mb, start, end, nbytes, args))

    def put(self, gid: int, job) -> None:
        """Queue a job on rank `gid`'s DP stream (FIFO) and wake it if idle."""
        self.queues[gid].append(job)
        ev = self.wake[gid]
        if ev is not None:
            self.wake[gid] = None
            ev._ok = True
            ev._value = None
            self.env.schedule(ev, DP_PRIORITY)

    # ---------------------------------------------------------------- rank process
    def rank(self, g, armed):
        """Generator: rank g's plan. The hot loop waits on one reused event (`timer`: re-armed
        with the `armed` callback list of its driver, `Proc`, then `yield None`; pushed at its
        absolute due time, exactly where a Timeout of the same delay lands) and logs memory as
        flat (time, change id) lists: no object per action beyond the timeline tuples the
        report reads."""
        env, w, net = self.env, self.w, self.net
        gid = g.id
        tl = self.tl[gid]
        mtimes, mids, reg = self.mem[gid].flat
        boxes, pc = net.boxes, self.pc
        busy = (self.busy[g.pp],)
        box = boxes[gid]
        ports = net.ports[gid]
        peers = [w.gang_at.get((g.dp, q)) for q in range(w.plan.num_ranks)]
        peer_box = [None if q is None else boxes[q] for q in peers]
        ops, table = g.steps, g.table
        info = step_info(ops, table, ports)
        sync = w.p2p_sync                 # blocking, batched P2P (sim/p2p_sync.py)
        if sync:
            ops = batched_row(ops, w.plan)
            batch_ends, posts = comm_batches(ops)
            sent_end = sent_wire = 0.0    # when the current batch's sends finish, the last one's wire start
        trace = self.trace
        zero3 = w.zero_stage == 3 and self.dp_n > 1
        prefetch = w.zero3_prefetch
        overlap = w.overlap_grad_reduce
        every = w.grad_every_microbatch
        refetch = w.reshard_after_forward     # else only a forward gathers; its backward keeps them
        gathers = [i for i, op in enumerate(ops) if op.gather and (refetch or op.kind == "F")] if zero3 else []
        if w.gather_once_per_step:            # FSDP2 under pipelining: the first forward gathers for the step
            firsts = {}
            for i in gathers:
                firsts.setdefault(ops[i].stage, i)
            gathers = sorted(firsts.values())
        gathering = set(gathers)
        gather_ev, gather_next = {}, 0
        if gathers:
            gather_ev[gathers[0]] = self._issue_gather(g, ops[gathers[0]], 0)
            gather_next = 1
        recv_buffer = 0.0
        recv_free = 0                     # change id freeing the one buffered message (0: several)
        compute, recv_log = tl.compute, tl.recv
        p2p = tl.comm.setdefault("P2P", [])
        queue, eid = env._queue, env._eid
        # bound methods held in locals: the hot loop calls them ~5 times per action
        mt_add, mi_add, c_add, p2p_add, recv_add = (mtimes.append, mids.append, compute.append, p2p.append,
                                                    recv_log.append)
        timer = ready_event(env)
        for idx, (code, key, kind, stage, grad_last, rkey, peer, mb, _, _) in enumerate(ops):
            if code == COMPUTE:
                gather = idx in gathering
                dur, m0, m1, slow, stall = info[key]
                if gather:
                    ev = gather_ev.pop(idx)
                    if not ev.processed:
                        yield ev
                    if prefetch and gather_next < len(gathers):
                        j = gathers[gather_next]
                        gather_ev[j] = self._issue_gather(g, ops[j], gather_next)
                        gather_next += 1
                    if prefetch:
                        # layer by layer: the first layer waits for its own weights, the last
                        # computes after the whole gather (ev fires when it is scheduled)
                        gs, ge = ev.value
                        per = 1.0 / w.gather_layers[stage]
                        begin = max(gs + (ge - gs) * per, ge + dur * per - dur)
                        if begin > env._now:
                            timer.callbacks = armed
                            heappush(queue, (begin, NORMAL, next(eid), timer))
                            yield None
                start = env._now
                if m0:
                    mt_add(start)
                    mi_add(m0)
                if overlap and (grad_last or every and kind in GRAD_KINDS):
                    self.put(gid, ("grad", stage, start, dur, mb))
                timer.callbacks = armed
                heappush(queue, (start + dur, NORMAL, next(eid), timer))
                yield None
                end = env._now
                if (slow > 1.0 or stall) and busy[0]:
                    done = finish_time(busy, start, dur, slow, stall)
                    if done > end:
                        timer.callbacks = armed
                        heappush(queue, (done, NORMAL, next(eid), timer))
                        yield None
                        tl.contention_s += done - end
                        end = env._now
                c_add((start, end, kind))
                if m1:
                    mt_add(end)
                    mi_add(m1)
                if recv_buffer:
                    mt_add(end)
                    mi_add(recv_free or reg.buffer_free(recv_buffer))
                    recv_buffer = 0.0
                if every and not overlap and kind in GRAD_KINDS:
                    # sharded gradients without overlap: reduce-scattered right after each
                    # backward, the rank waiting for it (DeepSpeed's default overlap_comm false)
                    self.put(gid, ("grad", stage, end, 0.0, mb))
                    yield from self._drain(gid)
                if gather:
                    held = self._gathered(stage)
                    if held:
                        mt_add(end)
                        mi_add(reg.buffer_free(held))
                    if not prefetch and gather_next < len(gathers):
                        # synchronous gathers: the next one starts once this compute is done
                        j = gathers[gather_next]
                        gather_ev[j] = self._issue_gather(g, ops[j], gather_next)
                        gather_next += 1
                if trace:
                    c = table[key]
                    self.record(gid, "compute", kind, stage, mb, start, end, tp=c.tp, **({"cp": c.cp} if c.cp else {}))
            elif code == SEND:
                if sync and idx in posts:
                    post_receives(self, gid, posts[idx])
                dur, port, extra, alloc, release = info[key]
                if extra:                        # quantize on the sender's compute stream
                    start = env._now
                    timer.callbacks = armed
                    heappush(queue, (start + extra, NORMAL, next(eid), timer))
                    yield None
                    c_add((start, env._now, "QUANTIZE"))
                    if trace:
                        self.record(gid, "compute", "QUANTIZE", stage, mb, start, env._now)
                if sync:                         # the receiver must have posted the receive
                    yield from wait_receiver(self, peers[peer], rkey, timer, armed)
                # isend: take this rank's port (Port.send), post the message (network.py)
                now = env._now
                wire, end = port.send(now, dur)
                dbox = peer_box[peer]
                waiting = dbox.get(rkey)
                if waiting is None:
                    dbox[rkey] = (wire, end)
                else:
                    waiting._value = (wire, end)
                    heappush(queue, (end, NORMAL, next(eid), waiting))
                if alloc:
                    mt_add(now)
                    mi_add(alloc)
                    mt_add(end)
                    mi_add(release)
                p2p_add((wire, end))
                if trace:
                    self.record(gid, "send", kind, stage, mb, wire, end, table[key].nbytes, issued=now, dst=peer,
                                flow=(peers[peer],) + rkey)
                if sync:
                    if end > sent_end:
                        sent_end, sent_wire = end, wire
                    if idx + 1 in batch_ends:
                        sent_end = yield from wait_sends(env, sent_end, sent_wire, recv_log, timer, armed)
            else:                                 # RECV_F / RECV_B: wait for the message
                if sync and idx in posts:
                    post_receives(self, gid, posts[idx])
                reached = env._now
                posted = box.pop(rkey, None)
                if posted is None:                # not sent yet: the sender pushes `timer` when it lands
                    timer.callbacks = armed
                    box[rkey] = timer
                    yield None
                    del box[rkey]
                    wire, arrived = timer._value
                else:
                    wire, arrived = posted
                    if arrived > reached:
                        timer.callbacks = armed
                        heappush(queue, (arrived, NORMAL, next(eid), timer))
                        yield None
                now = env._now
                recv_add((reached, now, wire, kind))
                nbytes, extra, alloc, release, gather = info[key]
                if nbytes:
                    mt_add(now)
                    mi_add(alloc)
                    recv_free = 0 if recv_buffer else release
                    recv_buffer += nbytes
                if trace:
                    self.record(gid, "recv", kind, stage, mb, reached, now, nbytes, wire_start=wire, src=peer)
                if gather:                       # the TP group all-gathers the slices (scatter/gather)
                    timer.callbacks = armed
                    heappush(queue, (now + gather, NORMAL, next(eid), timer))
                    yield None
                    c_add((now, env._now, "P2P_GATHER"))
                    if trace:
                        self.record(gid, "compute", "P2P_GATHER", stage, mb, now, env._now, tp=gather)
                    now = env._now
                if extra:                        # dequantize on the receiver
                    timer.callbacks = armed
                    heappush(queue, (now + extra, NORMAL, next(eid), timer))
                    yield None
                    c_add((now, env._now, "DEQUANTIZE"))
                    if trace:
                        self.record(gid, "compute", "DEQUANTIZE", stage, mb, now, env._now)
                if sync and idx + 1 in batch_ends:
                    sent_end = yield from wait_sends(env, sent_end, sent_wire, recv_log, timer, armed)
        pc[gid] = len(ops)
        tl.pipe_end = env._now
        # ---- end of step: gradient reduction, optimizer, ZeRO-1/2 weight all-gather
        if not overlap and not every:
            for st in tl.stages:
                self.put(gid, ("grad", st, env._now, 0.0, -1))
        yield from self._drain(gid)
        # per-step fixed ops (embedding all-reduce, grad norm, optimizer, FP8 weight cast)
        for name, sec in (g.step_ops or (("OPTIMIZER", g.optimizer_s),)):
            if sec <= 0:
                continue
            start = env._now
            yield env.timeout(sec)
            c_add((start, env._now, name))
            self.record(gid, "compute", name, -1, -1, start, env._now)
        # the distributed optimizer's parameter all-gather; with Megatron's --overlap-param-gather
        # it runs under the next step's forwards, so only what outlasts them is exposed
        # (costs/param_gather.py)
        if w.zero_stage in (1, 2) and self.dp_n > 1:
            self.put(gid, ("allgather", sum(w.weights_full[st] for st in tl.stages), param_gather_exposed(w, g)))
            yield from self._drain(gid)
            lost = param_gather_contention(w, g)
            if lost > 0.0:                 # the forwards beside its hidden part (sim/interference.py)
                start = env._now
                yield env.timeout(lost)
                c_add((start, env._now, "CONTENTION"))
                tl.contention_s += lost
        self.put(gid, ("stop",))
        tl.end = env._now

    def _drain(self, gid):
        ev = self.env.event()
        self.put(gid, ("drain", ev))
        yield ev

    def _gathered(self, stage) -> float:
        """The gathered weights an action holds (costs/zero3_reuse.py stage_gathered_bytes: one
        unit in use; the prefetched next action's buffer is the other live one); nothing when the
        weights stay gathered from forward to backward (counted as resident weights)."""
        return self.w.gathered_held[stage]

    def _issue_gather(self, g, op, j):
        ev = self.env.event()
        # the share of the weights this pass gathers (w.gather_passes: DeepSpeed's release rule)
        passes = self.w.gather_passes[0 if op.kind == "F" else 1]
        if not passes:
            # a small model stays gathered from its forward to its backward (every reuse within
            # stage3_max_reuse_distance): nothing to gather
            now = self.env.now
            ev.succeed((now, now))
            return ev
        gathered = self._gathered(op.stage)
        if gathered:
            times, ids, reg = self.mem[g.id].flat
            times.append(self.env.now)
            ids.append(reg.id_of((("buffers", gathered),)))
        self.put(g.id, ("gather", op.stage, j, ev, passes))
        return ev

    # ---------------------------------------------------------------- DP stream
    def dp_stream(self, g):
        env, w = self.env, self.w
        q = self.queues[g.id]
        tl = self.tl[g.id]
        while True:
            if not q:
                ev = self.wake[g.id] = env.event()
                yield ev
                continue
            job = q.popleft()
            typ = job[0]
            if typ == "stop":
                return
            if typ == "drain":
                job[1].succeed()
            elif typ == "grad":
                _, st, t0, dur, mb = job
                sizes = w.buckets[st]
                if self.dp_n <= 1 or not sizes:
                    continue
                ivs = yield from self._grad_reduce(g, st, t0, dur, sizes, mb)
                tl.comm.setdefault("DP", []).extend(ivs)
                if self.trace:
                    for b, (start, end) in enumerate(ivs):
                        self.record(g.id, "dp", "DP", st, -1, start, end, sizes[b], bucket=b, op=w.grad_kind)
            elif typ == "gather":
                _, st, j, ev, passes = job
                nbytes = w.weights_full[st] * passes
                # One ring all-gather per parameter tensor over the flat data-parallel group, as
                # ZeRO-3 issues them (NCCL all-gather is a ring): each pays (N-1) latencies
                # (Thakur et al. 2005), which dominates at large N.
                n = w.gather_tensors[st] * passes
                sec = n * collective_seconds(w, "all_gather", nbytes / n, g.pp, "ring")
                if w.zero3_gather_rate:        # the framework's own rate, when it is the slower
                    sec = max(sec, nbytes * (1 - 1 / self.shard_n) / w.zero3_gather_rate)
                start, end = yield from self._collective_slot(g, ("gather", g.pp, j), sec)
                if w.zero3_prefetch:          # the compute pipelines behind it (step loop)
                    ev.succeed((start, end))
                yield at(env, end, DP_PRIORITY)
                tl.comm.setdefault("ZERO_GATHER", []).append((start, end))
                self.record(g.id, "dp", "ZERO_GATHER", st, -1, start, end, nbytes)
                if not ev.triggered:
                    ev.succeed((start, end))
            elif typ == "allgather":
                nbytes, sec = job[1], job[2]
                if sec <= 0:
                    continue
                start, end = yield from self._collective(g, ("params", g.pp), sec)
                tl.comm.setdefault("ZERO_ALLGATHER", []).append((start, end))
                self.record(g.id, "dp", "ZERO_ALLGATHER", -1, -1, start, end, nbytes)

    def _ports(self, g):
        _, port = self.w.dp_group[g.pp]
        return [self.net.ports[m][port] for m in self.dp_peers[g.pp]]

    def _collective(self, g, key, sec):
        """Generator: one collective over g's DP group; returns its (start, end) once it ends."""
        start, end = yield from self._collective_slot(g, key, sec)
        yield at(self.env, end, DP_PRIORITY)
        return start, end

    def _collective_slot(self, g, key, sec):
        """Generator: reserve one collective over g's DP group on every member's ports once all
        have arrived (and log it beside the group's compute, sim/interference.py); returns its
        (start, end) then, without waiting for it to run."""
        env = self.env
        members = self.dp_peers[g.pp]
        if len(members) == 1:
            slot = reserve_all(self._ports(g), env.now, sec)
            add_busy(self.busy[g.pp], *slot, False)
            return slot
        bar, last = self.net.arrive(key, len(members))
        if last:
            bar.data = reserve_all(self._ports(g), env.now, sec)
            add_busy(self.busy[g.pp], *bar.data, False)
            bar.done.succeed()
            return bar.data
        yield bar.done
        return bar.data

    def _grad_reduce(self, g, st, t0, dur, sizes, mb=-1):
        """Generator: the buckets of stage `st` over g's DP group; returns their intervals.

        Bucket b of a member is ready at t0 + dur (b+1)/n; it starts when every member has it
        ready and the previous bucket is done (one DP stream per GPU), on all members' ports."""
        env, w = self.env, self.w
        members = self.dp_peers[g.pp]
        n = len(sizes)
        sec = bucket_seconds(w, st, g.pp)
        if len(members) > 1:
            bar, last = self.net.arrive(("grad", g.pp, st, mb), len(members), (t0, dur))
            if not last:
                yield bar.done
                return bar.data
            arrivals = bar.data
        else:
            arrivals = [(t0, dur)]
        ports = self._ports(g)
        busy = self.busy[g.pp]
        same = all(d == arrivals[0][1] for _, d in arrivals)
        t_max = max(t for t, _ in arrivals)
        ivs = []
        single = ports[0] if len(ports) == 1 else None
        queue, eid = env._queue, env._eid
        timer = ready_event(env)         # one event re-armed per wait (as in the rank loop)
        for b in range(n):
            frac = (b + 1) / n
            ready = t_max + dur * frac if same else max(t + d * frac for t, d in arrivals)
            now = env._now
            if ready > now:
                timer.callbacks = []
                heappush(queue, (ready, DP_PRIORITY, next(eid), timer))
                yield timer
                now = ready
            start, end = single.reserve(now, sec) if single else reserve_all(ports, now, sec)
            add_busy(busy, start, end, b > 0)
            timer.callbacks = []
            heappush(queue, (end, DP_PRIORITY, next(eid), timer))
            yield timer
            ivs.append((start, end))
        if len(members) > 1:
            bar.data = ivs
            bar.done.succeed()
        return ivs

    # ---------------------------------------------------------------- run
    def run(self):
        env = self.env
        procs = []
        for g in self.w.gangs:
            # the rank re-arms its one timer with this shared [resume] list and yields None:
            # no callback list built, no append, per wait (run_queue only reads the list)
            armed = []
            procs.append(Proc(env, self.rank(g, armed), armed))
        streams = [Proc(env, self.dp_stream(g)) for g in self.w.gangs]
        with no_gc():
            run_queue(env)
        for proc in streams:              # each ends asleep on its wake event
            proc.close()
        release_env(env)
        stuck = [(g, p) for g, p in zip(self.w.gangs, procs) if p.is_alive]
        if stuck:
            raise self._deadlock(stuck)
        if self.trace:                    # samples need the change tuples (MemoryTracker.finish)
            for mem in self.mem:
                times, ids, reg = mem.flat
                mem.log = [(t, reg.changes[i]) for t, i in zip(times, ids)]
                mem.flat = None
        summarize(self.w, self.tl, self.mem, self.trace)
        return self

    def _deadlock(self, stuck) -> PlanError:
        from pipesim.schedules import format_grid
        plan = self.w.plan
        why, marks, seen = [], [], set()
        for g, proc in stuck:
            idx = self.pc[g.id]
            if idx < 0:                   # blocked inside its plan: the rank generator's loop index
                idx = proc._generator.gi_frame.f_locals["idx"]
            label = f"rank {g.pp}" + (f" (dp {g.dp})" if self.w.mode == "full" else "")
            if idx < len(g.steps):
                op = g.steps[idx]
                why.append(f"{label} blocked at {op.stage}{op.kind}{op.mb}")
                if g.pp not in seen:
                    marks.append((g.pp, idx))
                    seen.add(g.pp)
            else:
                why.append(f"{label} blocked in its end-of-step collectives")
        return PlanError(f"plan {plan.name!r} deadlocks in simulation at t={self.env.now:.6g} s: "
                         + "; ".join(why) + "\n" + format_grid(plan.ranks, marks))
