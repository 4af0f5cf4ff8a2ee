"""Why the step takes what it takes: critical path, bubble by cause, computed suggestions.

`explain(report, scenario)` -> dict, every figure measured on the simulated step or on a
re-simulation of a changed scenario (never a rule of thumb):

- critical path: walking back from the event that ends the step, each event's predecessor is
  what it waited for: the previous op on its rank, or - when a receive finished right before it
  - the sender's transfer and the op that produced it. The path tells which rank, which ops and
  which transfers set the step time.
- bubble by cause, by counterfactual simulations of the same plan: with communication free
  (bubble b1) and with communication free and every stage costing the mean stage (b2):
  fill/drain = b2 (what the schedule leaves idle with perfect stages), stage imbalance = b1 - b2,
  exposed communication = b0 - b1 (split over kinds in proportion to the exposed seconds).
  The three add up to the simulated bubble b0. Recompute is busy time, not bubble: it is given
  in ms per step on each rank.
- suggestions: candidate changes, each simulated (pipesim/report/suggest.py).
"""
from __future__ import annotations

import dataclasses

from pipesim.costs.moe_dispatch import pace as a2a_pace
from pipesim.costs.norm_kernels import norm_wait
from pipesim.report.suggest import suggestions

EPS = 1e-9


def critical_path(events) -> list[dict]:
    """Segments (rank, kind, stage, microbatch, start, end, what) from step start to end."""
    import bisect
    # sends enter the path only through a receive that waited for them
    evs = [e for e in events if e.stream not in ("recv", "send")]
    if not evs:
        return []
    by_rank: dict = {}
    for e in evs:
        by_rank.setdefault(e.rank, []).append(e)
    for lst in by_rank.values():
        lst.sort(key=lambda e: (e.end, e.start))
    ends = {r: [e.end for e in lst] for r, lst in by_rank.items()}
    recvs: dict = {}            # (rank, end rounded to 1 ns) -> receives completing then
    for e in events:
        if e.kind in ("RECV_F", "RECV_B"):
            recvs.setdefault((e.rank, round(e.end * 1e9)), []).append(e)
    sends = {tuple(e.args["flow"]): e for e in events if e.kind in ("SEND_F", "SEND_B") and "flow" in e.args}

    def before(rank, t, exclude):
        """The latest event on `rank` ending at or before t (not `exclude`)."""
        lst = by_rank.get(rank, [])
        i = bisect.bisect_right(ends.get(rank, []), t + EPS) - 1
        while i >= 0 and lst[i] is exclude:
            i -= 1
        return lst[i] if i >= 0 else None

    cur = max(evs, key=lambda e: (e.end, e.stream == "compute"))
    path = []
    for _ in range(len(evs) + 1):
        path.append(_segment(cur, "op"))
        t = cur.start
        if t <= EPS:
            break
        prev = before(cur.rank, t, cur)
        # a receive that completed at t, later than the rank's own previous op: the rank waited on it
        near = [x for k in (-1, 0, 1) for x in recvs.get((cur.rank, round(t * 1e9) + k), ())]
        waited = [r for r in near if abs(r.end - t) <= EPS and (prev is None or r.end > prev.end + EPS)]
        if waited:
            recv = waited[0]
            send = sends.get((recv.rank, recv.kind, recv.stage, recv.microbatch))
            if send is not None:
                wire = dict(_segment(send, "transfer"), start=send.start, end=recv.end)
                path.append(wire)
                src = before(send.rank, send.start, None)
                if src is None:
                    break
                cur = src
                continue
        if prev is None:
            break
        if prev.end < t - EPS:
            path.append({"rank": cur.rank, "kind": "idle", "stage": -1, "microbatch": -1,
                         "start": prev.end, "end": t, "what": "idle"})
        cur = prev
    path.reverse()
    return path


def _segment(e, what: str) -> dict:
    return {"rank": e.rank, "kind": e.kind, "stage": e.stage, "microbatch": e.microbatch,
            "start": e.start, "end": e.end, "bytes": e.bytes, "what": what}


