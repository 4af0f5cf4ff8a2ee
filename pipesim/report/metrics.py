"""Report: step metrics from per-rank timelines (DESIGN.md "Contract: CLI and report").

A pure function of (scenario, TraceEvents, MemorySamples): `report_from_events` rebuilds the
per-rank `RankTimeline`s from the shared trace schema, so the emulator's measured traces get the
same report as the simulator. The simulator fills the same timelines directly when it runs
without a trace (sweeps), so both paths share `build_report`.

Definitions (seconds, per GPU):
- compute_busy_s: time on the compute stream (F/B/I/W/R, quantize/dequantize, optimizer).
- comm_busy_s: union of this GPU's send wire time and collective time (DP, ZeRO), plus its
  blocking tensor-parallel time (inside F/B, Megatron's TP collectives are synchronous).
- bubble_fraction (per rank): 1 - pipeline compute / pipeline span, where the span runs from 0 to
  the end of the last F/B/I/W anywhere (so it equals the unit-time analysis of the schedule
  with free communication); overall: the mean over ranks.
- exposed communication per kind: P2P = time a rank waited in a RECV while the message was on
  the wire (a wait before the sender started is pipeline bubble, not communication); DP, ZeRO =
  time their collectives ran while the compute stream was idle; TP = all of it (blocking).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter, sub

# PyTorch's caching allocator holds more than the live tensors: reserved / allocated at the peak is
# 1.09 to 1.18 in Megatron-Bridge's published measurements (skills/nemo-mbridge-perf-activation-
# recompute: Moonlight 16B, 36.6 GB allocated, reserved "near 40 GB"; skills/nemo-mbridge-memory-
# snapshot-analysis: 45.10 / 53.21 and 62.28 / 73.49 GiB). A peak within the low end of that margin
# of the capacity is reported as tight (CUDA-graph pools and NCCL's buffers come on top).
ALLOCATOR_RESERVE = 1.09
TIGHT_TEXT = "tight: PyTorch's allocator reserves 9-18 % above the live bytes"


def memory_tight(peak: float, capacity: float) -> bool:
    """A peak that fits, but not with the caching allocator's usual reserve above the live bytes."""
    return ALLOCATOR_RESERVE * peak > capacity >= peak

PIPELINE_KINDS = frozenset(("F", "B", "I", "W", "R", "FB", "QUANTIZE", "DEQUANTIZE"))
COMM_KINDS = ("P2P", "DP", "ZERO_GATHER", "ZERO_ALLGATHER")
_START, _END, _KIND = itemgetter(0), itemgetter(1), itemgetter(2)


@dataclass
class RankTimeline:
    """What one GPU did during the step, in the aggregate form the metrics need."""
    rank: int
    stage: int                                   # pipeline rank (or -1)
    stages: tuple = ()                           # model stages it holds
    compute: list = field(default_factory=list)  # (start, end, kind), non-overlapping
    comm: dict = field(default_factory=dict)     # kind -> [(start, end)]
    recv: list = field(default_factory=list)     # (reached, available, wire_start, kind)
    work: dict = field(default_factory=dict)     # (stage, kind) -> [count, seconds, bytes]
    tp_s: float = 0.0                            # blocking collectives inside compute, CP included
    cp_s: float = 0.0                            # ... of them the context-parallel K/V exchange
    a2a_s: float = 0.0                           # MoE all-to-all exposed on the compute stream
    contention_s: float = 0.0                    # compute time lost to DP collectives' SMs (sim/interference.py)
    pipe_end: float = 0.0
    end: float = 0.0
    peak_memory: float = 0.0
    peak_by_category: dict = field(default_factory=dict)


def measure(intervals) -> float:
    """Length of the union of (start, end) intervals: merged in start order (stable), the merged
    lengths summed by numpy (pairwise). A plain loop: converting thousands of tuples to an array
    cost more than the merge."""
    if not intervals:
        return 0.0
    iv = sorted(intervals, key=itemgetter(0))
    lengths = []
    cs, ce = iv[0]
    for s, e in iv:
        if s > ce:                  # a new segment starts beyond every earlier end
            lengths.append(ce - cs)
            cs, ce = s, e
        elif e > ce:
            ce = e
    lengths.append(ce - cs)
    import numpy as np
    return float(np.sum(np.array(lengths)))


def minus(intervals, cover) -> float:
    """Measure of union(intervals) not covered by union(cover): |A ∪ C| - |C|."""
    if not intervals:
        return 0.0
    return max(0.0, measure(list(intervals) + list(cover)) - measure(cover))


