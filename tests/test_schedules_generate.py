"""Generated plans over the issue's grid: they validate and meet the analytic anchors exactly."""
from fractions import Fraction

import pytest

from pipesim.errors import PipesimError
from pipesim.schedules import SCHEDULES, generate, unit_time, validate

PS = (1, 2, 3, 4, 8)
MS = tuple(range(1, 33))
VS = (1, 2, 4)


def allowed(name: str, P: int, M: int, V: int) -> bool:
    """The constraints each generator states (registry CONSTRAINTS), restated independently."""
    if name in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
        return V == 1
    if name == "interleaved":
        return V == 1 or M % P == 0
    if name == "looped-bfs":
        return True
    if name == "zb-v":
        return V == 2
    if name == "dualpipe-v":
        return V == 2 and M >= 2 * P
    raise AssertionError(f"test does not know schedule {name}")


def overall_bubble(a) -> Fraction:
    """Exact sum(idle) / (P * makespan); integer costs keep every time an integer."""
    return Fraction(int(sum(a.idle)), int(len(a.idle) * a.makespan))


def inner_gaps(plan, a) -> list[float]:
    """Per rank: idle time between its first and its last action."""
    out = []
    for r in range(plan.num_ranks):
        t0, t1 = a.span(r, plan)
        out.append((t1 - t0) - a.busy[r])
    return out


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_every_allowed_plan_validates_and_others_are_refused(name):
    built = 0
    for P in PS:
        for V in VS:
            for M in MS:
                if not allowed(name, P, M, V):
                    with pytest.raises(PipesimError, match="constraint"):
                        generate(name, P, M, V)
                    continue
                plan = generate(name, P, M, V)
                assert plan.num_stages == P * V and plan.num_ranks == P and plan.num_microbatches == M
                validate(plan)
                # each rank runs exactly its stages' F and backward work
                for r, row in enumerate(plan.ranks):
                    assert sum(a.kind == "F" for a in row) == len(plan.stages_of(r)) * M
                built += 1
    assert built > 0


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_gpipe_1f1b_bubble_is_exact(name):
    # Narayanan et al. SC'21 Sec. 2.2.1: idle share (p-1)/(m+p-1) with uniform stage costs.
    for P in PS:
        for M in MS:
            a = unit_time(generate(name, P, M), f=1, b=2)
            assert overall_bubble(a) == Fraction(P - 1, M + P - 1), (P, M)
            for r in range(P):  # every rank idles the same amount
                assert Fraction(int(a.idle[r]), int(a.makespan)) == Fraction(P - 1, M + P - 1)


def test_interleaved_bubble_divides_by_v():
    # Narayanan et al. SC'21 Sec. 2.2.2: with v chunks per rank the bubble shrinks v-fold:
    # (p-1)/(v*m + p-1) of the makespan, each chunk costing f (resp. b).
    checked = 0
    for P in PS:
        for V in VS:
            for M in range(P, 33, P):
                a = unit_time(generate("interleaved", P, M, V), f=1, b=2)
                assert overall_bubble(a) == Fraction(P - 1, V * M + P - 1), (P, M, V)
                checked += 1
    assert checked > 100


def test_interleaved_with_as_many_microbatches_as_ranks_runs_every_forward_first_only_in_legacy_megatron():
    # Megatron-LM forward_backward_pipelining_with_interleaving before Megatron-Core: "Run all forward
    # passes and then all backward passes if number of microbatches is just the number of pipeline
    # stages." (legacy_all_warmup)
    for P, V in ((2, 2), (4, 2), (4, 3)):
        plan = generate("interleaved", P, P, V, legacy_all_warmup=True)
        for row in plan.ranks:
            kinds = [a.kind for a in row]
            assert kinds == ["F"] * (P * V) + ["B"] * (P * V), (P, V)
    # Megatron-Core and torch's ScheduleInterleaved1F1B warm up 2(P-1-r) + (V-1)P chunks at M == P
    # too: the last rank alternates after its first chunk's P forwards, the first runs all of them
    rows = generate("interleaved", 4, 4, 2).ranks
    assert [a.kind for a in rows[3]][:6] == ["F"] * 4 + ["F", "B"]
    assert [a.kind for a in rows[0]] == ["F"] * 8 + ["B"] * 8
    row = generate("interleaved", 4, 8, 2).ranks[3]          # M > P: the steady phase alternates
    assert [a.kind for a in row][4:8] == ["F", "B", "F", "B"]
    with pytest.raises(PipesimError, match="unknown option"):
        generate("interleaved", 4, 4, 2, legacy_warmup=True)