def path_summary(path: list[dict]) -> dict:
    """Seconds on the critical path per rank and per kind (ops), transfers, idle."""
    ranks: dict = {}
    kinds: dict = {}
    transfer = idle = 0.0
    n_transfers = 0
    for seg in path:
        d = seg["end"] - seg["start"]
        if seg["what"] == "transfer":
            transfer += d
            n_transfers += 1
        elif seg["what"] == "idle":
            idle += d
        else:
            ranks[seg["rank"]] = ranks.get(seg["rank"], 0.0) + d
            kinds[seg["kind"]] = kinds.get(seg["kind"], 0.0) + d
    top = max(ranks, key=ranks.get) if ranks else None
    return {"seconds_by_rank": ranks, "seconds_by_kind": kinds, "transfer_s": transfer,
            "transfers": n_transfers, "idle_s": idle, "dominant_rank": top,
            "length_s": (path[-1]["end"] - path[0]["start"]) if path else 0.0}


def stage_contents(s, costs) -> list[dict]:
    """Per model stage: layers, embedding/head, F+B per micro-batch, and what the blocks cost."""
    blocks = block_seconds(s)
    out = []
    for c in costs:
        total = c.forward + c.backward
        out.append({"stage": c.stage, "layers": c.layers, "embedding": c.has_embedding, "head": c.has_head,
                    "seconds": total, "forward_s": c.forward, "backward_s": c.backward, "recompute_s": c.recompute,
                    "layers_s": c.layers * blocks.get("layer", 0.0),
                    "embedding_s": blocks.get("embedding", 0.0) if c.has_embedding else 0.0,
                    "head_s": blocks.get("head", 0.0) if c.has_head else 0.0})
    return out


def block_seconds(s) -> dict:
    """F+B seconds per micro-batch of one layer, the embedding and the LM head (estimate's rows)."""
    if s.model.arch != "transformer":
        return {}
    from pipesim.report.estimate import estimate
    out: dict = {}
    for r in estimate(s)["rows"]:
        out[r["block"]] = out.get(r["block"], 0.0) + r["t_fwd_s"] + r["t_bwd_s"]
    return out


