"""A tiny mixture-of-experts transformer run for real on CPU ranks (gloo): expert parallelism
(EP) and EP x pipeline parallelism (PP), checked against one process and timed per action.

Layout (Megatron-Core's expert grid folded onto data parallelism, pipesim/costs/moe_parallel.py):
`world = pp * ep`; ranks pp_index*ep .. pp_index*ep + ep - 1 hold pipeline stage pp_index; inside
a stage the ep ranks are data parallel for the dense weights (gradients all-reduced) and split the
experts (rank r holds experts r*E/ep ...). Each rank feeds its own micro-batches.
An MoE layer: router logits -> softmax -> top-k -> token copies sorted by destination rank ->
dispatch all-to-all -> local experts (SwiGLU) -> combine all-to-all -> weighted sum. The
all-to-all is `all_to_all_single` with split sizes (gloo supports it in torch 2.x) and falls back
to point-to-point isend/irecv where a backend lacks it; its backward is the reverse exchange.
Step: GPipe (all forwards, then all backwards) over `microbatches` per rank, dense gradients
all-reduced, gradient clipping and Adam; the loss is the mean over every token of the global
batch, so gradients equal a single process's on the whole batch (`reference`). Timed runs (warm-up,
steps, in-rank calibration) are pipesim/emulator/moe_crosscheck.py's.
"""
from __future__ import annotations

import gc
import json
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TinyMoE:
    vocab: int = 64
    hidden: int = 16
    heads: int = 2
    layers: int = 2
    experts: int = 4
    top_k: int = 2
    ffn: int = 8
    seq: int = 8
    micro_batch: int = 2
    microbatches: int = 2       # per rank (per data-parallel replica)
    seed: int = 0
    dtype: str = "float64"      # float64: exact gradient checks; float32: timing (crosscheck)


def full_params(cfg: TinyMoE) -> dict:
    """Every weight of the model, deterministic in cfg.seed (float64 for exact comparisons)."""
    import torch
    g = torch.Generator().manual_seed(cfg.seed)
    h, f, E = cfg.hidden, cfg.ffn, cfg.experts
    dt = getattr(torch, cfg.dtype)

    def rnd(*shape, scale=None):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * (scale or shape[0] ** -0.5)).to(dt)

    p = {"embed": rnd(cfg.vocab, h, scale=0.5), "head": rnd(h, cfg.vocab), "final_norm": torch.ones(h, dtype=dt)}
    for i in range(cfg.layers):
        p[f"{i}.norm1"] = torch.ones(h, dtype=dt)
        p[f"{i}.norm2"] = torch.ones(h, dtype=dt)
        p[f"{i}.qkv"] = rnd(h, 3 * h)
        p[f"{i}.proj"] = rnd(h, h)
        p[f"{i}.router"] = rnd(h, E)
        for e in range(E):
            p[f"{i}.expert{e}.w1"] = rnd(h, 2 * f)
            p[f"{i}.expert{e}.w2"] = rnd(f, h)
    return p


