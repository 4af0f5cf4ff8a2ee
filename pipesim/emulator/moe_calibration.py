"""In-rank calibration of the MoE emulator (pipesim/emulator/moe.py): the counterpart of
rank_calibration.py for the tiny MoE transformer. Every rank measures, at the same moment and
pinned as during the steps:

- the scenario's op costs (pipesim.calibrate.measure_ops, thread CPU time);
- the MoE layer's host time: the emulator's own layer (attention, router, top-k, the sort of the
  token copies by destination, the counts and split sizes, the autograd exchange, the per-expert
  row selection, index_add, the weighted combine) run at negligible size with a loopback
  communicator, so that only host time remains (calibrate.host.measure_dispatch's method:
  2-stage models of 1 and 3 layers, per layer = difference / 2);
- gloo's all-to-all over the rank's EP group (`all_to_all_single` with split sizes, as the
  layer calls it) at the dispatch's size and larger, the counts exchange, and send/recv between
  pipeline neighbours; one exchange at a time (the other ranks wait in a barrier), all of them
  in turn per repetition (comm_ops, time_comm_ops).

The parts are merged by rank_calibration.merge_profiles into one profile; its host record gets
`a2a` (latency + bytes / bandwidth of one all-to-all, fitted over the sizes) which the MoE cost
model uses for a CPU profile (pipesim.costs.moe.a2a_costs).
"""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import replace

A2A_REPS = 30
WAKE_NAP_S = 1e-3     # how late one rank arrives at the woken all-to-all (comm_ops)
SKIP = -1.0           # an op's return value: this rank's time is not kept (time_comm_ops)


def measure_moe_dispatch(cfg, ep: int, ep_rank: int, nap: float = 0.0, reps: int = 40) -> dict:
    """Host seconds per MoE layer (forward, backward) and the first/last stages' extras, of the
    emulator's model at negligible size with a loopback communicator (same keys as
    calibrate.host.measure_dispatch). The loopback sleeps `nap` seconds per exchange, as long as
    the rank blocks in one gloo all-to-all: on a shared machine other processes run meanwhile
    and the host code after the wait runs from cold caches (measured on the 2-core build
    machine at load ~3: the stage's forward CPU time 3.36 ms without naps, 3.95 ms with 0.3 ms
    naps, 5.1 ms with 2 ms naps), which a tight loop would not see."""
    import torch

    from pipesim.calibrate.host import TINY_DIM_PER_HEAD, TINY_SEQ, TINY_VOCAB, timed_variants
    from pipesim.emulator.moe import Comm, full_params, stage_forward
    comm = Comm(None, ep, ep_rank, nap=nap)
    variants = {}
    for n in (1, 3):
        tiny = replace(cfg, hidden=TINY_DIM_PER_HEAD * cfg.heads, seq=TINY_SEQ, vocab=TINY_VOCAB, micro_batch=1,
                       layers=2 * n, ffn=TINY_DIM_PER_HEAD, dtype="float32")
        p = {k: v.requires_grad_(True) for k, v in full_params(tiny).items()}
        variants[(0, n)] = (tiny, p, range(0, n))
        variants[(1, n)] = (tiny, p, range(n, 2 * n))
    tokens = torch.randint(0, TINY_VOCAB, (1, TINY_SEQ + 1))

    def setup(k, tiny, p, layers):
        def prepared():
            for v in p.values():
                v.grad = None
            x = tokens[:, :-1] if k == 0 else torch.randn(1, TINY_SEQ, tiny.hidden, requires_grad=True)
            return lambda: stage_forward(x, p, tiny, layers, comm, k == 0, k == 1, tokens[:, 1:])
        return prepared
    return timed_variants({key: setup(key[0], *v) for key, v in variants.items()}, reps)