def rank_entry(tl: RankTimeline, span: float, detail: bool = True) -> dict:
    """One rank's entry. `detail=False` leaves out `comm_busy_s` (the union of its communication
    intervals), which only the per-rank table reads: sweeps skip it."""
    # the same left-to-right float sums as a loop, with C-level iteration (sweeps call this per rank)
    starts, ends = list(map(_START, tl.compute)), list(map(_END, tl.compute))
    busy = sum(map(sub, ends, starts))
    pipeline = list(map(PIPELINE_KINDS.__contains__, map(_KIND, tl.compute)))
    pipe = sum(compress(map(sub, ends, starts), pipeline))
    # a wait's exposed part: after both the rank reached it and the message left (terms <= 0
    # skipped: adding 0.0 leaves the sum as it is)
    exposed = {"P2P": sum([av - (r if r > w else w) for r, av, w, _ in tl.recv if av > r and av > w], 0.0),
               "TP": tl.tp_s - tl.cp_s}
    if tl.cp_s:
        exposed["CP"] = tl.cp_s
    if tl.a2a_s:
        exposed["EP_A2A"] = tl.a2a_s
    compute_iv = None
    for kind in COMM_KINDS[1:]:
        if tl.comm.get(kind):
            if compute_iv is None:
                compute_iv = list(zip(starts, ends))
                covered = measure(compute_iv)
            exposed[kind] = max(0.0, measure(tl.comm[kind] + compute_iv) - covered)
    entry = {
        "rank": tl.rank, "stage": tl.stage, "stages": list(tl.stages),
        "compute_busy_s": busy,
        "bubble_fraction": (1.0 - pipe / span) if span > 0 else 0.0,
        "peak_memory_bytes": tl.peak_memory,
        "peak_memory_by_category": dict(tl.peak_by_category),
        "exposed_comm_s": exposed,
        "end_s": tl.end,
    }
    if tl.contention_s:
        entry["compute_contention_s"] = tl.contention_s
    if detail:
        entry["comm_busy_s"] = measure([iv for ivs in tl.comm.values() for iv in ivs]) + tl.tp_s
    return entry


def stage_table(timelines) -> dict:
    """Per model stage: mean F / backward (B, or I+W) seconds and mean bytes/seconds sent, from the
    timelines' work counters (what ran, measured or simulated)."""
    acc: dict = {}
    for tl in timelines:
        for (stage, kind), (n, sec, nbytes) in tl.work.items():
            a = acc.setdefault((stage, kind), [0, 0.0, 0.0])
            a[0] += n
            a[1] += sec
            a[2] += nbytes
    stages = sorted({st for st, _ in acc})

    def mean(stage, kind, i=1):
        a = acc.get((stage, kind))
        return a[i] / a[0] if a and a[0] else 0.0

    out = {}
    for st in stages:
        bwd = mean(st, "B") + mean(st, "R") if (st, "B") in acc else mean(st, "I") + mean(st, "W") + mean(st, "R")
        out[st] = dict(forward=mean(st, "F"), backward=bwd,
                       out_bytes=mean(st, "SEND_F", 2), out_s=mean(st, "SEND_F"),
                       grad_out_bytes=mean(st, "SEND_B", 2), grad_out_s=mean(st, "SEND_B"),
                       sends_f=acc.get((st, "SEND_F"), [0])[0], sends_b=acc.get((st, "SEND_B"), [0])[0])
    return out


def ratio(a: float, b: float) -> float:
    hi = max(a, b)
    return min(a, b) / hi if hi > 0 else 1.0


