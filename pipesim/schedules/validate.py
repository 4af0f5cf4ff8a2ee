"""validate(plan): structural rules, then a deadlock walk of the lowered plan. Errors carry the marked grid."""
from __future__ import annotations

from itertools import repeat
from operator import itemgetter

from pipesim.errors import PlanError
from pipesim.schedules.actions import Action
from pipesim.schedules.deps import backward_of, compute_deps
from pipesim.schedules.grid import format_grid
from pipesim.schedules.lower import lower, peer_of, recv_before, send_after
from pipesim.schedules.plan import Plan

# Communication model of the deadlock walk.
#  buffered   : a SEND completes at once (the tensor is queued), a RECV waits until its SEND ran.
#               This is torch's runtime: non-blocking isend/irecv, the wait sits at the RECV.
#  rendezvous : a SEND and its RECV complete together, only when both ranks have reached them
#               (blocking send/recv, e.g. unbatched NCCL p2p); stricter, finds more deadlocks.
MODES = ("buffered", "rendezvous")


def plan_error(plan: Plan, rule: str, detail: str, marks: list[tuple[int, int]]) -> PlanError:
    grid = format_grid(plan.ranks, marks)
    return PlanError(f"plan {plan.name!r} breaks rule '{rule}': {detail}\n{grid}")


def _where(plan: Plan) -> dict[Action, tuple[int, int]]:
    return {a: (r, i) for r, row in enumerate(plan.ranks) for i, a in enumerate(row)}


def check_structure(plan: Plan) -> dict:
    """Shape, ranges, stage placement and uniqueness of every action; returns where each action is
    (action -> (rank, position))."""
    P, S, M = plan.num_ranks, plan.num_stages, plan.num_microbatches
    if P < 1 or M < 1 or S < 1:
        raise PlanError(f"plan {plan.name!r}: needs ranks, stages and micro-batches >= 1, got P={P} S={S} M={M}")
    if len(plan.ranks) != P:
        raise PlanError(f"plan {plan.name!r}: has {len(plan.ranks)} rank rows but num_ranks={P}")
    if len(plan.stage_to_rank) != S:
        raise PlanError(f"plan {plan.name!r}: stage_to_rank has {len(plan.stage_to_rank)} entries but num_stages={S}")
    for s, r in enumerate(plan.stage_to_rank):
        if not 0 <= r < P:
            raise PlanError(f"plan {plan.name!r}: stage {s} maps to rank {r}, outside 0..{P - 1}")
    fast = _structure_fast(plan)
    if fast is not None:
        return fast
    seen: dict[Action, tuple[int, int]] = {}
    where = plan.stage_to_rank
    for r, row in enumerate(plan.ranks):
        for i, a in enumerate(row):
            stage, _, mb = a
            if not 0 <= stage < S:
                raise plan_error(plan, "stage in range", f"{a} names stage {stage}, plan has stages 0..{S - 1}", [(r, i)])
            if not 0 <= mb < M:
                raise plan_error(plan, "micro-batch in range", f"{a} names micro-batch {mb}, plan has 0..{M - 1}", [(r, i)])
            if where[stage] != r:
                raise plan_error(plan, "stage on its rank",
                                 f"{a} is on rank {r} but stage {stage} belongs to rank {where[stage]}", [(r, i)])
            if a in seen:
                raise plan_error(plan, "each action once", f"{a} appears twice", [seen[a], (r, i)])
            seen[a] = (r, i)
    return seen


def _structure_fast(plan: Plan) -> dict | None:
    """check_structure's answer computed with C-level scans when the plan passes every rule
    (every stage on its own rank, micro-batches in range, no action twice); None otherwise, and
    the rule-by-rule loop finds and reports the first offence."""
    M = plan.num_microbatches
    mine: dict = {}
    for s, r in enumerate(plan.stage_to_rank):
        mine.setdefault(r, set()).add(s)
    seen: dict = {}
    n = 0
    for r, row in enumerate(plan.ranks):
        if not row:
            continue
        if not mine.get(r, set()).issuperset(map(_STAGE, row)):
            return None
        mbs = list(map(_MB, row))
        if min(mbs) < 0 or max(mbs) >= M:
            return None
        seen.update(zip(row, zip(repeat(r), range(len(row)))))
        n += len(row)
    return seen if len(seen) == n else None


