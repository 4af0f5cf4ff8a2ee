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
Schedule: GPipe (all forwards, then all backwards) over `microbatches` per rank; the loss is the
mean over every token of the global batch, so gradients equal a single process's on the whole
batch (`reference`).
"""
from __future__ import annotations

import json
import os
import time
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
    """Expert-parallel communicator of one rank (None group = single process, EP 1)."""

    def __init__(self, group=None, ep: int = 1, ep_rank: int = 0, recorder=None):
        self.group, self.ep, self.ep_rank, self.recorder = group, ep, ep_rank, recorder

    def exchange(self, x, send_counts: list[int], recv_counts: list[int], tag: str):
        """Variable-size all-to-all of rows of x (autograd: the backward exchanges back)."""
        if self.ep == 1:
            return x
        return _AllToAll.apply(x, send_counts, recv_counts, self, tag)

    def counts(self, per_expert):
        """Copies per expert -> for each source rank, its copies per local expert (ep·E/ep)."""
        import torch.distributed as dist
        out = per_expert.new_empty(per_expert.shape)
        t0 = time.perf_counter()
        dist.all_to_all_single(out, per_expert.contiguous(), group=self.group)
        if self.recorder is not None:
            self.recorder.event("A2A", "counts", t0, time.perf_counter(), per_expert.numel() * 8)
        return out

    def raw_exchange(self, x, send_counts, recv_counts, tag):
        import torch
        import torch.distributed as dist
        out = x.new_empty((sum(recv_counts),) + tuple(x.shape[1:]))
        t0 = time.perf_counter()
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
            self.recorder.event("A2A", tag, t0, time.perf_counter(), x.numel() * x.element_size())
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
    import torch
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
    """Per-action wall times of one rank, as TraceEvent-like dicts (times relative to a barrier)."""

    def __init__(self, rank: int):
        self.rank, self.t0, self.events, self.stack = rank, time.perf_counter(), [], []

    def event(self, kind: str, label: str, start: float, end: float, nbytes: float = 0.0):
        self.events.append({"rank": self.rank, "kind": kind, "label": label, "start": start - self.t0,
                            "end": end - self.t0, "bytes": nbytes})


def _stage_of(cfg: TinyMoE, pp: int, k: int) -> range:
    per = cfg.layers // pp
    return range(k * per, (k + 1) * per)


def worker(rank: int, world: int, ep: int, pp: int, cfg: TinyMoE, port: int, out_dir: str, threads: int = 1) -> None:
    """One rank: GPipe over cfg.microbatches, then gradients (dense all-reduced over the stage's
    data-parallel ranks) and per-action times written to out_dir/rank{r}.pt / .json."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
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
    shape = (cfg.micro_batch, cfg.seq, cfg.hidden)
    dist.barrier()
    rec.t0 = time.perf_counter()
    outs, ins, loss = [], [], 0.0
    for mb in range(cfg.microbatches):                       # forwards
        x, y = batch(cfg, ep, ep_rank, mb)
        if not first:
            t0 = time.perf_counter()
            x = torch.empty(shape, dtype=getattr(torch, cfg.dtype))
            dist.recv(x, rank - ep)
            rec.event("RECV_F", f"mb{mb}", t0, time.perf_counter())
            x.requires_grad_(True)
        ins.append(x)
        t0 = time.perf_counter()
        out = stage_forward(x, p, cfg, layers, comm, first, last, y)
        rec.event("F", f"mb{mb}", t0, time.perf_counter())
        if last:
            out = out / total
            loss += float(out.detach())
        else:
            t0 = time.perf_counter()
            dist.send(out.detach().contiguous(), rank + ep)
            rec.event("SEND_F", f"mb{mb}", t0, time.perf_counter(), out.numel() * out.element_size())
        outs.append(out)
    for mb in range(cfg.microbatches):                       # backwards
        t0 = time.perf_counter()
        if last:
            outs[mb].backward()
        else:
            g = torch.empty(shape, dtype=getattr(torch, cfg.dtype))
            dist.recv(g, rank + ep)
            rec.event("RECV_B", f"mb{mb}", t0, time.perf_counter())
            t0 = time.perf_counter()
            outs[mb].backward(g)
        rec.event("B", f"mb{mb}", t0, time.perf_counter())
        if not first:
            t0 = time.perf_counter()
            dist.send(ins[mb].grad.contiguous(), rank - ep)
            rec.event("SEND_B", f"mb{mb}", t0, time.perf_counter(), ins[mb].grad.numel() * ins[mb].grad.element_size())
    grads = {}
    for k, v in p.items():
        g = v.grad if v.grad is not None else torch.zeros_like(v)
        if ".expert" not in k and ep > 1:                    # dense weights: data parallel in the stage
            dist.all_reduce(g, group=groups[stage])
        grads[k] = g.detach()
    loss_t = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(loss_t)
    rec.event("STEP", "step", rec.t0, time.perf_counter())
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


