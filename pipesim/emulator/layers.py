"""Building blocks of the emulated model: a linear layer whose weight gradient can be deferred
(the zero-bubble I/W split) and Megatron's tensor-parallel communication operators.

Zero-bubble split (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 2): the
backward of a linear Y = X W^T + b is dX = dY W (needed by the previous stage now, part of I)
and dW = dY^T X, db = sum dY (needed only by the optimizer, W). In deferring mode the backward
computes dX and queues (X, dY) in a WeightGradStore; W runs the queue later.

Tensor parallel (Shoeybi et al. 2019, "Megatron-LM", Sec. 3, Fig. 3): the f operator is the
identity forward and an all-reduce of the gradient backward (before a column-parallel linear);
g is an all-reduce forward and the identity backward (after a row-parallel linear).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist


class WeightGradStore:
    """Deferred weight-gradient work of the current backward, per (stage, micro-batch)."""

    def __init__(self, counter=None):
        self.deferring = False
        self.key = None
        self.pending: dict = {}
        self.counter = counter

    def push(self, param, bias, x, gy) -> None:
        tokens = (self.counter.retain(x), self.counter.retain(gy)) if self.counter else ()
        self.pending.setdefault(self.key, []).append((param, bias, x, gy, tokens))

    def run(self, key) -> int:
        """Compute and accumulate every weight gradient queued under `key`; returns how many."""
        work = self.pending.pop(key, [])
        with torch.no_grad():
            for param, bias, x, gy, _tokens in work:
                accumulate_weight_grad(param, bias, x, gy)
        return len(work)


def accumulate_weight_grad(weight, bias, x, gy) -> None:
    x2 = x.reshape(-1, x.shape[-1])
    g2 = gy.reshape(-1, gy.shape[-1])
    for p in (weight, bias):
        if p is not None and p.grad is None:
            p.grad = torch.zeros_like(p)
    weight.grad.addmm_(g2.t(), x2)
    if bias is not None:
        bias.grad.add_(g2.sum(0))


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, store):
        ctx.save_for_backward(x, weight)
        ctx.params = (weight, bias)
        ctx.store = store
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        weight, bias = ctx.params
        gx = torch.matmul(gy, w) if ctx.needs_input_grad[0] else None
        if not weight.requires_grad:        # a frozen weight (LoRA's base): its input gradient alone
            pass
        elif ctx.store is not None and ctx.store.deferring:
            ctx.store.push(weight, bias, x, gy)
        else:
            accumulate_weight_grad(weight, bias, x, gy)
        # Weight gradients go straight into the preallocated .grad buffers (Megatron's main_grad),
        # so autograd receives None for them.
        return gx, None, None, None


class _GatherLinearFn(torch.autograd.Function):
    """Sequence parallelism as Megatron-LM runs a column-parallel linear (Korthikanti et al. 2022,
    Sec. 4.2.2; LinearWithGradAccumulationAndAsyncCommunication): all-gather the sequence shard and
    multiply, keeping only the shard; in the backward gather it again for the weight gradient and
    reduce-scatter the input gradient (pipesim's Comm.wgrad_input). Frozen weights gather nothing."""

    @staticmethod
    def forward(ctx, shard, weight, bias, store, tp):
        ctx.save_for_backward(shard, weight)
        ctx.params, ctx.store, ctx.tp = (weight, bias), store, tp
        return torch.nn.functional.linear(tp.all_gather0(shard, "fwd"), weight, bias)

    @staticmethod
    def backward(ctx, gy):
        shard, w = ctx.saved_tensors
        weight, bias = ctx.params
        x = ctx.tp.all_gather0(shard, "bwd") if weight.requires_grad else None
        gx = ctx.tp.reduce_scatter0(torch.matmul(gy, w), "bwd") if ctx.needs_input_grad[0] else None
        if x is not None and ctx.store is not None and ctx.store.deferring:
            ctx.store.push(weight, bias, x, gy)
        elif x is not None:
            accumulate_weight_grad(weight, bias, x, gy)
        return gx, None, None, None, None


class Linear(torch.nn.Module):
    """y = x W^T + b with weight gradients accumulated into .grad by us (now, or deferred)."""

    def __init__(self, weight, bias, store, bias_after_reduce: bool = False):
        super().__init__()
        # Row-parallel: the bias is added once, after the all-reduce (add_bias), not on every rank.
        self.bias_after_reduce = bias_after_reduce
        # An existing Parameter is shared as is (tied embedding and LM head).
        self.weight = weight if isinstance(weight, torch.nn.Parameter) else torch.nn.Parameter(weight)
        if bias is not None and not isinstance(bias, torch.nn.Parameter):
            bias = torch.nn.Parameter(bias)
        self.bias = bias
        self.store = store

    def forward(self, x):
        return _LinearFn.apply(x, self.weight, None if self.bias_after_reduce else self.bias, self.store)

    def gathered(self, shard, tp: "TPGroup"):
        """The column-parallel linear of the sequence shard `shard` as Megatron-LM runs it under
        sequence parallelism (_GatherLinearFn)."""
        return _GatherLinearFn.apply(shard, self.weight, None if self.bias_after_reduce else self.bias, self.store, tp)

    def add_bias(self, y):
        return y + self.bias if (self.bias_after_reduce and self.bias is not None) else y


class TPGroup:
    """The tensor-parallel communicator plus a log of collective times for the recorder."""

    def __init__(self, group=None, size: int = 1, rank: int = 0, sequence_parallel: bool = False,
                 keeps_gathered: bool = False):
        self.group, self.size, self.rank = group, size, rank
        self.sp = sequence_parallel and size > 1
        # a column-parallel linear gathers its sequence shard again in the backward (Megatron) unless
        # it keeps the gathered input (training.tp_keeps_gathered_input, DTensor)
        self.regather = self.sp and not keeps_gathered
        # (phase, start, end, bytes, kind): kind all_gather / reduce_scatter / all_reduce (a
        # context-parallel exchange logged here has no kind: (phase, start, end, bytes))
        self.log: list[tuple] = []
        # this thread's CPU seconds inside the collectives since the executor last took them (the
        # copies around gloo's calls): results.contention leaves them out with the collectives' wall
        self.cpu_s = 0.0

    def take_cpu(self) -> float:
        """CPU seconds spent inside the collectives since the last call (and reset)."""
        cpu, self.cpu_s = self.cpu_s, 0.0
        return cpu

    def _record(self, phase: str, start: tuple[float, float], tensor, kind: str) -> None:
        """Log a collective begun at `start` = (perf_counter, thread_time) over `tensor`'s bytes."""
        self.log.append((phase, start[0], time.perf_counter(), tensor.numel() * tensor.element_size(), kind))
        self.cpu_s += time.thread_time() - start[1]

    def all_gather0(self, t, phase: str, dim: int = 0):
        """Concatenate every rank's `t` along `dim` (0: the sequence under sequence parallelism)."""
        start = time.perf_counter(), time.thread_time()
        t = t.contiguous()
        parts = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(parts, t, group=self.group)
        out = torch.cat(parts, dim)
        self._record(phase, start, out, "all_gather")
        return out

    def reduce_scatter0(self, t, phase: str):
        """Sum over ranks, keep this rank's slice of dim 0 (gloo has no reduce-scatter: an
        all-reduce then a slice; NCCL's reduce_scatter_tensor where available)."""
        start = time.perf_counter(), time.thread_time()
        t = t.contiguous()
        if dist.get_backend(self.group) == "nccl":
            out = torch.empty((t.shape[0] // self.size,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
            dist.reduce_scatter_tensor(out, t, group=self.group)
        else:
            full = t.clone()
            dist.all_reduce(full, group=self.group)
            out = full.chunk(self.size, 0)[self.rank].contiguous()
        self._record(phase, start, t, "reduce_scatter")
        return out

    def all_reduce(self, t, phase: str, op=None):
        start = time.perf_counter(), time.thread_time()
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM, group=self.group)
        self._record(phase, start, t, "all_reduce")
        return t


class _CopyToTP(torch.autograd.Function):
    """Megatron f: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        return ctx.tp.all_reduce(g, "bwd"), None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, tp):
        return tp.all_reduce(x.contiguous().clone(), "fwd")

    @staticmethod
    def backward(ctx, g):
        return g, None


class _GatherSeq(torch.autograd.Function):
    """Sequence parallel (Korthikanti et al. 2022, Sec. 4.2.2, the g operator): all-gather the
    sequence forward, reduce-scatter the gradient backward."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.all_gather0(x, "fwd")

    @staticmethod
    def backward(ctx, g):
        return ctx.tp.reduce_scatter0(g, "bwd"), None


class _ScatterSeq(torch.autograd.Function):
    """Sequence parallel g-bar: reduce-scatter forward, all-gather the gradient backward."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return tp.reduce_scatter0(x, "fwd")

    @staticmethod
    def backward(ctx, g):
        return ctx.tp.all_gather0(g, "bwd"), None


def enter_tp(x, tp: TPGroup):
    """Before a column-parallel linear: Megatron's f (1D) or the sequence all-gather (SP)."""
    return _GatherSeq.apply(x, tp) if tp.sp else copy_to_tp(x, tp)


def column(linear: "Linear", x, tp: TPGroup, adapters=None, name: str = ""):
    """Column-parallel `linear` of `x` (its LoRA adapter `name` beside it, lora.with_adapter): the
    sequence shard gathered again in the backward where the stack does (TPGroup.regather) and no
    adapter reads the gathered input, else enter_tp's gather kept for the backward."""
    if tp.regather and (adapters is None or name not in adapters):
        return linear.gathered(x, tp)
    from pipesim.emulator.lora import with_adapter       # lora imports this module
    h_in = enter_tp(x, tp)
    return with_adapter(adapters, name, h_in, linear(h_in))


def exit_tp(x, tp: TPGroup):
    """After a row-parallel linear: Megatron's g all-reduce (1D) or the reduce-scatter (SP)."""
    return _ScatterSeq.apply(x, tp) if tp.sp else reduce_from_tp(x, tp)


def copy_to_tp(x, tp: TPGroup):
    return _CopyToTP.apply(x, tp) if tp.size > 1 else x


def reduce_from_tp(x, tp: TPGroup):
    return _ReduceFromTP.apply(x, tp) if tp.size > 1 else x


class _Recompute(torch.autograd.Function):
    """Activation checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory
    Cost", Sec. 3; the reentrant form of torch.utils.checkpoint): forward without a graph keeping
    only the inputs, re-run with a graph in the backward under the same RNG state (dropout masks
    repeat). Written out here because torch.utils.checkpoint imports torch._dynamo on first use
    (seconds per process) and because the inner backward must go through WeightGradStore."""

    @staticmethod
    def forward(ctx, fn, *args):
        ctx.fn = fn
        ctx.rng = torch.get_rng_state()
        ctx.cuda_rng = torch.cuda.get_rng_state() if args[0].is_cuda else None
        ctx.save_for_backward(*args)
        with torch.no_grad():
            return fn(*args)

    @staticmethod
    def backward(ctx, *grads):
        inputs = [a.detach().requires_grad_(a.requires_grad) for a in ctx.saved_tensors]
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state() if ctx.cuda_rng is not None else None
        torch.set_rng_state(ctx.rng)
        if ctx.cuda_rng is not None:
            torch.cuda.set_rng_state(ctx.cuda_rng)
        try:
            with torch.enable_grad():
                out = ctx.fn(*inputs)
        finally:
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng)
        outs = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward(outs, grads)
        return (None,) + tuple(i.grad if i.requires_grad else None for i in inputs)


def recompute(fn, *args):
    return _Recompute.apply(fn, *args)