_STAGE, _MB = itemgetter(0), itemgetter(2)


def check_complete(plan: Plan, where: dict | None = None) -> None:
    """Every (stage, micro-batch) has one F and one backward: B, or I and W. `where`: the plan's
    action -> (rank, position) map if the caller has it."""
    where = _where(plan) if where is None else where
    for s in range(plan.num_stages):
        r = plan.stage_to_rank[s]
        for m in range(plan.num_microbatches):
            # plain tuples hash and compare as the Actions they spell: the common case needs no Action
            if (s, "F", m) in where and ((s, "B", m) in where) != ((s, "I", m) in where) and \
                    ((s, "I", m) in where) == ((s, "W", m) in where):
                continue
            f, b, i, w = (Action(s, k, m) for k in "FBIW")
            if f not in where:
                # mark the rank's first action touching this (stage, mb), else nothing to mark
                marks = [where[x] for x in (b, i, w) if x in where][:1]
                raise plan_error(plan, "every stage runs F of every micro-batch", f"{f} is missing on rank {r}", marks)
            if b in where and (i in where or w in where):
                raise plan_error(plan, "backward is B or I+W, not both", f"{b} and the split {i}/{w} both present",
                                 [where[x] for x in (b, i, w) if x in where])
            if b not in where and i not in where:
                raise plan_error(plan, "every forward has a backward",
                                 f"{f} has no backward ({b}, or {i} with {w}) on rank {r}", [where[f]])
            if (i in where) != (w in where):
                have, lack = (i, w) if i in where else (w, i)
                raise plan_error(plan, "I and W come in pairs", f"{have} has no {lack}", [where[have]])
    for a, (r, pos) in where.items():
        if a.kind == "R" and backward_of(a.stage, a.microbatch, where.keys()) not in where:
            raise plan_error(plan, "recompute precedes a backward", f"{a} has no backward to feed", [(r, pos)])


def check_rank_order(plan: Plan) -> None:
    """Dependencies between actions on the same rank must appear in order (else the rank waits on itself)."""
    where = _where(plan)
    present = frozenset(a for a in where if a.is_compute)
    for r, row in enumerate(plan.ranks):
        for i, a in enumerate(row):
            if not a.is_compute:
                continue
            for d in compute_deps(a, plan.num_stages, present):
                dr, di = where.get(d, (None, None))
                if dr == r and di > i:
                    raise plan_error(plan, "dependencies on one rank run in order",
                                     f"{a} at step {i} needs {d}, which rank {r} only runs at step {di}", [(r, i), (r, di)])


def check_comm(plan: Plan) -> None:
    """A lowered plan's SEND/RECV match the cross-rank dependencies exactly and sit beside their compute."""
    where = _where(plan)
    expected: dict[Action, Action] = {}  # comm -> compute it belongs to
    for row in plan.ranks:
        for a in row:
            if a.is_compute:
                for c in (recv_before(a, plan), send_after(a, plan)):
                    if c is not None:
                        expected[c] = a
    for c, (r, i) in where.items():
        if c.is_comm and c not in expected:
            raise plan_error(plan, "comm matches a cross-rank dependency", f"{c} pairs with no cross-rank transfer", [(r, i)])
    for c, a in expected.items():
        ar, ai = where[a]
        if c not in where:
            side = "before" if c.kind.startswith("RECV") else "after"
            raise plan_error(plan, "every cross-rank dependency has its SEND and RECV",
                             f"{a} needs {c} {side} it on rank {ar}", [(ar, ai)])
        cr, ci = where[c]
        if c.kind.startswith("RECV") and ci > ai:
            raise plan_error(plan, "RECV before its consumer", f"{c} comes after {a}", [(cr, ci), (ar, ai)])
        if c.kind.startswith("SEND") and ci < ai:
            raise plan_error(plan, "SEND after its producer", f"{c} comes before {a}", [(cr, ci), (ar, ai)])