def run(ep: int, pp: int = 1, cfg: TinyMoE = TinyMoE(), out_dir: str | None = None, timeout: float = 120.0) -> dict:
    """Run world = ep·pp ranks; returns {"loss", "grads" (full model), "events" (per rank)}."""
    import tempfile

    import torch.multiprocessing as mp
    from pipesim.emulator.launcher import free_port
    from pipesim.errors import PipesimError
    if cfg.experts % ep or cfg.layers % pp:
        raise PipesimError(f"experts({cfg.experts}) % ep({ep}) and layers({cfg.layers}) % pp({pp}) must be 0")
    out_dir = out_dir or tempfile.mkdtemp(prefix="pipesim-moe-")
    world = ep * pp
    ctx = mp.start_processes(worker, args=(world, ep, pp, cfg, free_port(), out_dir), nprocs=world,
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
    return {"loss": loss, "grads": grads, "events": events, "config": asdict(cfg), "ep": ep, "pp": pp}


# ---- crosscheck: the same model in the simulator ---------------------------------------------
def config_of(s) -> TinyMoE:
    """The emulated model of an MoE scenario; the emulator supports EP folded onto data
    parallelism (tensor 1, data = expert), GPipe, one micro-batch size."""
    from pipesim.errors import ScenarioError
    m, par, tr = s.model, s.parallel, s.training
    problems = [f"{what} ({got})" for what, got, ok in (
        ("tensor must be 1", par.tensor, par.tensor == 1), ("data must equal expert", f"{par.data} vs {par.expert}",
                                                            par.data == par.expert),
        ("schedule must be gpipe", tr.schedule, tr.schedule == "gpipe"),
        ("virtual_stages must be 1", par.virtual_stages, par.virtual_stages == 1),
        ("every layer MoE", m.num_moe_layers, m.num_moe_layers == m.num_layers)) if not ok]
    if problems:
        raise ScenarioError(f"{s.source}: the MoE emulator runs EP folded onto data with GPipe: " + "; ".join(problems))
    return TinyMoE(vocab=m.vocab_size, hidden=m.hidden_size, heads=m.num_attention_heads, layers=m.num_layers,
                   experts=m.num_experts, top_k=m.moe_top_k, ffn=m.moe_ffn, seq=m.seq_length,
                   micro_batch=tr.micro_batch_size, microbatches=s.num_microbatches, dtype="float32")


def crosscheck_scenario(s) -> dict:
    """Emulate (float32) and simulate an MoE scenario; per action mean seconds, measured vs
    simulated: F and B per stage, one all-to-all (dispatch or combine), the step."""
    from statistics import mean

    from pipesim.costs import stage_costs
    from pipesim.sim import simulate
    cfg = config_of(s)
    ep, pp = s.parallel.expert, s.parallel.pipeline
    measured = run(ep, pp, cfg)["events"]
    costs = stage_costs(s)
    sim = simulate(s, trace=False).to_dict()
    rows = []
    for k in range(pp):
        ranks = range(k * ep, (k + 1) * ep)
        for kind, sec in (("F", costs[k].forward), ("B", costs[k].backward)):
            got = [e["end"] - e["start"] for e in measured if e["kind"] == kind and e["rank"] in ranks]
            rows.append({"action": f"{kind} stage {k}", "measured_s": mean(got), "simulated_s": sec})
        a2a = [e["end"] - e["start"] for e in measured if e["kind"] == "A2A" and e["rank"] in ranks
               and e["label"].startswith(("dispatch", "combine")) and not e["label"].endswith("_bwd")]
        if ep > 1:
            one = costs[k].ep_comm_bwd / max(1, 2 * costs[k].moe_layers)    # one dispatch or combine
            rows.append({"action": f"A2A stage {k}", "measured_s": mean(a2a), "simulated_s": one})
    step = max(e["end"] - e["start"] for e in measured if e["kind"] == "STEP")
    rows.append({"action": "step", "measured_s": step, "simulated_s": sim["step_time_s"]})
    for r in rows:
        r["error_pct"] = 100 * (r["simulated_s"] / r["measured_s"] - 1) if r["measured_s"] else None
    return {"ep": ep, "pp": pp, "rows": rows, "step_error_pct": rows[-1]["error_pct"]}


def format_crosscheck(result: dict) -> str:
    lines = [f"tiny MoE on {result['ep'] * result['pp']} CPU ranks (EP {result['ep']} x PP {result['pp']}, gloo)",
             f"  {'action':14s} {'measured ms':>12s} {'simulated ms':>13s} {'err %':>7s}"]
    for r in result["rows"]:
        lines.append(f"  {r['action']:14s} {1e3 * r['measured_s']:12.3f} {1e3 * r['simulated_s']:13.3f} "
                     f"{r['error_pct']:+7.1f}")
    return "\n".join(lines)
