"""Calibration inside the emulator's ranks: the op costs and the host model the simulator will
use are measured by the same processes, pinned and prioritised the same way, with the other
ranks calibrating on their cores at the same moment (shared L3 and memory bandwidth), right
before the timed steps -- not by a separate process at another moment of a shared machine.

Before the warm-up and again after the timed steps, every rank times the scenario's ops (pipesim.calibrate.measure_ops), its model's host
time at a negligible size (calibrate_host.measure_dispatch) and the executor's cost per action,
all in thread CPU time; then pairs of
ranks (0-1, 2-3, ...) ping-pong activation-sized messages over gloo. Each writes
rank{r}.profile.{before,after}.json; `merge_profiles` averages the ranks (and both moments) into
one profile with the host model under device.host.
"""
from __future__ import annotations

import json
import os
import statistics
import time

DEFAULT_BUDGET_S = 0.1      # seconds of timed calls per op and rank
ACTION_REPS = 200


def measure_action(executor, reps: int = ACTION_REPS) -> float:
    """Seconds the executor spends per compute action around the work itself (status record,
    trace event, memory sample): no-op actions run through the same path, then discarded."""
    from pipesim.schedules import Action
    rec = executor.rt.recorder
    keep, n_ev, n_mem = rec.keep, len(rec.events), len(rec.memory)
    rec.keep = True
    a = Action(executor.row[0].stage if executor.row else 0, "R", 0)
    t0 = time.thread_time()
    for _ in range(reps):
        executor.run_action(-1, a, lambda: None)
    dt = (time.thread_time() - t0) / reps
    del rec.events[n_ev:], rec.memory[n_mem:]
    rec._lines.clear()
    rec.keep = keep
    return dt


def message_sizes(s) -> list[int]:
    """Ping-pong sizes: small (latency), the stage-to-stage activation, 4x it and 4 MiB (so
    that the bandwidth term is resolved for small models too)."""
    elem = 4 if s.training.precision == "fp32" else 2
    act = s.model.seq_length * s.training.micro_batch_size * s.model.hidden_size * elem
    return sorted({4096, act, 4 * act, 4 * 2**20})


def in_model_supported(s) -> bool:
    """Whether the ops can be timed inside this rank's stages: stages whose forward and backward
    run on random inputs without peers (context parallelism and MoE routing exchange data with
    other ranks inside a layer; tensor-parallel collectives are symmetric and take part)."""
    return s.parallel.context == 1 and not s.model.is_moe


