"""Execute one rank's lowered plan for one training step, action by action, and record it.

F runs the stage forward (stage input detached at every stage boundary so each stage has its own
graph); B runs the full backward; I runs the backward with weight gradients deferred
(layers.WeightGradStore) and W runs them; SEND/RECV move real tensors with isend/irecv, each
message tagged by (stage, micro-batch, direction) so gloo matches them whatever the posting
order. RECVs are posted ahead of use (a window of RECV_AHEAD) so transfers overlap compute; a
RECV event is the wait. A sent tensor is held until its message is known to be received: when a
message arrives from a peer that the peer sent after the receive of ours (plan positions), so
memory stays bounded by the schedule's own window while no send is ever waited on before its
receiver reached it (waiting on a send early deadlocks the looped / V schedules). Data-parallel
gradients are all-reduced in buckets of grad_bucket_MB, launched asynchronously after a stage's
last backward when overlap_grad_reduce is set.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from pipesim.emulator.memory import TRIM_EVERY_ACTIONS, release_free_heap

RECV_AHEAD = 2


@dataclass
class Runtime:
    """What one process needs to execute its plan."""
    scenario: object
    rank: int
    coords: dict                     # tp, dp, pp
    plan: object                     # lowered Plan
    stages: dict                     # stage -> StageModel
    tp: object                       # layers.TPGroup
    dp_group: object
    store: object                    # WeightGradStore
    counter: object                  # MemoryCounter
    recorder: object
    peer_rank: dict                  # stage -> global rank holding it (same tp, dp coordinates)
    dtype: object
    device: object
    fault: object = None
    grad_buffers: dict = field(default_factory=dict)   # stage -> flat grad buffer
    losses: list = field(default_factory=list)
    quant_errors: list = field(default_factory=list)
    cp: object = None                # emulator.context.ContextGroup when context parallel

    def memory_reading(self) -> tuple[float, dict]:
        """(total bytes, by category): CPU from the counters; CUDA from the caching allocator,
        the counted saved tensors as "activations" and the rest of the allocation as "other"."""
        c = self.counter
        if self.device.type == "cuda":
            total = float(torch.cuda.memory_allocated(self.device))
            cats = c.by_category()
            cats["other"] = max(0.0, total - sum(cats.values()))
            return total, cats
        return c.total, c.by_category()


def message_positions(plan, pp: int) -> tuple[dict, dict]:
    """For rank row `pp` of a lowered plan: (send action -> index of its RECV in the receiver's
    row, RECV action -> index of its SEND in the sender's row). A rank runs its row in order, so
    when it executes row index j every RECV it has before j has been received."""
    index = [{(a.kind, a.stage, a.microbatch): i for i, a in enumerate(row) if a.is_comm} for row in plan.ranks]
    to_recv, from_send = {}, {}
    for a in plan.ranks[pp]:
        if a.kind in ("SEND_F", "SEND_B"):
            back = a.kind == "SEND_B"
            peer = a.stage - 1 if back else a.stage + 1
            to_recv[a] = index[plan.rank_of(peer)][("RECV_B" if back else "RECV_F", peer, a.microbatch)]
        elif a.kind in ("RECV_F", "RECV_B"):
            back = a.kind == "RECV_B"
            peer = a.stage + 1 if back else a.stage - 1
            from_send[a] = index[plan.rank_of(peer)][("SEND_B" if back else "SEND_F", peer, a.microbatch)]
    return to_recv, from_send


def _tag(stage: int, mb: int, backward: bool, part: int, num_stages: int) -> int:
    """A message's gloo tag: receiving stage, micro-batch, direction, part (data / scales)."""
    return ((mb * num_stages + stage) * 2 + int(backward)) * 4 + part


class Executor:
    def __init__(self, rt: Runtime):
        self.rt = rt
        s = rt.scenario
        self.S = rt.plan.num_stages
        self.M = rt.plan.num_microbatches
        self.bits = s.training.activation_compression_bits
        # sequence shard: 1/CP under context parallelism, then 1/t under SP
        seq = s.model.seq_length // s.parallel.context // (rt.tp.size if rt.tp.sp else 1)
        self.shape = (seq, s.training.micro_batch_size, s.model.hidden_size)   # [s, b, h]
        # Scatter/gather between stages (Narayanan et al. SC'21, Sec. 4.1): with tensor parallelism
        # and no sequence parallelism every TP rank holds the same activation, so each sends 1/t
        # of it and the receivers all-gather over their TP group.
        numel = seq * s.training.micro_batch_size * s.model.hidden_size
        self.sg = rt.tp.size > 1 and not rt.tp.sp and self.bits == 16 and numel % rt.tp.size == 0
        self.row = rt.plan.ranks[rt.coords["pp"]]
        # gradients are summed over data x context; each CP rank's loss is its tokens' mean
        self.reduce_n = s.parallel.data * s.parallel.context
        self.scale = 1.0 / (self.M * self.reduce_n)
        self.overlap = s.training.overlap_grad_reduce and self.reduce_n > 1
        # the last action producing weight gradients of each stage: the DP reduction may start after it
        self.last_grad_action = {}
        for i, a in enumerate(self.row):
            if a.kind in ("B", "W"):
                self.last_grad_action[a.stage] = i
        self._qlayout = None
        self.to_recv, self.from_send = message_positions(rt.plan, rt.coords["pp"])

    # ---------------------------------------------------------------- one step
    def run_step(self, step: int, tokens: torch.Tensor) -> None:
        """tokens: [M, micro_batch, seq+1] of this data-parallel rank."""
        rt = self.rt
        self.step = step
        self.inputs, self.outputs, self.grad_out, self.grad_in = {}, {}, {}, {}
        self.outputs_fwd: dict = {}      # (next stage, mb) -> activation to send or hand over
        self.recvs: dict = {}
        self.sends: dict = {}            # destination rank -> [(its RECV's row index, works, tensors)]
        self.dp_works: list = []
        self.tokens = tokens
        recv_positions = [i for i, a in enumerate(self.row) if a.kind.startswith("RECV")]
        self._recv_queue = [self.row[i] for i in recv_positions]
        self._post_recvs()
        # Saved-tensor accounting on CPU; on CUDA the allocator's statistics are used instead.
        with (contextlib.nullcontext() if rt.device.type == "cuda" else rt.counter.hooks()):
            for i, a in enumerate(self.row):
                self.run_action(step, a)
                if i % TRIM_EVERY_ACTIONS == TRIM_EVERY_ACTIONS - 1 and rt.device.type == "cpu":
                    release_free_heap()
                if self.overlap and self.last_grad_action.get(a.stage) == i and a.is_compute:
                    self._reduce_stage(a.stage, async_op=True)
        rt.recorder.status.set(step, "DP", "run")
        if self.overlap:
            self._wait_dp()
        elif self.reduce_n > 1:
            for k in sorted(rt.stages):
                self._reduce_stage(k, async_op=False)
        # after the data-parallel reduction, as Megatron's finalize_model_grads (finish_grad_sync,
        # then the layernorm all-reduce): the overlapped DP all-reduce still reads the gradient
        # buffers, so updating them in place before it finished raced with it
        if rt.tp.sp:
            self._sequence_parallel_grads()
        for flight in self.sends.values():
            for _, works, _tensors in flight:
                for work in works:
                    work.wait()
        rt.recorder.status.set(step, "SEND", "done")

    def run_action(self, step: int, a, fn=None) -> None:
        """One action: the executor's bookkeeping, then its do_ method (or `fn` as a compute
        action, for rank_calibration.measure_action)."""
        rt = self.rt
        self._begin, self._cpu0 = rt.recorder.now(), time.thread_time()
        name = str(a)
        rt.recorder.status.set(step, name, "run")
        if rt.fault is not None:
            rt.fault.check(rt.rank, step, name)
        if fn is None:
            getattr(self, "do_" + a.kind)(a)
        else:
            self._compute(a, fn)

    # ---------------------------------------------------------------- compute
    def _compute(self, a, fn) -> None:
        """A compute event spans the action from the executor taking it up to its memory sample
        written: the executor's own cost per action is part of the action (on a CPU host it
        runs on the same core, as the host model in calibrate_host.py counts it)."""
        rt, rec = self.rt, self.rt.recorder
        nbytes = fn()
        work_end = rec.now()
        if rec.cuda:      # NCCL collectives run asynchronously on the stream: no host timing
            rt.tp.log.clear()
        tp_s, tp_cpu = sum(r[2] - r[1] for r in rt.tp.log), rt.tp.take_cpu()
        for phase, s0, s1, nb, *_ in rt.tp.log:
            rec.event("comm", "TP", a.stage, a.microbatch, s0, s1, nb, phase=phase, within=a.kind)
        rt.tp.log.clear()
        rec.sample(work_end, *rt.memory_reading())
        end = work_end if rec.cuda else rec.now()
        # cpu_s: this thread's CPU time (on a shared CPU, wall minus cpu_s is time lost to others)
        rec.event("compute", a.kind, a.stage, a.microbatch, self._begin, end, nbytes or 0.0, tp=tp_s,
                  tp_cpu=tp_cpu, cpu_s=time.thread_time() - self._cpu0)

    def _forward(self, a) -> None:
        key = (a.stage, a.microbatch)
        model = self.rt.stages[a.stage]
        from pipesim.emulator.context import local_tokens
        x_tokens, targets = local_tokens(self.tokens[a.microbatch], self.rt.cp)
        if model.first:
            x = x_tokens
        elif key in self.inputs:            # received from another rank
            x = self.inputs[key]
        else:                               # previous stage on this rank: same-rank hand-off
            x = self.outputs_fwd.pop(key).detach().requires_grad_()
            self.inputs[key] = x
        if model.last:
            loss = model(x, targets)
            self.rt.losses.append(loss.detach())     # a tensor: no device sync per micro-batch
            self.outputs[key] = loss * self.scale
        else:
            out = model(x)
            self.outputs[key] = out
            self.outputs_fwd[(a.stage + 1, a.microbatch)] = out

    def _backward(self, a, defer: bool) -> None:
        key = (a.stage, a.microbatch)
        model = self.rt.stages[a.stage]
        store = self.rt.store
        out = self.outputs.pop(key)
        store.deferring, store.key = defer, key
        try:
            if model.last:
                torch.autograd.backward(out)
            else:
                grad = self.grad_out.pop(key, None)
                if grad is None:            # next stage on this rank handed its input gradient over
                    grad = self.grad_in.pop((a.stage + 1, a.microbatch))
                torch.autograd.backward(out, grad)
        finally:
            store.deferring = False
        if not model.first:
            self.grad_in[key] = self.inputs.pop(key).grad

    def do_F(self, a) -> None:
        self._compute(a, lambda: self._forward(a))

    def do_B(self, a) -> None:
        self._compute(a, lambda: self._backward(a, defer=False))

    def do_I(self, a) -> None:
        self._compute(a, lambda: self._backward(a, defer=True))

    def do_W(self, a) -> None:
        self._compute(a, lambda: self.rt.store.run((a.stage, a.microbatch)))

    def do_R(self, a) -> None:
        # Explicit recompute actions: the model recomputes inside its backward (checkpointing per
        # the scenario's recompute policy), so an R is recorded as a zero-length marker.
        self._compute(a, lambda: None)

    # ---------------------------------------------------------------- send / recv
    def _peer(self, stage: int) -> int:
        return self.rt.peer_rank[stage]

    def _post_recvs(self) -> None:
        while self._recv_queue and len(self.recvs) < RECV_AHEAD:
            a = self._recv_queue.pop(0)
            backward = a.kind == "RECV_B"
            src_stage = a.stage + 1 if backward else a.stage - 1
            src = self._peer(src_stage)
            if not backward and self.bits < 16:
                q = self._quant_template()
                bufs = [torch.empty_like(q.data), torch.empty_like(q.scales)]
            elif self.sg:
                n = self.shape[0] * self.shape[1] * self.shape[2] // self.rt.tp.size
                bufs = [torch.empty(n, dtype=self.rt.dtype, device=self.rt.device)]
            else:
                bufs = [torch.empty(self.shape, dtype=self.rt.dtype, device=self.rt.device)]
            works = [dist.irecv(b, src=src, tag=_tag(a.stage, a.microbatch, backward, i, self.S))
                     for i, b in enumerate(bufs)]
            self.recvs[a] = (works, bufs, self.rt.recorder.now())

    def _quant_template(self):
        if self._qlayout is None:
            from pipesim.kernels import quantize
            self._qlayout = quantize(torch.zeros(self.shape, dtype=self.rt.dtype, device=self.rt.device),
                                     self.bits)
        return self._qlayout

    def _wait_recv(self, a):
        if a not in self.recvs:
            self._post_recvs()
        works, bufs, posted = self.recvs.pop(a)
        rec = self.rt.recorder
        start = rec.now()
        for w in works:
            w.wait()
        end = rec.now()
        self._release_sends(self._peer(a.stage + 1 if a.kind == "RECV_B" else a.stage - 1), self.from_send[a])
        nbytes = sum(b.numel() * b.element_size() for b in bufs)
        extra = {} if rec.cuda else {"posted": rec.rel(posted)}
        rec.event("recv", a.kind, a.stage, a.microbatch, start, end, nbytes, **extra)
        self._post_recvs()
        return bufs

    def _gather_slices(self, a, buf):
        """All-gather the TP group's slices of a scatter/gather transfer into the full tensor."""
        rt = self.rt
        full = rt.tp.all_gather0(buf, "p2p_gather").view(self.shape)
        phase, s0, s1, nb, *_ = rt.tp.log.pop()
        rt.tp.take_cpu()           # a transfer's gather, not a compute action's
        rt.recorder.event("comm", "TP", a.stage, a.microbatch, s0, s1, nb, phase=phase)
        return full

    def do_RECV_F(self, a) -> None:
        bufs = self._wait_recv(a)
        if self.sg:
            bufs = [self._gather_slices(a, bufs[0])]
        if self.bits < 16:
            from pipesim.kernels import dequantize
            q = self._quant_template()
            rec = self.rt.recorder
            start = rec.now()
            x = dequantize(type(q)(bufs[0], bufs[1], q.shape, q.bits, q.group_size, q.dtype))
            rec.event("compute", "DEQUANTIZE", a.stage, a.microbatch, start, rec.now(), bufs[0].numel())
        else:
            x = bufs[0]
        self.inputs[(a.stage, a.microbatch)] = x.requires_grad_()

    def do_RECV_B(self, a) -> None:
        g = self._wait_recv(a)[0]
        self.grad_out[(a.stage, a.microbatch)] = self._gather_slices(a, g) if self.sg else g

    def _isend(self, a, tensors, backward: bool) -> None:
        dst = self._peer(a.stage - 1 if backward else a.stage + 1)
        if self.sg:      # this TP rank's slice only
            tensors = [tensors[0].reshape(-1).chunk(self.rt.tp.size)[self.rt.tp.rank]]
        rec = self.rt.recorder
        start = rec.now()
        tensors = [t.contiguous() for t in tensors]
        tag = _tag(a.stage + (-1 if backward else 1), a.microbatch, backward, 0, self.S)
        works = [dist.isend(t, dst=dst, tag=tag + i) for i, t in enumerate(tensors)]
        flight = self.sends.setdefault(dst, [])
        flight.append((self.to_recv[a], works, tensors))
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        # held: messages to this peer whose tensors are still kept (this one included)
        rec.event("send", a.kind, a.stage, a.microbatch, start, rec.now(), nbytes, held=len(flight))

    def _release_sends(self, peer: int, sent_at: int) -> None:
        """`peer` sent a message from its row index `sent_at`, so it had received every message of
        ours whose RECV comes before that index: those sends are complete (gloo's isend reports
        completion only through wait, which returns at once for them); drop their tensors."""
        flight = self.sends.get(peer)
        if not flight:
            return
        keep = []
        for entry in flight:
            if entry[0] < sent_at:
                for work in entry[1]:
                    work.wait()
            else:
                keep.append(entry)
        self.sends[peer] = keep

    def do_SEND_F(self, a) -> None:
        out = self.outputs_fwd.pop((a.stage + 1, a.microbatch)).detach()
        if self.bits < 16:
            from pipesim.kernels import dequantize, quantize
            rec = self.rt.recorder
            start = rec.now()
            q = quantize(out, self.bits)
            end = rec.now()
            args = {}
            if a.microbatch == 0:   # reconstruction error, once per stage and step (not timed)
                err = float((dequantize(q) - out).norm() / out.norm().clamp_min(1e-30))
                self.rt.quant_errors.append(err)
                args["rel_error"] = err
            rec.event("compute", "QUANTIZE", a.stage, a.microbatch, start, end, q.nbytes, **args)
            self._isend(a, [q.data, q.scales], backward=False)
        else:
            self._isend(a, [out], backward=False)

    def do_SEND_B(self, a) -> None:
        self._isend(a, [self.grad_in.pop((a.stage, a.microbatch))], backward=True)

    def _sequence_parallel_grads(self) -> None:
        """Norm weights, row-parallel biases and positions are replicated over the TP group but
        see only this rank's sequence shard: all-reduce their gradients over the group
        (Korthikanti et al. 2022, Sec. 4.2.2; Megatron's allreduce of sequence-parallel grads)."""
        rt, rec = self.rt, self.rt.recorder
        grads = [p.grad for m in rt.stages.values() for p in m.parameters()
                 if getattr(p, "sequence_parallel_grad", False) and p.grad is not None]
        seen, unique = set(), []
        for g in grads:
            if id(g) not in seen:
                seen.add(id(g))
                unique.append(g)
        if not unique:
            return
        flat = torch.cat([g.reshape(-1) for g in unique])
        start = rec.now()
        dist.all_reduce(flat, group=rt.tp.group)
        rec.event("comm", "TP", -1, -1, start, rec.now(), flat.numel() * flat.element_size(), phase="sp_grads")
        off = 0
        for g in unique:
            g.copy_(flat[off:off + g.numel()].view_as(g))
            off += g.numel()

    # ---------------------------------------------------------------- data parallel
    def _buckets(self, stage: int):
        buf = self.rt.grad_buffers[stage]
        per = max(1, int(self.rt.scenario.training.grad_bucket_MB * 1e6 // buf.element_size()))
        # Reverse order: the last layers' gradients are ready first (PyTorch DDP, Li et al. 2020 Sec. 3.2.3).
        n = buf.numel()
        return [buf[max(0, end - per):end] for end in range(n, 0, -per)]

    def _reduce_stage(self, stage: int, async_op: bool) -> None:
        rec = self.rt.recorder
        for b in self._buckets(stage):
            start = rec.now()
            work = dist.all_reduce(b, group=self.rt.dp_group, async_op=async_op)
            if async_op:
                self.dp_works.append((work, stage, start, b.numel() * b.element_size()))
            else:
                rec.event("dp", "DP", stage, -1, start, rec.now(), b.numel() * b.element_size())

    def _wait_dp(self) -> None:
        rec = self.rt.recorder
        for work, stage, start, nbytes in self.dp_works:
            work.wait()
            rec.event("dp", "DP", stage, -1, start, rec.now(), nbytes)
        self.dp_works = []
