"""Lowering: insert explicit SEND/RECV for every cross-rank dependency (same-rank hand-offs need none).

Placement follows what a runtime does: a SEND right after the compute that produced the tensor,
the matching RECV (the wait on the irecv) right before the compute that consumes it.
"""
from __future__ import annotations

from pipesim.schedules.actions import Action
from pipesim.schedules.plan import Plan


def recv_before(a: Action, plan: Plan) -> Action | None:
    """The RECV `a` needs on its own rank, or None when its input comes from the same rank."""
    s, S = a.stage, plan.num_stages
    here = plan.rank_of(s)
    if a.kind == "F" and s > 0 and plan.rank_of(s - 1) != here:
        return Action(s, "RECV_F", a.microbatch)
    if a.kind in ("B", "I") and s < S - 1 and plan.rank_of(s + 1) != here:
        return Action(s, "RECV_B", a.microbatch)
    return None


def send_after(a: Action, plan: Plan) -> Action | None:
    """The SEND that follows `a` on its rank, or None when the consumer sits on the same rank."""
    s, S = a.stage, plan.num_stages
    here = plan.rank_of(s)
    if a.kind == "F" and s < S - 1 and plan.rank_of(s + 1) != here:
        return Action(s, "SEND_F", a.microbatch)
    if a.kind in ("B", "I") and s > 0 and plan.rank_of(s - 1) != here:
        return Action(s, "SEND_B", a.microbatch)
    return None


def peer_of(c: Action) -> Action:
    """The other half of a SEND/RECV pair (torch naming: SEND carries the sender's stage)."""
    s, m = c.stage, c.microbatch
    return {
        "SEND_F": Action(s + 1, "RECV_F", m),
        "RECV_F": Action(s - 1, "SEND_F", m),
        "SEND_B": Action(s - 1, "RECV_B", m),
        "RECV_B": Action(s + 1, "SEND_B", m),
    }[c.kind]


def lower(plan: Plan) -> Plan:
    """Return `plan` with SEND_F/RECV_F/SEND_B/RECV_B inserted; a plan already lowered is returned as is.

    The same rule as recv_before/send_after, tabulated per stage first (which hand-offs cross a
    rank boundary), so lowering is one pass with no per-action lookups."""
    if plan.is_lowered:
        return plan
    where, S = plan.stage_to_rank, plan.num_stages
    f_in = [s > 0 and where[s - 1] != where[s] for s in range(S)]          # F(s) receives its input
    f_out = [s < S - 1 and where[s + 1] != where[s] for s in range(S)]     # F(s) sends its output
    rows = []
    new = tuple.__new__          # Action(...) without the NamedTuple's Python-level __new__
    for row in plan.ranks:
        out: list[Action] = []
        for a in row:
            s, kind, m = a
            if kind == "F":
                if f_in[s]:
                    out.append(new(Action, (s, "RECV_F", m)))
                out.append(a)
                if f_out[s]:
                    out.append(new(Action, (s, "SEND_F", m)))
            elif kind == "B" or kind == "I":
                if f_out[s]:                 # its gradient input comes from stage s+1's rank
                    out.append(new(Action, (s, "RECV_B", m)))
                out.append(a)
                if f_in[s]:
                    out.append(new(Action, (s, "SEND_B", m)))
            else:
                out.append(a)
        rows.append(tuple(out))
    return Plan(plan.name, plan.num_ranks, plan.num_stages, plan.num_microbatches, plan.stage_to_rank, tuple(rows))