def walk(lowered: Plan, mode: str = "buffered") -> list[Action]:
    """Execute a lowered plan with blocking communication; return the global completion order.

    Raises PlanError with every rank's first blocked action marked if no rank can move (never hangs:
    each sweep either completes an action or ends the walk).
    """
    if mode not in MODES:
        raise PlanError(f"deadlock check mode {mode!r} unknown; expected one of {', '.join(MODES)}")
    plan = lowered
    present = frozenset(a for row in plan.ranks for a in row if a.is_compute)
    done: set[Action] = set()
    pc = [0] * plan.num_ranks
    order: list[Action] = []

    def head(r: int) -> Action | None:
        return plan.ranks[r][pc[r]] if pc[r] < len(plan.ranks[r]) else None

    def local_ready(a: Action) -> bool:
        """Everything `a` needs that lives on its own rank (or arrived through its RECV) is done."""
        if a.is_compute:
            recv = recv_before(a, plan)
            if recv is not None and recv not in done:
                return False
            here = plan.rank_of(a.stage)
            return all(d in done for d in compute_deps(a, plan.num_stages, present) if plan.rank_of(d.stage) == here)
        if a.kind.startswith("SEND"):
            kind = "F" if a.kind == "SEND_F" else None
            src = Action(a.stage, "F", a.microbatch) if kind else backward_of(a.stage, a.microbatch, present)
            return src in done
        return True  # RECV: its readiness is the peer's business

    def finish(r: int, a: Action) -> None:
        done.add(a)
        order.append(a)
        pc[r] += 1

    progress = True
    while progress:
        progress = False
        for r in range(plan.num_ranks):
            while (a := head(r)) is not None:
                if not local_ready(a):
                    break
                if a.is_comm:
                    peer = peer_of(a)
                    q = plan.rank_of(peer.stage)
                    if mode == "buffered":
                        if a.kind.startswith("RECV") and peer not in done:
                            break
                    else:  # rendezvous: both halves must be at the head of their ranks and ready
                        if head(q) != peer or not local_ready(peer):
                            break
                        finish(q, peer)
                finish(r, a)
                progress = True
    if all(head(r) is None for r in range(plan.num_ranks)):
        return order
    marks, why = [], []
    for r in range(plan.num_ranks):
        a = head(r)
        if a is None:
            continue
        marks.append((r, pc[r]))
        if a.is_comm:
            peer = peer_of(a)
            why.append(f"rank {r} blocked at {a} (waits for {peer} on rank {plan.rank_of(peer.stage)})")
        else:
            need = [d for d in compute_deps(a, plan.num_stages, present) if d not in done]
            recv = recv_before(a, plan)
            if recv is not None and recv not in done:
                need.insert(0, recv)
            why.append(f"rank {r} blocked at {a} (waits for {', '.join(map(str, need))})")
    raise plan_error(plan, f"no deadlock ({mode} send/recv)", "; ".join(why), marks)


def validate(plan: Plan, mode: str = "buffered", deadlock: bool = True) -> None:
    """Raise PlanError (message: the rule, the offending action, the marked step x rank grid) or return None.

    deadlock=False skips the rank-order and deadlock walks: for callers that execute the plan
    anyway and report a deadlock with the same buffered semantics (the simulator does)."""
    where = check_structure(plan)
    if plan.is_lowered:
        check_complete(plan.compute_only())
    else:
        check_complete(plan, where)
    if not deadlock:
        return
    check_rank_order(plan)
    if plan.is_lowered:
        check_comm(plan)
    walk(lower(plan), mode)