def calibrate_in_rank(s, rank: int, world: int, budget_s: float = DEFAULT_BUDGET_S, executor=None,
                      run_dir: str | None = None, status=None, when: str = "before", rounds=()) -> dict:
    """Measure on this rank (every rank of the run calls it at the same point); returns the part
    and writes it to run_dir/rank{rank}.profile.{when}.json. The worker calibrates before the
    warm-up and again after the timed steps: on a shared machine the op costs drift, and the
    two calibrations bound the drift over the timed steps. `rounds`: the in-model traces taken
    between the timed steps (`trace_round`), pooled with this calibration's own trace."""
    import torch
    import torch.distributed as dist

    from pipesim.calibrate.run import measure_ops, plan
    from pipesim.calibrate.comm import summarize, time_comm
    from pipesim.calibrate.host import measure_dispatch
    if status is not None:
        status.set(-1, f"CALIBRATE_{when.upper()}", "run")
    items, notes = plan("cpu", s)
    # All ranks at once, as during the steps: the others' work shares this core's last-level cache
    # and memory bandwidth then too (the timer's flush touches only 4x a private L2).
    # (Taking turns, one rank idle while the other timed its ops, predicted shape A's step 12 and
    # 19 % short at load 12-15 against 12 and 5 % for all at once, measured back to back.)
    dist.barrier()
    ops = [m.to_dict() for m in measure_ops(items, "cpu", quick=False, notes=notes, budget_s=budget_s)]
    replaced, tp_in_model = 0, {}
    if executor is not None and in_model_supported(s):
        # the same ops timed where they run: inside this rank's own stages (in_context.py)
        from pipesim.calibrate.in_context import PATTERNS, in_context
        # the ranks leave the time-budgeted op timing at different moments: trace_round starts
        # the trace together, or its first TP all-reduce would hold that difference
        records, log = trace_round(s, executor, PATTERNS)
        tp_in_model = in_model_collectives(executor.rt.tp, [log, *(round_log for _, round_log in rounds)])
        ops, replaced = in_context(ops, items, records, [r for r, _ in rounds])
    dispatch = measure_dispatch(s)
    action = measure_action(executor) if executor is not None else 0.0
    timed = {"sendrecv": [], "allreduce": [], "allgather": []}
    if world % 2 == 0:
        peer = rank + 1 if rank % 2 == 0 else rank - 1
        for op, nbytes, times in time_comm(rank, peer, message_sizes(s), budget_s, torch.device("cpu"),
                                           ops=tuple(timed)):
            timed[op].append([nbytes, summarize(times)[0]])
    dist.barrier()
    part = {"rank": rank, "measurements": ops, "notes": notes, "in_model_keys": replaced,
            "dispatch": dispatch, "action_s": action, "p2p": timed["sendrecv"],
            "allreduce": timed["allreduce"], "allgather": timed["allgather"], "tp_in_model": tp_in_model}
    if run_dir:
        with open(os.path.join(run_dir, f"rank{rank}.profile.{when}.json"), "w") as fh:
            json.dump(part, fh)
    return part


