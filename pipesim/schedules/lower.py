"""Lowering: insert explicit SEND/RECV for every cross-rank dependency (same-rank hand-offs need none).

Placement follows what a runtime does: a SEND right after the compute that produced the tensor,
the matching RECV (the wait on the irecv) right before the compute that consumes it.
"""
from __future__ import annotations

from itertools import chain

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


_EXPANSIONS: dict = {}     # stage_to_rank -> {Action: the actions it lowers to}


def _handoffs(where) -> tuple[list, list]:
    """Per stage: does F(s) receive its input from another rank, does it send its output to one."""
    S = len(where)
    f_in = [s > 0 and where[s - 1] != where[s] for s in range(S)]          # F(s) receives its input
    f_out = [s < S - 1 and where[s + 1] != where[s] for s in range(S)]     # F(s) sends its output
    return f_in, f_out


def _expand(a: Action, f_in: list, f_out: list) -> tuple:
    new = tuple.__new__          # Action(...) without the NamedTuple's Python-level __new__
    s, kind, m = a
    if kind == "F":
        return ((new(Action, (s, "RECV_F", m)),) if f_in[s] else ()) + (a,) + \
            ((new(Action, (s, "SEND_F", m)),) if f_out[s] else ())
    if kind == "B" or kind == "I":    # its gradient input comes from stage s+1's rank
        return ((new(Action, (s, "RECV_B", m)),) if f_out[s] else ()) + (a,) + \
            ((new(Action, (s, "SEND_B", m)),) if f_in[s] else ())
    return (a,)


def lower(plan: Plan) -> Plan:
    """Return `plan` with SEND_F/RECV_F/SEND_B/RECV_B inserted; a plan already lowered is returned as is.

    The same rule as recv_before/send_after, tabulated per stage first (which hand-offs cross a
    rank boundary)."""
    if plan.is_lowered:
        return plan
    where = plan.stage_to_rank
    # each action's expansion, cached per stage map (plans of a sweep share most of their actions):
    # a row is then one C-level chain over its actions' expansions
    if len(_EXPANSIONS) > 64 or sum(map(len, _EXPANSIONS.values())) > 1 << 20:
        _EXPANSIONS.clear()
    cache = _EXPANSIONS.setdefault(where, {})
    rows = []
    for row in plan.ranks:
        parts = list(map(cache.get, row))
        if None in parts:
            f_in, f_out = _handoffs(where)
            for idx, a in enumerate(row):
                if parts[idx] is None:
                    parts[idx] = cache[a] = _expand(a, f_in, f_out)
        rows.append(tuple(chain.from_iterable(parts)))
    return Plan(plan.name, plan.num_ranks, plan.num_stages, plan.num_microbatches, plan.stage_to_rank, tuple(rows))