def pipeline_analysis(table: dict) -> dict:
    """Seeds 000/001: imbalance = fastest / slowest stage (1 is perfect); topology-aware imbalance
    = the worst such ratio between two connected (adjacent) stages; ideal latency = time for a
    forward to reach and leave stage k (cumulative from stage 0) and a backward (cumulative from
    the last stage); communication volume per stage and micro-batch."""
    st = sorted(table)
    if not st:
        return {}
    fw = [table[k]["forward"] for k in st]
    bw = [table[k]["backward"] for k in st]

    def imb(xs):
        return min(xs) / max(xs) if max(xs) > 0 else 1.0

    def topo(xs):
        return min((ratio(xs[i], xs[i + 1]) for i in range(len(xs) - 1)), default=1.0)

    send_f = [table[k]["out_s"] for k in st]
    send_b = [table[k]["grad_out_s"] for k in st]
    lat_f, lat_b, lat_fc, lat_bc = [], [], [], []
    acc = accc = 0.0
    for i in range(len(st)):
        acc += fw[i]
        accc += fw[i] + (send_f[i - 1] if i else 0.0)
        lat_f.append(acc)
        lat_fc.append(accc)
    acc = accc = 0.0
    for i in reversed(range(len(st))):
        acc += bw[i]
        accc += bw[i] + (send_b[i + 1] if i + 1 < len(st) else 0.0)
        lat_b.append(acc)
        lat_bc.append(accc)
    lat_b.reverse()
    lat_bc.reverse()
    volume = []
    for i, k in enumerate(st):
        prev = table[st[i - 1]] if i else None
        nxt = table[st[i + 1]] if i + 1 < len(st) else None
        volume.append({
            "stage": k,
            "in_bytes": prev["out_bytes"] if prev else 0.0, "in_s": prev["out_s"] if prev else 0.0,
            "out_bytes": table[k]["out_bytes"], "out_s": table[k]["out_s"],
            "grad_in_bytes": nxt["grad_out_bytes"] if nxt else 0.0,
            "grad_in_s": nxt["grad_out_s"] if nxt else 0.0,
            "grad_out_bytes": table[k]["grad_out_bytes"], "grad_out_s": table[k]["grad_out_s"],
            "step_out_bytes": table[k]["out_bytes"] * table[k]["sends_f"]
            + table[k]["grad_out_bytes"] * table[k]["sends_b"],
        })
    return {
        "stage_times_s": {"forward": fw, "backward": bw},
        "imbalance": {"forward": imb(fw), "backward": imb(bw)},
        "topology_imbalance": {"forward": topo(fw), "backward": topo(bw)},
        "ideal_latency_s": {"forward": lat_f, "backward": lat_b,
                            "forward_with_comm": lat_fc, "backward_with_comm": lat_bc},
        "comm_volume": volume,
    }


@dataclass
class Report:
    data: dict
    events: list = field(default_factory=list)    # TraceEvent
    memory: list = field(default_factory=list)    # MemorySample

    def __getattr__(self, name):
        try:
            return self.__dict__["data"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self, include_trace: bool = True) -> dict:
        out = dict(self.data)
        if include_trace:
            out["events"] = [e.to_dict() for e in self.events]
            out["memory"] = [m.to_dict() for m in self.memory]
        return out