def trace_round(s, executor, patterns: int = 1) -> tuple[list, list]:
    """`patterns` 1F1B patterns of this rank's stages timed call by call (in_context.trace_stages);
    one between two timed steps takes the op costs at the steps' own moments, so that the
    machine's drift over the run (the same GEMM on this VM: 80.6 and 94.2 GFLOP/s a minute apart)
    moves the prediction as it moves the steps. Returns (timed calls, the TP collectives' log,
    taken off the rank's log: the trace's collectives are not the step's)."""
    import torch.distributed as dist

    from pipesim.calibrate.in_context import trace_stages
    rt = executor.rt
    dist.barrier()          # the tensor-parallel partners meet in the trace's collectives
    records = trace_stages(rt.stages, executor.shape, s.model.vocab_size, rt.counter, patterns=patterns,
                           token_seq=s.model.seq_length // s.parallel.context)
    log = list(rt.tp.log)
    rt.tp.log.clear()
    rt.tp.take_cpu()
    return records, log


def in_model_collectives(tp, logs) -> dict:
    """{kind: [[bytes, seconds]]} of the tensor-parallel collectives the in-model traces ran (all
    all-reduces without sequence parallelism, all-gathers and reduce-scatters with it); `logs`:
    one TP log per trace (records without a kind, a context-parallel exchange's, are left out).
    Their wall time holds what the steps' collectives hold and a calibration with nothing else
    running does not: the wait for the partner that left its compute later. Per kind and size the
    median over the traces of each trace's mean, as for the ops (in_context.in_context): the
    waits are bimodal on this VM (tp2 L4 h192 of the suite, 169,728 B: a trace's median 0.7-0.9 ms
    or 2.0-2.5 ms from one trace to the next, its mean 1.6-2.9 ms), so a median within a trace
    jumps between the modes and the mean does not."""
    if tp.size <= 1:
        return {}
    by_key: dict = {}
    for log in logs:
        per_trace: dict = {}
        for record in log:
            if len(record) > 4:
                _, s0, s1, nbytes, kind = record
                per_trace.setdefault((kind, nbytes), []).append(s1 - s0)
        for key, v in per_trace.items():
            by_key.setdefault(key, []).append(statistics.fmean(v))
    out: dict = {}
    for (kind, nbytes), v in sorted(by_key.items()):
        out.setdefault(kind, []).append([nbytes, statistics.median(v)])
    return out


def _mean_points(parts: list[dict], key: str) -> list:
    """[(bytes, seconds)] of one timed collective: per size, the mean over the ranks that timed it."""
    pts: dict = {}
    for p in parts:
        for nbytes, sec in p.get(key, []):
            pts.setdefault(nbytes, []).append(sec)
    return [(b, statistics.fmean(v)) for b, v in sorted(pts.items())]


def merge_profiles(s, parts: list[dict], threads: int, nproc: int) -> dict:
    """One profile (pipesim.costs.profile format, as a dict) from the parts of `nproc` ranks (one
    or more calibrations each): per (op, shape) the mean over the ranks of their medians (and of
    their in-model means); the host model from the means."""
    from pipesim.calibrate.run import device_info
    from pipesim.calibrate.host import host_model
    from pipesim.emulator.host import layout
    measurements = _mean_over_ranks([p["measurements"] for p in parts])
    dispatch = {k: statistics.fmean(p["dispatch"][k] for p in parts) for k in parts[0]["dispatch"]}
    action = statistics.fmean(p["action_s"] for p in parts)
    p2p, allreduce, allgather = (_mean_points(parts, key) for key in ("p2p", "allreduce", "allgather"))
    # in-model TP collectives: the mean over the ranks (for two ranks, the early one's wait for the
    # late one is the late one's extra compute, which the mean of their op costs leaves out)
    in_model = {}
    for kind in sorted({k for p in parts for k in p.get("tp_in_model", {})}):
        inm: dict = {}
        for p in parts:
            for nbytes, sec in p.get("tp_in_model", {}).get(kind, []):
                inm.setdefault(nbytes, []).append(sec)
        in_model[kind] = [(b, statistics.fmean(v)) for b, v in sorted(inm.items()) if len(v) == len(parts)]
    info = device_info("cpu", threads)
    info["host"] = host_model(s, dispatch, action, p2p, layout(nproc, threads), allreduce, nproc, in_model,
                              allgather, s.parallel.tensor)
    info["calibrated"] = "inside the emulator's ranks"
    notes = sorted({n for p in parts for n in p.get("notes", [])})
    if notes:
        info["notes"] = notes
    return {"version": 1, "device": info, "created": info["date"], "measurements": measurements}


def _mean_over_ranks(lists) -> list[dict]:
    """Per (op, shape): the mean of the ranks' medians, the widest p10-p90, all samples."""
    from pipesim.costs.profile import IN_MODEL
    by_key: dict = {}
    for ms in lists:
        for m in ms:
            by_key.setdefault((m["op"], json.dumps(m["shape"], sort_keys=True)), []).append(m)
    out = []
    for ms in by_key.values():
        # a key timed inside some rank's stages (that rank runs the op) is taken from those ranks,
        # from the calibration that pooled the most traces (the one after the timed steps holds
        # the traces taken between them: in_context.in_context)
        inside = [x for x in ms if x.get("impl") == IN_MODEL]
        if inside:
            most = max(x.get("rounds", 1) for x in inside)
            inside = [x for x in inside if x.get("rounds", 1) == most]
        ms = inside or ms
        m = dict(ms[0])
        m["median_s"] = statistics.fmean(x["median_s"] for x in ms)
        iso = [x["isolated_s"] for x in ms if "isolated_s" in x]
        if iso:
            m["isolated_s"] = statistics.fmean(iso)
        means = [x["mean_s"] for x in ms if "mean_s" in x]
        if means:
            m["mean_s"] = statistics.fmean(means)
        m["p10_s"] = min(x["p10_s"] for x in ms)
        m["p90_s"] = max(x["p90_s"] for x in ms)
        m["n"] = sum(x["n"] for x in ms)
        out.append(m)
    return out


def read_parts(run_dir: str, nproc: int, when: str = "before") -> list[dict]:
    parts = []
    for r in range(nproc):
        path = os.path.join(run_dir, f"rank{r}.profile.{when}.json")
        if os.path.exists(path):
            with open(path) as fh:
                parts.append(json.load(fh))
    return parts
