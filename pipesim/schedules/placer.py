"""Time-based greedy placement (the heuristic behind the zero-bubble schedules).

Qi et al., ICLR 2024, Sec. 3.1 (automatic scheduling heuristic): each rank, whenever it is free,
runs a ready backward first (it unblocks the previous stage), else a forward if its memory limit
allows, else a deferred W to fill what would otherwise be a bubble. Times come from the relative
cost hints, so the order adapts to f, i, w; the Plan keeps only the order.

Cost: the next action overall is the earliest start over all ranks (ties: lowest rank). Placing an
action of stage s changes only what its own rank and the ranks of stages s-1 and s+1 can start
(end times of s feed only those), so each rank's best next action is cached and recomputed for
those three ranks alone, and the earliest is taken from a heap: O(log P) per action instead of a
rescan of every rank's candidates, i.e. near-linear in ranks x micro-batches.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from pipesim.errors import PlanError
from pipesim.schedules.actions import Action


# Action(s, kind, m) without the NamedTuple constructor's Python-level __new__ (the placer makes one
# per placed action)
new_action = tuple.__new__


def place(
    num_ranks: int,
    num_microbatches: int,
    stage_to_rank: Sequence[int],
    cost: dict[str, float],
    inflight_limit: Sequence[int],
    split_backward: bool = True,
    pending_w_limit: Sequence[int] | None = None,
) -> list[list[Action]]:
    """Per-rank action orders.

    inflight_limit[r]: most (stage, mb) with F started and I/B not done (activation memory).
    pending_w_limit[r]: most deferred W at once; at the limit the oldest W runs before anything else.
    """
    P, M, S = num_ranks, num_microbatches, len(stage_to_rank)
    bkind = "I" if split_backward else "B"
    local = [[s for s in range(S) if stage_to_rank[s] == r] for r in range(P)]
    next_f = [0] * S
    next_b = [0] * S
    end_f = [[None] * M for _ in range(S)]      # end time of F(s, m), None until placed
    end_b = [[None] * M for _ in range(S)]      # end time of the backward (B or I) of (s, m)
    pending_w: list[deque[Action]] = [deque() for _ in range(P)]
    inflight = [0] * P
    last = ["I"] * P  # last of F / backward run: the two alternate in steady state, as in 1F1B
    free = [0.0] * P
    rows: list[list[Action]] = [[] for _ in range(P)]
    remaining = S * M * (3 if split_backward else 2)  # F, I, W (or F, B) per (stage, micro-batch)
    cf, cb, cw = cost["F"], cost[bkind], cost.get("W", 0.0)

    pwl = pending_w_limit
    # ((priority + 1)·S + S-1-stage)·M for priority 0 and 1: the candidate keys below, less the micro-batch
    key_base = [[((p + 1) * S + S - 1 - s) * M for s in range(S)] for p in (0, 1)]

    def best(r: int):
        """(start time, (stage, kind, micro-batch)) rank r would run next, or None. Candidates are
        ranked by (priority, -stage, micro-batch) among those ready by the start time, priority 0
        best; the triple is packed into one integer key ((priority + 1)·S + S-1-stage)·M + micro-batch.
        The start time is max(free, earliest ready): if some candidate is ready by `free`, the pick
        is the best of those; else only the candidates ready at the earliest time compete. One pass
        keeps both bests (no candidate list)."""
        wq = pending_w[r]
        wfull = pwl is not None and len(wq) > pwl[r]
        kb = key_base[1 if last[r] == bkind else 0]
        kf = key_base[1 if last[r] == "F" else 0]
        can_f = inflight[r] < inflight_limit[r]
        free_r = free[r]
        now = None            # best candidate ready by free_r: (key, kind, stage, mb)
        tmin = early = None   # earliest ready time among the others, and the best candidate at it
        for s in local[r]:
            m = next_b[s]
            if m < next_f[s] and not wfull:
                ready = end_f[s][m]
                if s < S - 1:
                    e = end_b[s + 1][m]
                    ready = None if e is None else (e if e > ready else ready)
                if ready is not None:
                    key = kb[s] + m
                    if ready <= free_r:
                        if now is None or key < now[0]:
                            now = (key, bkind, s, m)
                    elif tmin is None or ready < tmin or (ready == tmin and key < early[0]):
                        tmin, early = ready, (key, bkind, s, m)
            m = next_f[s]
            if can_f and m < M:
                ready = end_f[s - 1][m] if s > 0 else 0.0
                if ready is not None:
                    key = kf[s] + m
                    if ready <= free_r:
                        if now is None or key < now[0]:
                            now = (key, "F", s, m)
                    elif tmin is None or ready < tmin or (ready == tmin and key < early[0]):
                        tmin, early = ready, (key, "F", s, m)
        if wq:
            w = wq[0]
            ready = end_b[w.stage][w.microbatch]
            key = ((0 if wfull else 3) * S + S - 1) * M + w.microbatch
            if ready <= free_r:
                if now is None or key < now[0]:
                    now = (key, "W", w.stage, w.microbatch)
            elif tmin is None or ready < tmin or (ready == tmin and key < early[0]):
                tmin, early = ready, (key, "W", w.stage, w.microbatch)
        if now is not None:
            return free_r, now
        if early is None:
            return None
        return tmin, early

    heap: list = []
    version = [0] * P
    cached: list = [None] * P

    def refresh(r: int) -> None:
        version[r] += 1
        cached[r] = best(r)
        if cached[r] is not None:
            heapq.heappush(heap, (cached[r][0], r, version[r]))

    for r in range(P):
        refresh(r)
    while remaining:
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)                  # stale entry of a rank refreshed since
        if not heap:  # cannot happen for limits >= 1; guard so a bad limit fails loudly, not silently
            raise PlanError(f"placement stuck with {remaining} actions left; in-flight limits {list(inflight_limit)} too small")
        t, r, _ = heapq.heappop(heap)
        _, kind, s, m = cached[r][1]
        a = new_action(Action, (s, kind, m))
        done = t + (cf if kind == "F" else cb if kind == bkind else cw)
        free[r] = done
        rows[r].append(a)
        remaining -= 1
        if kind != "W":
            last[r] = kind
        if kind == "F":
            end_f[s][m] = done
            next_f[s] += 1
            inflight[r] += 1
        elif kind == bkind:
            end_b[s][m] = done
            next_b[s] += 1
            inflight[r] -= 1
            if kind == "I":
                pending_w[r].append(new_action(Action, (s, "W", m)))
        else:
            pending_w[r].popleft()
        refresh(r)
        # Another rank's best changes only if it was waiting for exactly this end time: the F of
        # (s+1, m) for a forward, the backward of (s-1, m) for a backward.
        if kind == "F" and s < S - 1 and next_f[s + 1] == m:
            q = stage_to_rank[s + 1]
            if q != r:
                refresh(q)
        elif kind == bkind and s > 0 and next_b[s - 1] == m and m < next_f[s - 1]:
            q = stage_to_rank[s - 1]
            if q != r:
                refresh(q)
    return rows