def batch(cfg: TinyMoE, dp: int, dp_rank: int, mb: int):
    """Tokens of micro-batch `mb` of data-parallel replica `dp_rank` (inputs, targets)."""
    import torch
    g = torch.Generator().manual_seed(1000 + cfg.seed * 7919 + dp_rank * 101 + mb)
    t = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def rmsnorm(x, w):
    return x * (x.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt() * w


def attention(x, p, i, cfg: TinyMoE):
    import torch
    b, s, h = x.shape
    q, k, v = (x @ p[f"{i}.qkv"]).split(h, dim=-1)
    shape = (b, s, cfg.heads, h // cfg.heads)
    q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2).reshape(b, s, h) @ p[f"{i}.proj"]


class Comm:
    """Expert-parallel communicator of one rank (None group = single process, EP 1). With no
    group and ep > 1 it is a loopback: the rank's host work is the same (counts, split sizes,
    the autograd exchange), its tokens come back unsent -- the in-rank calibration times the
    layer's host side with it (moe_calibration.py), sleeping `nap` seconds per exchange as the
    rank blocks in gloo during the steps."""

    def __init__(self, group=None, ep: int = 1, ep_rank: int = 0, recorder=None, nap: float = 0.0):
        self.group, self.ep, self.ep_rank, self.recorder, self.nap = group, ep, ep_rank, recorder, nap

    def exchange(self, x, send_counts: list[int], recv_counts: list[int], tag: str):
        """Variable-size all-to-all of rows of x (autograd: the backward exchanges back)."""
        if self.ep == 1:
            return x
        return _AllToAll.apply(x, send_counts, recv_counts, self, tag)

    def counts(self, per_expert):
        """Copies per expert -> for each source rank, its copies per local expert (ep·E/ep)."""
        import torch.distributed as dist
        if self.group is None:
            time.sleep(self.nap)
            return per_expert.clone()
        out = per_expert.new_empty(per_expert.shape)
        t0, c0 = time.perf_counter(), time.thread_time()
        dist.all_to_all_single(out, per_expert.contiguous(), group=self.group)
        if self.recorder is not None:
            self.recorder.event("A2A", "counts", t0, time.perf_counter(), per_expert.numel() * 8,
                                time.thread_time() - c0)
        return out

    def raw_exchange(self, x, send_counts, recv_counts, tag):
        import torch
        import torch.distributed as dist
        if self.group is None:
            time.sleep(self.nap)
            return x.clone()
        out = x.new_empty((sum(recv_counts),) + tuple(x.shape[1:]))
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            dist.all_to_all_single(out, x.contiguous(), recv_counts, send_counts, group=self.group)
        except (RuntimeError, NotImplementedError):      # backends without all_to_all: p2p
            ranks = dist.get_process_group_ranks(self.group)
            sends, recvs = x.split(send_counts), list(out.split(recv_counts))
            ops = [dist.P2POp(dist.isend, sends[j].contiguous(), ranks[j], self.group)
                   for j in range(self.ep) if j != self.ep_rank and send_counts[j]]
            ops += [dist.P2POp(dist.irecv, recvs[j], ranks[j], self.group)
                    for j in range(self.ep) if j != self.ep_rank and recv_counts[j]]
            for w in dist.batch_isend_irecv(ops) if ops else ():
                w.wait()
            recvs[self.ep_rank].copy_(sends[self.ep_rank])
            out = torch.cat(recvs) if recvs else out
        if self.recorder is not None:
            self.recorder.event("A2A", tag, t0, time.perf_counter(), x.numel() * x.element_size(),
                                time.thread_time() - c0)
        return out


def _make_a2a():
    import torch

    class AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, send_counts, recv_counts, comm, tag):
            ctx.meta = (send_counts, recv_counts, comm, tag)
            return comm.raw_exchange(x, send_counts, recv_counts, tag)

        @staticmethod
        def backward(ctx, gy):
            send_counts, recv_counts, comm, tag = ctx.meta
            return comm.raw_exchange(gy, recv_counts, send_counts, tag + "_bwd"), None, None, None, None
    return AllToAll


class _LazyA2A:
    _fn = None

    def apply(self, *args):
        if _LazyA2A._fn is None:
            _LazyA2A._fn = _make_a2a()
        return _LazyA2A._fn.apply(*args)


_AllToAll = _LazyA2A()


def moe_layer(x, p, i, cfg: TinyMoE, comm: Comm):
    """Top-k routed SwiGLU experts with expert parallelism over `comm`."""
    import torch
    b, s, h = x.shape
    tokens = x.reshape(-1, h)
    probs = torch.softmax(tokens @ p[f"{i}.router"], dim=-1)
    weight, expert = probs.topk(cfg.top_k, dim=-1)
    flat_expert = expert.reshape(-1)
    src = torch.arange(tokens.shape[0]).repeat_interleave(cfg.top_k)
    per_rank = cfg.experts // comm.ep
    order = torch.argsort(flat_expert, stable=True)               # copies grouped by expert (and rank)
    dest = flat_expert[order] // per_rank
    send_counts = torch.bincount(dest, minlength=comm.ep).tolist()
    # Like Megatron-Core's alltoall dispatcher, exchange the copies per expert first (a small
    # all-to-all); the received rows come ordered by source rank, then by local expert.
    per_expert = torch.bincount(flat_expert, minlength=cfg.experts)
    got = comm.counts(per_expert) if comm.ep > 1 else per_expert
    recv_counts = got.reshape(comm.ep, per_rank).sum(1).tolist()
    sent = comm.exchange(tokens[src[order]], send_counts, recv_counts, f"dispatch{i}")
    first = comm.ep_rank * per_rank
    local_ids = torch.arange(first, first + per_rank).repeat(comm.ep) if comm.ep > 1 else torch.arange(cfg.experts)
    sent_expert = local_ids.repeat_interleave(got.reshape(-1))
    out = torch.zeros_like(sent)
    for e in range(first, first + per_rank):
        rows = (sent_expert == e).nonzero().squeeze(1)
        if rows.numel():
            a, g = (sent[rows] @ p[f"{i}.expert{e}.w1"]).chunk(2, dim=-1)
            out = out.index_add(0, rows, (torch.nn.functional.silu(a) * g) @ p[f"{i}.expert{e}.w2"])
    back = comm.exchange(out, recv_counts, send_counts, f"combine{i}")
    combined = torch.zeros_like(tokens).index_add(0, src[order], back * weight.reshape(-1)[order].unsqueeze(1))
    return combined.reshape(b, s, h)