def a2a_sizes(cfg, ep: int) -> list[int]:
    """Bytes a rank puts into one all-to-all (all destinations): the dispatch of a micro-batch
    (tokens x top_k copies of h float32), 4x it, 64 KiB and 1 MiB (to resolve the bandwidth)."""
    x = cfg.micro_batch * cfg.seq * cfg.top_k * cfg.hidden * 4
    return sorted({x, 4 * x, 1 << 16, 1 << 20})


def comm_ops(rank: int, ep: int, pp: int, groups, cfg, p2p_sizes) -> list:
    """[(key, members, fn)] of the exchanges the steps make: per EP group the all-to-all at
    a2a_sizes (`all_to_all_single` with split sizes, as the layer calls it) and the counts
    exchange (int64, no split sizes); per pair of pipeline neighbours (pairs 0-1, 2-3 without
    pipelining, for the data-parallel all-reduce's link) a send/recv ping-pong per size."""
    import torch
    import torch.distributed as dist
    ops = []
    if ep > 1:
        for k, g in enumerate(groups):
            members = set(range(k * ep, (k + 1) * ep))
            for nbytes in a2a_sizes(cfg, ep):
                rows = max(1, nbytes // (4 * ep))
                x, y, split = torch.zeros(rows * ep, 1), torch.empty(rows * ep, 1), [rows] * ep
                ops.append((("a2a", 4.0 * rows * (ep - 1)), members,
                            lambda y=y, x=x, split=split, g=g: dist.all_to_all_single(y, x, split, split, group=g)))
            cx, cy = torch.zeros(cfg.experts, dtype=torch.int64), torch.empty(cfg.experts, dtype=torch.int64)
            ops.append((("counts", 0), members, lambda cy=cy, cx=cx, g=g: dist.all_to_all_single(cy, cx, group=g)))
            # the dispatch as the steps meet it: one rank arrives WAKE_NAP_S late, the others wait
            # asleep in gloo and are woken by its data; their time less the nap is the exchange
            # plus the wake-up (the first member's own time is not kept)
            rows = max(1, a2a_sizes(cfg, ep)[0] // (4 * ep))
            x, y, split = torch.zeros(rows * ep, 1), torch.empty(rows * ep, 1), [rows] * ep
            first = k * ep

            def woken(y=y, x=x, split=split, g=g, first=first):
                late = rank == first
                if late:
                    time.sleep(WAKE_NAP_S)
                dist.all_to_all_single(y, x, split, split, group=g)
                return SKIP if late else WAKE_NAP_S
            ops.append((("a2a_woken", 4.0 * rows * (ep - 1)), members, woken))
    world = ep * pp
    pairs = ([(k * ep + j, (k + 1) * ep + j) for k in range(pp - 1) for j in range(ep)] if pp > 1
             else [(r, r + 1) for r in range(0, world - 1, 2)])
    for nbytes in p2p_sizes:
        buf = torch.zeros(max(1, nbytes // 4))
        for a, b in pairs:
            def pingpong(a=a, b=b, buf=buf):
                if rank == a:
                    dist.send(buf, b)
                    dist.recv(buf, b)
                else:
                    dist.recv(buf, a)
                    dist.send(buf, a)
            ops.append((("p2p", nbytes, a), {a, b}, pingpong))
    return ops


def time_comm_ops(rank: int, ops, reps: int = A2A_REPS) -> dict:
    """Mean wall seconds per key of `ops`, timed in turn (one round of every op per repetition,
    so that a burst of load on the shared machine hits all sizes alike) between a world barrier
    and the call's return; only the op's members take part, the other ranks wait in the barrier.
    A ping-pong's time is halved (one-way, the OSU osu_latency method). An op may return the
    seconds it idled on purpose (subtracted), or SKIP when this rank's time is not kept."""
    import torch.distributed as dist
    times: dict = {}
    for i in range(reps + 1):                  # the first round warms up (connections, buffers)
        for key, members, fn in ops:
            dist.barrier()
            if rank in members:
                t0 = time.perf_counter()
                idle = fn() or 0.0
                if i and idle != SKIP:
                    sec = (time.perf_counter() - t0 - idle) * (0.5 if key[0] == "p2p" else 1.0)
                    times.setdefault(key, []).append(sec)
    # The mean, not the median: gloo's exchanges on this VM take ~0.2 ms or 2-5 ms (both ranks
    # waiting together, e.g. 32 bytes of counts in 5.2 ms), so an exchange's expected time is
    # well above its median, and a step sums ~20 of them (moe_ep2_pp1: the steps' exchanges
    # median 0.2 ms, mean 1.2-1.9 ms; step error -55 to -75 % with the medians, +11 and -24 %
    # with the means, 2026-11-26).
    return {key: statistics.fmean(v) for key, v in times.items()}


def calibrate_moe_rank(s, cfg, rank: int, world: int, ep: int, groups, budget_s: float, run_dir: str,
                       when: str) -> dict:
    """Measure on this rank (every rank calls it at the same point); writes and returns the part
    (rank_calibration's format plus "a2a" and "counts_s")."""
    import torch.distributed as dist

    from pipesim.calibrate.run import measure_ops, plan
    from pipesim.emulator.rank_calibration import message_sizes
    items, notes = plan("cpu", s)
    dist.barrier()
    ops = measure_ops(items, "cpu", quick=False, notes=notes, budget_s=budget_s)
    pp = world // ep
    timed = time_comm_ops(rank, comm_ops(rank, ep, pp, groups, cfg, message_sizes(s)))
    a2a = [[k[1], t] for k, t in sorted(timed.items()) if k[0] == "a2a"]
    woken = [t for k, t in timed.items() if k[0] == "a2a_woken"]
    wakeup = max(0.0, woken[0] - a2a[0][1]) if woken and a2a else None
    counts = timed.get(("counts", 0))
    p2p = [[k[1], t] for k, t in sorted(timed.items()) if k[0] == "p2p" and k[2] == rank]
    # the loopback blocks as long as this rank's all-to-all at the dispatch's size (the smallest)
    dispatch = measure_moe_dispatch(cfg, ep, rank % ep, nap=a2a[0][1] if a2a else 0.0)
    dist.barrier()
    part = {"rank": rank, "measurements": [m.to_dict() for m in ops], "notes": notes, "dispatch": dispatch,
            "action_s": 0.0, "p2p": p2p, "a2a": a2a, "counts_s": counts,
            "wakeup_s": wakeup}
    with open(os.path.join(run_dir, f"rank{rank}.profile.{when}.json"), "w") as fh:
        json.dump(part, fh)
    return part


def merge_moe_profiles(s, parts: list[dict], nproc: int) -> dict:
    """rank_calibration.merge_profiles plus the all-to-all fit: host.a2a = {latency_s,
    bandwidth_Bps, counts_s, wakeup_s, points} (mean over the ranks that timed it)."""
    from pipesim.calibrate.host import fit_link
    from pipesim.emulator.rank_calibration import merge_profiles
    prof = merge_profiles(s, parts, 1, nproc)
    pts: dict = {}
    for p in parts:
        for nbytes, sec in p.get("a2a") or ():
            pts.setdefault(nbytes, []).append(sec)
    points = [(b, statistics.fmean(v)) for b, v in sorted(pts.items())]
    counts = [p["counts_s"] for p in parts if p.get("counts_s") is not None]
    wakeups = [p["wakeup_s"] for p in parts if p.get("wakeup_s") is not None]
    link = fit_link(points)
    if link is not None:
        prof["device"]["host"]["a2a"] = {"latency_s": link[0], "bandwidth_Bps": link[1],
                                         "counts_s": statistics.fmean(counts) if counts else link[0],
                                         "wakeup_s": statistics.fmean(wakeups) if wakeups else 0.0,
                                         "points": [[b, t] for b, t in points]}
    return prof