def slowest_stage(contents: list[dict]) -> dict | None:
    if len(contents) < 2:
        return None
    worst = max(contents, key=lambda c: c["seconds"])
    others = sorted(c["seconds"] for c in contents if c is not worst)
    median = others[len(others) // 2]
    parts = []
    if worst["layers"]:
        parts.append(f"{worst['layers']} layer{'s' if worst['layers'] > 1 else ''}")
    if worst["embedding"]:
        parts.append("the embedding")
    if worst["head"]:
        parts.append("the LM head")
    return dict(worst, ratio=worst["seconds"] / median if median > 0 else float("inf"),
                others_median_s=median, holds=" + ".join(parts) or "no layers")


def _free_comm(c):
    return dataclasses.replace(
        c, forward=c.forward - c.tp_comm_fwd, backward=c.backward - c.tp_comm_bwd,
        input_grad=c.input_grad - c.tp_comm_input_grad, tp_comm_fwd=0.0, tp_comm_bwd=0.0, tp_comm_input_grad=0.0,
        tp_bytes_fwd=0.0, tp_bytes_bwd=0.0, send_bytes=0.0, grad_send_bytes=0.0, grad_bytes=0.0, quantize=0.0,
        dequantize=0.0)


def _balanced(costs):
    n = len(costs)
    keys = ("forward", "backward", "input_grad", "weight_grad", "recompute", "optimizer_step")
    mean = {k: sum(getattr(c, k) for c in costs) / n for k in keys}
    return [dataclasses.replace(c, **mean) for c in costs]


def bubble_causes(s, report, costs, mode: str) -> dict:
    """Bubble points (fractions) per cause from two counterfactual simulations (module docstring)."""
    from pipesim.sim import simulate
    b0 = report.data["bubble_fraction"]
    free = [_free_comm(c) for c in costs]
    b1 = simulate(s, mode=mode, trace=False, stage_costs=free).data["bubble_fraction"]
    b2 = simulate(s, mode=mode, trace=False, stage_costs=_balanced(free)).data["bubble_fraction"]
    comm = b0 - b1
    exposed = {k: v for k, v in report.data.get("exposed_comm_s", {}).items() if k not in ("TP", "CP") and v > 0}
    total = sum(exposed.values())
    by_kind = {k: comm * v / total for k, v in exposed.items()} if total > 0 else {}
    return {"bubble": b0, "fill_drain": b2, "imbalance": b1 - b2, "communication": comm,
            "communication_by_kind": by_kind, "bubble_free_comm": b1, "bubble_balanced": b2}


def recompute_by_rank(s, report, costs) -> dict:
    """Seconds of recomputed forward per rank in the step: explicit R actions where the plan has
    them, else each B (or I) carries its stage's recompute."""
    per_stage = {c.stage: c.recompute for c in costs}
    ops = [e for e in report.events if e.stream == "compute" and e.stage in per_stage]
    explicit = any(e.kind == "R" for e in ops)
    out: dict = {}
    for e in ops:
        if explicit and e.kind == "R":
            out[e.rank] = out.get(e.rank, 0.0) + e.duration
        elif not explicit and e.kind in ("B", "I"):
            out[e.rank] = out.get(e.rank, 0.0) + per_stage[e.stage]
    return out


def blocking_by_rank(report) -> tuple[dict, dict]:
    """Seconds of blocking collectives inside F/B per rank: (tensor-parallel ones, the events' `tp`
    less its context-parallel part; the exposed context-parallel K/V exchange, their `cp`)."""
    tp: dict = {}
    cp: dict = {}
    for e in report.events:
        if e.stream != "compute":
            continue
        c = e.args.get("cp", 0.0)
        for out, sec in ((tp, e.args.get("tp", 0.0) - c), (cp, c)):
            if sec > 0:
                out[e.rank] = out.get(e.rank, 0.0) + sec
    return tp, cp


def explain(report, s, *, mode: str = "representative", suggest: bool = True) -> dict:
    """The "why" of one simulated step (module docstring); `report` must carry its events."""
    from pipesim.costs import stage_costs
    costs = stage_costs(s)
    path = critical_path(report.events)
    summary = path_summary(path)
    contents = stage_contents(s, costs)
    tp_s, cp_s = blocking_by_rank(report)
    why = {"critical_path": path, "path": summary, "stages": contents, "slowest_stage": slowest_stage(contents),
           "bubble": bubble_causes(s, report, costs, mode) if s.parallel.pipeline > 1 else None,
           "recompute_s_by_rank": recompute_by_rank(s, report, costs) if s.training.recompute != "none" else {},
           "tp_s_by_rank": tp_s, "cp_s_by_rank": cp_s}
    last = max(report.data["ranks"], key=lambda r: r.get("end_s", 0.0)) if report.data["ranks"] else None
    why["a2a_pace"] = a2a_pace(s) if report.data.get("exposed_comm_s", {}).get("EP_A2A", 0.0) > 0 else None
    why["last_rank"] = last["rank"] if last else None
    why["norm_wait"] = norm_wait(s)
    why["suggested"] = suggest
    why["suggestions"] = suggestions(s, report, mode) if suggest else []
    return why


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def headline(why: dict, report) -> list[str]:
    """The short "why" printed under the CLI summary."""
    d = report.data
    lines = []
    ps = why["path"]
    if ps["dominant_rank"] is not None:
        share = ps["seconds_by_rank"][ps["dominant_rank"]] / ps["length_s"] if ps["length_s"] else 0.0
        kinds = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in sorted(ps["seconds_by_kind"].items(),
                                                                      key=lambda kv: -kv[1])[:4])
        lines.append(f"critical path  {ps['length_s'] * 1e3:.1f} ms, {share * 100:.0f} % of it on rank "
                     f"{ps['dominant_rank']} ({kinds}; {ps['transfers']} transfers {ps['transfer_s'] * 1e3:.1f} ms)")
    slow = why["slowest_stage"]
    if slow and slow["ratio"] > 1.1:
        detail = ""
        if slow["head"] and slow["head_s"] > 0:
            detail = f"; the LM head alone costs {slow['head_s'] * 1e3:.1f} ms"
        elif slow["embedding"] and slow["embedding_s"] > 0:
            detail = f"; the embedding alone costs {slow['embedding_s'] * 1e3:.1f} ms"
        lines.append(f"slowest stage  {slow['stage']} holds {slow['holds']}: {slow['seconds'] * 1e3:.1f} ms F+B per "
                     f"micro-batch, {slow['ratio']:.1f}x the other stages' median{detail}")
    b = why["bubble"]
    if b:
        comm = ", ".join(f"{k} {_pct(v)}" for k, v in b["communication_by_kind"].items()) or _pct(b["communication"])
        lines.append(f"bubble {_pct(b['bubble'])} = fill/drain {_pct(b['fill_drain'])} + stage imbalance "
                     f"{_pct(b['imbalance'])} + exposed communication {comm}")
    if why["recompute_s_by_rank"]:
        worst = max(why["recompute_s_by_rank"].items(), key=lambda kv: kv[1])
        lines.append(f"recompute      {worst[1] * 1e3:.1f} ms of the step on rank {worst[0]} "
                     f"({worst[1] / d['step_time_s'] * 100:.1f} %)")
    if why["tp_s_by_rank"]:
        worst = max(why["tp_s_by_rank"].items(), key=lambda kv: kv[1])
        lines.append(f"tensor parallel {worst[1] * 1e3:.1f} ms of blocking TP collectives on rank {worst[0]} "
                     f"({worst[1] / d['step_time_s'] * 100:.1f} % of the step)")
    if why.get("cp_s_by_rank"):
        worst = max(why["cp_s_by_rank"].items(), key=lambda kv: kv[1])
        lines.append(f"context parallel {worst[1] * 1e3:.1f} ms of exposed K/V exchange on rank {worst[0]} "
                     f"({worst[1] / d['step_time_s'] * 100:.1f} % of the step)")
    lost = max(d["ranks"], key=lambda r: r.get("compute_contention_s", 0.0)) if d.get("ranks") else {}
    if lost.get("compute_contention_s", 0.0) > 0.02 * d["step_time_s"]:
        sec = lost["compute_contention_s"]
        w = why.get("norm_wait")
        waits = (f"; Transformer Engine's cooperative norm kernels wait for them (training.norm_sm_margin "
                 f"{w['margin']} < their {w['dp']} SMs)" if w and w["dp"] else "")
        lines.append(f"SM contention  {sec * 1e3:.1f} ms of compute lost on rank {lost['rank']} "
                     f"({sec / d['step_time_s'] * 100:.1f} % of the step) beside overlapped data-parallel "
                     f"collectives, whose NCCL channels hold SMs (training.collective_sm_contention){waits}")
    a2a = d.get("exposed_comm_s", {}).get("EP_A2A", 0.0)
    if why.get("a2a_pace") and a2a > 0.02 * d["step_time_s"]:
        p = why["a2a_pace"]
        by = (f"{p['dispatcher']}'s {p['sms']} SMs set its pace ({p['kernel_Bps'] / 1e9:.0f} GB/s per rank, "
              f"NVLink would carry {p['link_Bps'] / 1e9:.0f})" if p["bound"] == "kernel"
              else f"{p['dispatcher']} at the link's pace")
        lines.append(f"expert a2a     {a2a * 1e3:.1f} ms exposed ({a2a / d['step_time_s'] * 100:.1f} % of the step); {by}")
    for i, sug in enumerate(why["suggestions"][:3]):
        pace = f"{sug['speedup']:.2f}x faster" if sug["speedup"] >= 1 else f"{1 / sug['speedup']:.2f}x slower, fits"
        lines.append(f"{'suggestion' if i == 0 else '':14s} {sug['title']}: simulated step {sug['step_time_s'] * 1e3:.1f} ms "
                     f"({pace}), bubble {_pct(sug['bubble_fraction'])}, peak memory "
                     f"{sug['peak_memory_bytes'] / 2**30:.2f} of {d['memory_capacity_bytes'] / 2**30:.2f} GiB")
        lines.append(f"{'':14s}   {sug['how']}")
    if not why["suggestions"] and why["suggested"]:
        lines.append("suggestion     none of the candidate changes shortens the step by 2 % or more")
    return lines