def stage_forward(x, p, cfg: TinyMoE, layers: range, comm: Comm, first: bool, last: bool, targets=None):
    import torch
    if first:
        x = p["embed"][x]
    for i in layers:
        x = x + attention(rmsnorm(x, p[f"{i}.norm1"]), p, i, cfg)
        x = x + moe_layer(rmsnorm(x, p[f"{i}.norm2"]), p, i, cfg, comm)
    if last:
        logits = rmsnorm(x, p["final_norm"]) @ p["head"]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1), reduction="sum")
    return x


def reference(cfg: TinyMoE, dp: int) -> tuple[float, dict]:
    """Single process: loss (mean over the global batch's tokens) and every gradient."""
    p = {k: v.clone().requires_grad_(True) for k, v in full_params(cfg).items()}
    total = cfg.micro_batch * cfg.seq * cfg.microbatches * dp
    loss = 0.0
    for d in range(dp):
        for mb in range(cfg.microbatches):
            x, y = batch(cfg, dp, d, mb)
            out = stage_forward(x, p, cfg, range(cfg.layers), Comm(), True, True, y) / total
            out.backward()
            loss += float(out.detach())
    return loss, {k: v.grad.detach().clone() for k, v in p.items()}


class Recorder:
    """Per-action wall and thread-CPU times of one rank, as TraceEvent-like dicts (times relative
    to the barrier that starts the step; `step` numbers the steps, warm-up included)."""

    def __init__(self, rank: int):
        self.rank, self.t0, self.events, self.step = rank, time.perf_counter(), [], 0

    def event(self, kind: str, label: str, start: float, end: float, nbytes: float = 0.0, cpu: float | None = None):
        self.events.append({"rank": self.rank, "step": self.step, "kind": kind, "label": label,
                            "start": start - self.t0, "end": end - self.t0, "bytes": nbytes, "cpu_s": cpu})

    @contextmanager
    def timed(self, kind: str, label: str, nbytes: float = 0.0):
        t0, c0 = time.perf_counter(), time.thread_time()
        yield
        self.event(kind, label, t0, time.perf_counter(), nbytes, time.thread_time() - c0)


def _stage_of(cfg: TinyMoE, pp: int, k: int) -> range:
    per = cfg.layers // pp
    return range(k * per, (k + 1) * per)


@dataclass(frozen=True)
class RunOptions:
    """How a run is timed: `warmup` untimed-then-discarded steps before `steps` measured ones;
    `pin` rank r to core r mod cores and raise its priority by `nice` (root only;
    pipesim/emulator/host.py, as the dense emulator's ranks); `calibrate` the scenario whose
    op costs and host model each rank measures before the warm-up and after the steps
    (moe_calibration.py), None for a gradient check only."""
    steps: int = 1
    warmup: int = 0
    pin: bool = False
    nice: int = 0
    calibrate: object = None
    budget_s: float = 0.1