def build_report(scenario, timelines, *, stage_costs=None, extras=None, events=(), memory=(),
                 copies=None, detail: bool = True) -> Report:
    """The report of one step from per-rank timelines (see module docstring for definitions).

    `copies` (optional) maps a timeline's rank to the ranks that behaved identically (the GPUs of
    a lock-stepped TP group): each gets the same entry under its own rank id. `detail=False`
    (sweeps): no per-rank `comm_busy_s` and no per-stage `stage_costs` dicts, which only the
    single-run report reads; every step-level figure is the same."""
    from pipesim.costs.fp8 import gemm_dtype
    from pipesim.costs.summary import iteration_flops
    s = scenario
    tls = sorted(timelines, key=lambda t: t.rank)
    step = max((t.end for t in tls), default=0.0)
    span = max((t.pipe_end for t in tls), default=0.0)
    ranks = []
    seen: dict = {}      # identical timelines (symmetric replicas) share one computed entry
    for t in tls:
        key = (t.stage, t.end, t.pipe_end, t.tp_s, t.cp_s, t.peak_memory, len(t.compute), len(t.recv))
        entry = None
        for other, e in seen.get(key, ()):
            if (other.compute == t.compute and other.recv == t.recv and other.comm == t.comm
                    and other.peak_by_category == t.peak_by_category and other.stages == t.stages):
                entry = e
                break
        if entry is None:
            entry = rank_entry(t, span, detail)
            seen.setdefault(key, []).append((t, entry))
        for r in (copies or {}).get(t.rank, [t.rank]):
            ranks.append(dict(entry, rank=r))
    ranks.sort(key=lambda e: e["rank"])
    n = s.num_gpus
    flops = iteration_flops(s)
    peak = s.system.gpu.matrix_peak(gemm_dtype(s.training))      # MFU against the GEMMs' own peak
    achieved = flops / step / n if step > 0 else 0.0
    exposed = {}
    for r in ranks:
        for k, v in r["exposed_comm_s"].items():
            exposed[k] = max(exposed.get(k, 0.0), v)
    peak_mem = max((r["peak_memory_bytes"] for r in ranks), default=0.0)
    capacity = s.system.gpu.memory
    busy = [r["compute_busy_s"] for r in ranks]
    data = {
        "step_time_s": step,
        "throughput_samples_per_s": s.training.global_batch_size / step if step > 0 else 0.0,
        "tokens_per_s": s.training.global_batch_size * s.model.seq_length / step if step > 0 else 0.0,
        "model_tflops_per_gpu": achieved / 1e12,
        "mfu": achieved / peak if peak else 0.0,
        "bubble_fraction": sum(r["bubble_fraction"] for r in ranks) / len(ranks) if ranks else 0.0,
        "pipeline_span_s": span,
        "num_gpus": n,
        "num_microbatches": s.num_microbatches,
        "schedule": s.training.schedule,
        "peak_memory_bytes": peak_mem,
        "memory_capacity_bytes": capacity,
        "oom": peak_mem > capacity,
        "memory_tight": memory_tight(peak_mem, capacity),
        "exposed_comm_s": exposed,
        "rank_imbalance": (min(busy) / max(busy)) if busy and max(busy) > 0 else 1.0,
        "ranks": ranks,
    }
    data.update(pipeline_analysis(stage_table(tls)))
    if stage_costs is not None:
        if detail:
            data["stage_costs"] = [c.as_dict() for c in stage_costs]
        sources: dict = {}
        for c in stage_costs:
            for k, v in c.sources.items():
                sources[k] = sources.get(k, 0.0) + v
        data["cost_sources"] = sources
        from pipesim.costs.roofline import tensor_core_rate
        from pipesim.costs.flash import attention_kernel_of
        from pipesim.costs.fp8 import attention_dtype
        fused = s.model.arch != "cnn" and s.training.attention == "flash"
        rate = tensor_core_rate(s.system.gpu, s.training.precision, attention_dtype(s.training),
                                attention_kernel_of(s) if fused else None)
        if rate is not None:
            data["tensor_core_rate"] = rate
    if s.run.tokens is not None and data["tokens_per_s"] > 0:
        from pipesim.report.goodput import run_estimate
        data["run"] = run_estimate(s, step, data["tokens_per_s"])
    from pipesim.report.accuracy import accuracy_of
    accuracy = accuracy_of(s)
    if accuracy is not None:
        data["accuracy"] = accuracy
    if extras:
        data.update(extras)
    return Report(data, list(events), list(memory))


def timelines_from_events(events, memory=()) -> list[RankTimeline]:
    """Rebuild per-rank timelines from TraceEvents and MemorySamples (emulator or simulator)."""
    tls: dict[int, RankTimeline] = {}

    def tl_of(rank, stage=-1):
        if rank not in tls:
            tls[rank] = RankTimeline(rank=rank, stage=stage)
        return tls[rank]

    for e in sorted(events, key=lambda e: (e.rank, e.start, e.end)):
        tl = tl_of(e.rank, e.args.get("pp", -1))
        tl.end = max(tl.end, e.end)
        k = e.kind
        if e.stream == "compute":
            tl.compute.append((e.start, e.end, k))
            tl.tp_s += e.args.get("tp", 0.0)
            tl.cp_s += e.args.get("cp", 0.0)
            if k in PIPELINE_KINDS:
                tl.pipe_end = max(tl.pipe_end, e.end)
            if k in ("F", "B", "I", "W", "R"):
                w = tl.work.setdefault((e.stage, k), [0, 0.0, 0.0])
                w[0] += 1
                w[1] += e.duration
                if e.stage not in tl.stages:
                    tl.stages = tuple(sorted(tl.stages + (e.stage,)))
        elif k in ("RECV_F", "RECV_B"):
            tl.recv.append((e.start, e.end, e.args.get("wire_start", e.start), k))
        elif k in ("SEND_F", "SEND_B"):
            tl.comm.setdefault("P2P", []).append((e.start, e.end))
            w = tl.work.setdefault((e.stage, k), [0, 0.0, 0.0])
            w[0] += 1
            w[1] += e.duration
            w[2] += e.bytes
        elif k in COMM_KINDS:
            tl.comm.setdefault(k, []).append((e.start, e.end))
    for m in memory:
        tl = tl_of(m.rank)
        if m.total > tl.peak_memory:
            tl.peak_memory = m.total
            tl.peak_by_category = dict(m.by_category)
    return list(tls.values())


def report_from_events(scenario, events, memory=(), *, stage_costs=None, extras=None) -> Report:
    return build_report(scenario, timelines_from_events(events, memory), stage_costs=stage_costs,
                        extras=extras, events=events, memory=memory)
