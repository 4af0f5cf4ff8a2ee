"""Point-to-point and all-reduce bandwidth between local processes for `pipesim calibrate`:
gloo on CPU, nccl on CUDA (one GPU per rank), rendezvous on a free loopback port.

Send/recv is a ping-pong; one-way time = round trip / 2 (the OSU micro-benchmarks' osu_latency
method). All-reduce is timed on rank 0 after a barrier per call.
"""
from __future__ import annotations

import os
import queue as queue_mod
import socket
import statistics
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _iterations(estimate_s: float, budget_s: float) -> int:
    return int(max(3, min(50, budget_s / max(estimate_s, 1e-6))))


def _worker(rank, world, port, device, sizes, budget_s, threads, out):
    try:
        import datetime

        import torch
        import torch.distributed as dist
        torch.set_num_threads(threads)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        cuda = device == "cuda"
        if cuda:
            torch.cuda.set_device(rank)
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
        results = time_comm(rank, 1 - rank, sizes, budget_s, dev)
        dist.barrier()
        dist.destroy_process_group()
        if rank == 0:
            out.put(("ok", results))
    except Exception as exc:  # reported to the parent, which states the fallback
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))


def time_comm(rank: int, peer: int, sizes, budget_s: float, dev, group=None,
              ops=("sendrecv", "allreduce")) -> list:
    """Inside an initialised process group: ping-pong between `rank` and `peer` and all-reduce
    over `group` per size (and, with "allgather" in `ops`, an all-gather whose output is that
    size, as torch.distributed.all_gather runs it: one tensor per rank). Every rank of the group
    calls it; returns, on the lower rank of the pair, [(op, bytes, [seconds...])] (one-way seconds
    for sendrecv), elsewhere []."""
    import torch
    import torch.distributed as dist
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    results = []
    lead = rank < peer

    def agree(n):  # the pair's lower rank decides how many iterations; everyone follows
        t = torch.tensor([n], dtype=torch.int64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return int(t.item())

    for nbytes in sizes:
        buf = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=dev)

        def pingpong():
            if lead:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)
            sync()

        def allreduce():
            dist.all_reduce(buf, group=group)
            sync()

        if "allgather" in ops:
            world = dist.get_world_size(group)
            shard = torch.zeros(max(1, nbytes // (4 * world)), dtype=torch.float32, device=dev)
            parts = [torch.empty_like(shard) for _ in range(world)]

        def allgather():          # with the concatenation, as the emulator's TPGroup.all_gather0
            dist.all_gather(parts, shard, group=group)
            torch.cat(parts)
            sync()

        timed = {"sendrecv": (pingpong, 0.5), "allreduce": (allreduce, 1.0), "allgather": (allgather, 1.0)}
        for name in ops:
            fn, scale = timed[name]
            dist.barrier(group=group)
            t0 = time.perf_counter()
            fn()  # warm-up (connection set-up, allocator)
            n = agree(_iterations(time.perf_counter() - t0, budget_s) if lead else 0)
            times = []
            for _ in range(n):
                dist.barrier(group=group)
                sync()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * scale)
            if lead:
                results.append((name, nbytes, times))
    return results


def measure_comm(sizes, device: str, budget_s: float = 0.3, threads: int = 1,
                 ranks: int = 2, timeout_s: float = 120.0):
    """Run `ranks` local processes; returns (list of (op, shape, times_s), note). On failure the
    list is empty and note says why (the profile then has no comm entries and the cost model
    keeps its α-β link model)."""
    if device == "cuda":
        import torch
        if torch.cuda.device_count() < ranks:
            return [], (f"sendrecv/allreduce not measured: nccl needs {ranks} GPUs, "
                        f"{torch.cuda.device_count()} visible")
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, ranks, port, device, list(sizes), budget_s,
                                                threads, out), daemon=True)
             for r in range(ranks)]
    for p in procs:
        p.start()
    status, payload = "error", "timed out"
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                status, payload = out.get(timeout=1.0)
                break
            except queue_mod.Empty:
                if all(not p.is_alive() for p in procs) and out.empty():
                    payload = "worker processes exited without a result"
                    break
    finally:
        for p in procs:
            p.join(timeout=10)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    if status != "ok":
        return [], f"sendrecv/allreduce not measured: {payload}"
    rows = []
    for name, nbytes, times in payload:
        shape = {"bytes": nbytes} if name == "sendrecv" else {"bytes": nbytes, "ranks": ranks}
        rows.append((name, shape, times))
    return rows, None


def summarize(times):
    """(median, p10, p90) of a list of seconds."""
    xs = sorted(times)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return statistics.median(xs), q[0], q[-1]