def _gpipe_step(rank, ep, cfg, p, comm, rec, layers, first, last, total, groups, stage, ep_rank):
    """One training step: GPipe forwards, backwards, dense gradients all-reduced over the stage's
    data-parallel (EP) ranks. Returns the step's (unscaled) loss sum on the last stage."""
    import torch
    import torch.distributed as dist
    dtype = getattr(torch, cfg.dtype)
    shape = (cfg.micro_batch, cfg.seq, cfg.hidden)
    outs, ins, loss = [], [], 0.0
    for mb in range(cfg.microbatches):                       # forwards
        x, y = batch(cfg, ep, ep_rank, mb)
        if not first:
            x = torch.empty(shape, dtype=dtype)
            with rec.timed("RECV_F", f"mb{mb}"):
                dist.recv(x, rank - ep)
            x.requires_grad_(True)
        ins.append(x)
        with rec.timed("F", f"mb{mb}"):
            out = stage_forward(x, p, cfg, layers, comm, first, last, y)
        if last:
            out = out / total
            loss += float(out.detach())
        else:
            with rec.timed("SEND_F", f"mb{mb}", out.numel() * out.element_size()):
                dist.send(out.detach().contiguous(), rank + ep)
        outs.append(out)
    for mb in range(cfg.microbatches):                       # backwards
        if last:
            with rec.timed("B", f"mb{mb}"):
                outs[mb].backward()
        else:
            g = torch.empty(shape, dtype=dtype)
            with rec.timed("RECV_B", f"mb{mb}"):
                dist.recv(g, rank + ep)
            with rec.timed("B", f"mb{mb}"):
                outs[mb].backward(g)
        if not first:
            gx = ins[mb].grad.contiguous()
            with rec.timed("SEND_B", f"mb{mb}", gx.numel() * gx.element_size()):
                dist.send(gx, rank - ep)
    if ep > 1:                                               # dense weights: data parallel in the stage
        dense = [v.grad if v.grad is not None else torch.zeros_like(v) for k, v in p.items() if ".expert" not in k]
        flat = torch.cat([g.reshape(-1) for g in dense])
        with rec.timed("DP", "allreduce", flat.numel() * flat.element_size()):
            dist.all_reduce(flat, group=groups[stage])
        for (k, v), g in zip(((k, v) for k, v in p.items() if ".expert" not in k), flat.split([g.numel() for g in dense])):
            v.grad = g.view_as(v)
    return loss


CLIP_GRAD = 1.0     # Megatron-LM's default --clip-grad


def clip_grad_norm(params, max_norm: float = CLIP_GRAD) -> float:
    """Megatron-LM's gradient clipping (megatron/core/optimizer/clip_grads.py): the L2 norm of
    the local gradients, summed (squared) over every rank, and the gradients scaled only when it
    exceeds max_norm. Returns the scale applied (1 when none). (Replicated dense gradients count
    once per replica here; the norm only sets the scale.)"""
    import torch
    import torch.distributed as dist
    grads = [q.grad for q in params if q.grad is not None]
    sq = torch.stack([g.detach().pow(2).sum() for g in grads]).sum().reshape(1).double() if grads else \
        torch.zeros(1, dtype=torch.float64)
    dist.all_reduce(sq)
    norm = float(sq.sqrt())
    scale = max_norm / (norm + 1e-6) if norm > max_norm else 1.0
    if scale < 1.0:
        for g in grads:
            g.mul_(scale)
    return scale


