"""Chrome / Perfetto trace JSON (the "Trace Event Format"): write and read TraceEvents.

pid = rank, tid = stream (compute, send, recv, dp, ...), times in microseconds. Each event is a
complete event (ph "X") with kind, stage, micro-batch and bytes in args; a SEND and its RECV are
joined by a flow arrow (ph "s" on the sender's send slice, ph "f" on the receiver's recv slice,
same id). Memory samples become counter tracks (ph "C"). Reading returns the TraceEvents and
MemorySamples (the full record is kept in args, so a round trip is lossless).
"""
from __future__ import annotations

import json
from pathlib import Path

from pipesim.errors import PipesimError
from pipesim.report.trace import STREAMS, MemorySample, TraceEvent

US = 1e6
COLORS = {"F": "thread_state_running", "B": "rail_response", "I": "rail_animation", "W": "rail_idle",
          "R": "rail_load", "DP": "cq_build_attempt_failed", "P2P": "generic_work"}


def _tid(stream: str) -> int:
    return STREAMS.index(stream) if stream in STREAMS else len(STREAMS) + abs(hash(stream)) % 1000


def to_chrome(events, memory=(), name: str = "pipesim") -> dict:
    out, threads = [], set()
    flows: dict = {}
    for e in events:
        tid = _tid(e.stream)
        threads.add((e.rank, e.stream, tid))
        label = f"{e.stage}{e.kind}{e.microbatch}" if e.microbatch >= 0 else e.kind
        args = {"kind": e.kind, "stage": e.stage, "microbatch": e.microbatch, "bytes": e.bytes,
                "step": e.step, "pipesim": e.to_dict()}
        out.append({"name": label, "cat": e.kind, "ph": "X", "pid": e.rank, "tid": tid,
                    "ts": e.start * US, "dur": max(0.0, e.end - e.start) * US, "args": args})
        if e.kind in ("SEND_F", "SEND_B") and "flow" in e.args:
            flows[tuple(e.args["flow"])] = (e, tid)
    fid = 0
    for e in events:
        if e.kind in ("RECV_F", "RECV_B"):
            send = flows.get((e.rank, e.kind, e.stage, e.microbatch))
            if send is None:
                continue
            s, stid = send
            fid += 1
            out.append({"name": "p2p", "cat": "flow", "ph": "s", "id": fid, "pid": s.rank, "tid": stid,
                        "ts": s.start * US})
            out.append({"name": "p2p", "cat": "flow", "ph": "f", "bp": "e", "id": fid, "pid": e.rank,
                        "tid": _tid(e.stream), "ts": max(e.end, s.start) * US})
    for m in memory:
        out.append({"name": "memory", "ph": "C", "pid": m.rank, "ts": m.time * US,
                    "args": {k: v for k, v in m.by_category.items()} or {"total": m.total}})
    for rank in sorted({r for r, _, _ in threads} | {m.rank for m in memory}):
        out.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
    for rank, stream, tid in sorted(threads):
        out.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": stream}})
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": {"producer": name},
            "pipesimMemory": [m.to_dict() for m in memory]}


def write_trace(path, events, memory=(), name: str = "pipesim") -> None:
    try:
        Path(path).write_text(json.dumps(to_chrome(events, memory, name)))
    except OSError as exc:
        raise PipesimError(f"{path}: cannot write trace ({exc.strerror})") from None


def read_trace(path) -> tuple[list[TraceEvent], list[MemorySample]]:
    """TraceEvents from a trace written by write_trace (or any Chrome trace whose complete
    events carry kind/stage/microbatch args; others are read as kind = name)."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PipesimError(f"{path}: cannot read trace ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise PipesimError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    items = doc.get("traceEvents", doc) if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise PipesimError(f"{path}: expected a Chrome trace (traceEvents list)")
    names = {}
    for it in items:
        if it.get("ph") == "M" and it.get("name") == "thread_name":
            names[(it.get("pid"), it.get("tid"))] = it.get("args", {}).get("name", str(it.get("tid")))
    events = []
    for it in items:
        if it.get("ph") != "X":
            continue
        args = it.get("args", {})
        if "pipesim" in args:
            d = dict(args["pipesim"])
            if isinstance(d.get("args", {}).get("flow"), list):
                d["args"] = dict(d["args"], flow=tuple(d["args"]["flow"]))
            events.append(TraceEvent.from_dict(d))
            continue
        start = float(it.get("ts", 0.0)) / US
        events.append(TraceEvent(rank=int(it.get("pid", 0)),
                                 stream=names.get((it.get("pid"), it.get("tid")), str(it.get("tid"))),
                                 kind=args.get("kind", it.get("name", "?")), stage=int(args.get("stage", -1)),
                                 microbatch=int(args.get("microbatch", -1)), start=start,
                                 end=start + float(it.get("dur", 0.0)) / US, bytes=float(args.get("bytes", 0.0))))
    memory = [MemorySample.from_dict(m) for m in doc.get("pipesimMemory", [])] if isinstance(doc, dict) else []
    return events, memory