def test_peak_inflight_gpipe_and_1f1b():
    for P in PS:
        for M in MS:
            g = unit_time(generate("gpipe", P, M))
            assert g.peak_inflight == (M,) * P
            f = unit_time(generate("1f1b", P, M))
            assert f.peak_inflight == tuple(min(P - r, M) for r in range(P))
            if M >= P:
                assert f.peak_inflight == tuple(P - r for r in range(P))


def test_zb_h1_bubble_is_a_third_of_1f1b_at_same_memory():
    # Qi et al. ICLR 2024 Sec. 2.1: with T_F = T_B(=I) = T_W, ZB-H1's bubble *size* (idle time per
    # rank) is (p-1)(T_F+T_B-T_W) = (p-1) against 1F1B's (p-1)(T_F+T_B+T_W) = 3(p-1). Checked for
    # M >= P (the handcrafted schedule assumes a full warm-up; below that there are too few W to
    # fill the drain). The bubble *fraction* is then smaller too, though not by exactly 3, since
    # ZB-H1's makespan also shrinks.
    for P in PS:
        for M in range(P, 33):
            zb = unit_time(generate("zb-h1", P, M), f=1, i=1, w=1)
            base = unit_time(generate("1f1b", P, M), f=1, b=2)
            for r in range(P):
                assert 3 * zb.idle[r] <= base.idle[r], (P, M, r)
            assert zb.bubble_fraction <= base.bubble_fraction
            assert zb.peak_inflight == base.peak_inflight
            if P > 1:
                assert zb.idle == (P - 1,) * P  # exactly the paper's (p-1)(F+I-W)


def test_zb_h2_is_a_parallelogram_once_m_reaches_2p_minus_1():
    # Bound: with F=I=W=1, rank 0's first I can start no earlier than 2P-1 (F0 takes P-1 steps to
    # reach the last rank, its I one step, then P-1 hops back), and before it rank 0 has nothing but
    # forwards to run (no W exists yet). Filling [0, 2P-1) without a gap takes 2P-1 forwards, so
    # M >= 2P-1 is necessary (rank r needs 2(P-r)-1). The test shows it is also sufficient for
    # this generator, and that below the bound rank 0 does idle.
    for P in PS:
        for M in MS:
            plan = generate("zb-h2", P, M)
            a = unit_time(plan, f=1, i=1, w=1)
            gaps = inner_gaps(plan, a)
            if M >= 2 * P - 1:
                assert gaps == [0] * P, (P, M, gaps)
                assert a.peak_inflight == tuple(2 * (P - r) - 1 for r in range(P))
                h1 = unit_time(generate("zb-h1", P, M), f=1, i=1, w=1)
                assert sum(a.peak_inflight) >= sum(h1.peak_inflight)
                if P > 1:
                    assert a.peak_inflight[0] > h1.peak_inflight[0]
            elif P > 1:
                assert gaps[0] > 0, (P, M)


def test_zb_v_fills_and_keeps_1f1b_memory():
    # Qi et al. 2024 (controllable memory), ZB-V: every rank holds at most 2P chunk activations
    # (= P whole stages, 1F1B's rank-0 peak) and, once M >= 2P, no rank idles inside its span.
    for P in PS:
        for M in range(2 * P, 33):
            plan = generate("zb-v", P, M, 2)
            a = unit_time(plan, f=1, i=1, w=1)
            assert max(a.peak_inflight) <= 2 * P
            assert inner_gaps(plan, a) == [0] * P, (P, M)


def test_dualpipe_v_places_overlap_pairs_adjacently():
    plan = generate("dualpipe-v", 4, 10, 2)
    row = plan.ranks[0]
    # the steady phase alternates F of one chunk with the backward of the other chunk
    pairs = [(a, b) for a, b in zip(row, row[1:]) if a.kind == "F" and b.kind == "B" and a.stage != b.stage]
    assert len(pairs) >= 2 * (10 - 2 * 4 + 1) - 1
    assert set(plan.stages_of(0)) == {0, 7}