def worker(rank: int, world: int, ep: int, pp: int, cfg: TinyMoE, port: int, out_dir: str, threads: int = 1,
           opts: RunOptions = RunOptions()) -> None:
    """One rank: opts.warmup + opts.steps training steps (GPipe over cfg.microbatches, dense
    gradients all-reduced, gradient clipping, Adam), then the gradients of the last step and the
    loss of the last step (with one step: those of the initial weights) and per-action times written to
    out_dir/rank{r}.pt / .json (and the calibrations to rank{r}.profile.{before,after}.json)."""
    import torch
    import torch.distributed as dist
    from pipesim.emulator.host import pin_to_core, raise_priority
    from pipesim.emulator.optim import Optimizer
    torch.set_num_threads(threads)
    raise_priority(opts.nice)
    if opts.pin:
        pin_to_core(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    stage, ep_rank = divmod(rank, ep)
    groups = [dist.new_group(list(range(k * ep, (k + 1) * ep))) for k in range(pp)]
    rec = Recorder(rank)
    comm = Comm(groups[stage], ep, ep_rank, rec)
    full = full_params(cfg)
    layers = _stage_of(cfg, pp, stage)
    first, last = stage == 0, stage == pp - 1
    mine = {k: v for k, v in full.items() if _owned(k, layers, first, last, cfg, ep, ep_rank)}
    p = {k: v.clone().requires_grad_(True) for k, v in mine.items()}
    total = cfg.micro_batch * cfg.seq * cfg.microbatches * ep
    opt = Optimizer(p.values(), "adam")

    def calibrate(when):
        if opts.calibrate is not None:
            from pipesim.emulator.moe_calibration import calibrate_moe_rank
            calibrate_moe_rank(opts.calibrate, cfg, rank, world, ep, groups, opts.budget_s, out_dir, when)

    # manual garbage collection, as the dense emulator's worker (Megatron-LM --manual-gc): the
    # collector paused through the calibrations and the steps, run between steps
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    calibrate("before")
    losses = []
    for step in range(opts.warmup + opts.steps):
        gc.collect()
        for v in p.values():
            v.grad = None
        rec.step = step
        dist.barrier()
        rec.t0 = t0 = time.perf_counter()
        c0 = time.thread_time()
        loss = _gpipe_step(rank, ep, cfg, p, comm, rec, layers, first, last, total, groups, stage, ep_rank)
        with rec.timed("GRAD_NORM", "clip"):
            scale = clip_grad_norm(list(p.values()))
        with rec.timed("OPTIMIZER", "adam"):
            opt.step()
        rec.event("STEP", "step", t0, time.perf_counter(), cpu=time.thread_time() - c0)
        losses.append(loss)
    gc.collect()
    calibrate("after")
    if gc_was_enabled:
        gc.enable()
    # the last step's gradients before clipping (the check compares them with one process's)
    grads = {k: (v.grad / scale if v.grad is not None else torch.zeros_like(v)).detach() for k, v in p.items()}
    loss_t = torch.tensor([losses[-1]], dtype=torch.float64)
    dist.all_reduce(loss_t)
    torch.save({"grads": grads, "loss": float(loss_t)}, os.path.join(out_dir, f"rank{rank}.pt"))
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(rec.events, fh)
    dist.destroy_process_group()


def _owned(name: str, layers: range, first: bool, last: bool, cfg: TinyMoE, ep: int, ep_rank: int) -> bool:
    if name == "embed":
        return first
    if name in ("head", "final_norm"):
        return last
    layer = int(name.split(".")[0])
    if layer not in layers:
        return False
    if ".expert" in name:
        e = int(name.split(".")[1][len("expert"):])
        per = cfg.experts // ep
        return ep_rank * per <= e < (ep_rank + 1) * per
    return True


# "fork" starts ranks from the parent's already-imported torch (seconds faster per rank than
# "spawn"); the parent has started no torch threads that the children would inherit half-done.
START_METHOD = "fork" if hasattr(os, "fork") else "spawn"


def run(ep: int, pp: int = 1, cfg: TinyMoE = TinyMoE(), out_dir: str | None = None, timeout: float = 120.0,
        opts: RunOptions = RunOptions()) -> dict:
    """Run world = ep·pp ranks; returns {"loss", "grads" (full model), "events" (per rank),
    "out_dir"}."""
    import tempfile

    import torch.multiprocessing as mp
    from pipesim.emulator.launcher import free_port
    from pipesim.errors import PipesimError
    if cfg.experts % ep or cfg.layers % pp:
        raise PipesimError(f"experts({cfg.experts}) % ep({ep}) and layers({cfg.layers}) % pp({pp}) must be 0")
    out_dir = out_dir or tempfile.mkdtemp(prefix="pipesim-moe-")
    world = ep * pp
    ctx = mp.start_processes(worker, args=(world, ep, pp, cfg, free_port(), out_dir, 1, opts), nprocs=world,
                             join=False, start_method=START_METHOD)
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=0.5):
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            raise PipesimError(f"MoE emulation with ep={ep} pp={pp} did not finish in {timeout:.0f} s")
    import torch
    grads, loss, events = {}, None, []
    for r in range(world):
        data = torch.load(os.path.join(out_dir, f"rank{r}.pt"))
        loss = data["loss"]
        for k, g in data["grads"].items():
            grads.setdefault(k, g)          # replicas hold equal (all-reduced) dense gradients
        with open(os.path.join(out_dir, f"rank{r}.json")) as fh:
            events += json.load(fh)
    return {"loss": loss, "grads": grads, "events": events, "config": asdict(cfg), "ep": ep, "pp": pp,
            "out_dir": out_dir}