def test_cost_hints_change_zero_bubble_placement():
    # The placer times candidates with the hints, so a cheap W (or a dear F) moves actions; the
    # order built for the true costs must validate and never lose to the unit-cost order timed
    # under those same true costs.
    for hints in (dict(f=1, i=1, w=0.25), dict(f=2, i=1, w=1)):
        for name in ("zb-h1", "zb-h2"):
            unit_order = generate(name, 4, 8)
            tuned = generate(name, 4, 8, **hints)
            validate(tuned)
            assert tuned.ranks != unit_order.ranks
            assert unit_time(tuned, **hints).makespan <= unit_time(unit_order, **hints).makespan


def test_recompute_option_inserts_r_before_each_backward():
    plan = generate("1f1b", 3, 4, recompute=True)
    validate(plan)
    for row in plan.ranks:
        for i, x in enumerate(row):
            if x.kind == "B":
                assert row[i - 1].kind == "R" and row[i - 1].microbatch == x.microbatch
    # recompute adds one f per backward to every rank: busy 4*(1+2+1) per rank
    assert unit_time(plan, f=1, b=2).busy == (16, 16, 16)


def test_microbatch_groups_follow_megatrons_schedule_table():
    # Megatron-Core schedules.py, the comment above get_schedule_table: "PP2 N3M5 with VP2" runs
    # micro-batches 0 1 2 0 1 2 3 4 3 4 on chunks 0 0 0 1 1 1 0 0 1 1.
    from pipesim.schedules.loop import group_table
    assert group_table(5, 2, 3) == list(zip((0, 1, 2, 0, 1, 2, 3, 4, 3, 4), (0, 0, 0, 1, 1, 1, 0, 0, 1, 1)))
    plan = generate("interleaved", 2, 5, 2, group=3)
    forwards = [(a.microbatch, a.stage // 2) for a in plan.ranks[0] if a.kind == "F"]
    assert forwards == group_table(5, 2, 3)
    # N = P is the default schedule, action for action
    assert generate("interleaved", 4, 12, 3, group=4) == generate("interleaved", 4, 12, 3)


def test_grouped_interleaving_keeps_the_bubble_and_holds_n_per_chunk_in_warm_up():
    # A group N >= P keeps the interleaved bubble (p-1)/(v*m + p-1) and lengthens rank r's warm-up
    # to 2(p-r-1) + (v-1)N forwards (Megatron-Core get_pp_rank_microbatches), one more in flight.
    checked = 0
    for P in (2, 3, 4):
        for V in (2, 3):
            for M in range(P, 4 * P + 1):
                for N in range(P, M + 1):
                    if 0 < M % N < P or M == P:
                        continue
                    plan = generate("interleaved", P, M, V, group=N)
                    validate(plan)
                    a = unit_time(plan, f=1, b=2)
                    assert overall_bubble(a) == Fraction(P - 1, V * M + P - 1), (P, M, V, N)
                    for r in range(P):
                        assert a.peak_inflight[r] == min(2 * (P - r - 1) + (V - 1) * N + 1, V * M), (P, M, V, N, r)
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("P, M, V, group, needle", [
    (4, 10, 2, 3, r"must lie in \[P=4, M=10\]"),
    (4, 10, 2, 11, r"must lie in \[P=4, M=10\]"),
    (4, 10, 2, 4, "last group of 2 micro-batches"),
    (4, 8, 1, 4, None),                                  # V = 1 is 1F1B: no groups to form
])
def test_microbatch_group_bounds_are_megatrons(P, M, V, group, needle):
    if needle is None:
        assert generate("interleaved", P, M, V, group=group).ranks == generate("1f1b", P, M).ranks
        return
    with pytest.raises(PipesimError, match=needle):
        generate("interleaved", P, M, V, group=group)


def test_a_group_is_refused_by_other_schedules_and_must_be_a_count():
    with pytest.raises(PipesimError, match="interleaved schedule only"):
        generate("1f1b", 4, 8, group=4)
    with pytest.raises(PipesimError, match="integer >= 1"):
        generate("interleaved", 4, 8, 2, group=2.5)
