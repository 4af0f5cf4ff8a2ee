"""Simulated bubble vs the schedules' unit-time analysis, and memory tied to the schedule."""
import pytest

import pipesim
from pipesim.schedules import SCHEDULES, generate, unit_time
from _sim_helpers import tiny, uniform

P, M = 4, 8
LAYOUTS = {"gpipe": 1, "1f1b": 1, "interleaved": 2, "looped-bfs": 2, "zb-h1": 1, "zb-h2": 1, "zb-v": 2,
           "dualpipe-v": 2}


def test_every_registered_schedule_is_covered():
    assert set(SCHEDULES) <= set(LAYOUTS)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_bubble_equals_unit_time_with_free_comm(name):
    V = LAYOUTS[name]
    plan = generate(name, stages=P, microbatches=M, virtual=V)
    ut = unit_time(plan, f=1, b=2, i=1, w=1)
    s = tiny(P=P, M=M, V=V, schedule=name)
    r = pipesim.simulate(s, plan=plan, stage_costs=uniform(s, f=1, b=2, i=1, w=1))
    assert r.step_time_s == pytest.approx(ut.makespan)
    assert r.bubble_fraction == pytest.approx(ut.bubble_fraction)
    assert [x["bubble_fraction"] for x in r.ranks] == pytest.approx(list(ut.rank_bubble_fraction))


def test_1f1b_bubble_is_textbook_and_interleaving_divides_it():
    s = tiny(P=P, M=M)
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2))
    assert r.bubble_fraction == pytest.approx((P - 1) / (M + P - 1))
    # interleaving with v chunks of 1/v the work: the bubble term (p-1)(f+b)/v (Narayanan SC'21 Sec. 2.2)
    s2 = tiny(P=P, M=M, V=2, schedule="interleaved")
    r2 = pipesim.simulate(s2, stage_costs=uniform(s2, f=0.5, b=1.0))
    assert r2.step_time_s == pytest.approx(M * 3 + (P - 1) * 3 / 2)


def _peak_act(report, rank=0):
    return max(m.by_category["activations"] for m in report.memory if m.rank == rank)


def test_gpipe_holds_m_activations_1f1b_holds_p():
    A = 1e9
    peaks = {}
    for name in ("gpipe", "1f1b"):
        s = tiny(P=P, M=M, schedule=name)
        r = pipesim.simulate(s, stage_costs=uniform(s, act=A))
        peaks[name] = _peak_act(r)
        assert r.peak_memory_bytes == peaks[name]          # no static, no buffers (free comm)
    assert peaks["gpipe"] == M * A
    assert peaks["1f1b"] == P * A
    assert peaks["gpipe"] / peaks["1f1b"] == M / P


def test_zb_h2_holds_more_than_zb_h1():
    A = 1e9
    out = {}
    for name in ("zb-h1", "zb-h2", "1f1b"):
        s = tiny(P=P, M=M, schedule=name)
        out[name] = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, i=1, w=1, act=A))
    assert _peak_act(out["zb-h2"]) > _peak_act(out["zb-h1"])
    # ZB-H1 keeps 1F1B's in-flight limit; the W-retained share can only add to it, never P+1 full sets
    assert P * A <= _peak_act(out["zb-h1"]) < (P + 1) * A
    assert max(out["zb-h2"].step_time_s, out["zb-h1"].step_time_s) < out["1f1b"].step_time_s


def test_full_recompute_keeps_only_the_checkpoints():
    # full recompute keeps each layer's input, s*b*h elements per layer (Korthikanti et al. 2022
    # Sec. 4.3), for every micro-batch in flight (2 on rank 0 of a 2-stage 1F1B); the embedding
    # (outside the recomputed layers) keeps its own saved tensors.
    from pipesim.costs.layers import embedding_ops
    base = dict(P=2, M=4, schedule="1f1b")
    none = pipesim.simulate(tiny(**base))
    s = tiny(**base, extra_training={"recompute": "full"})
    full = pipesim.simulate(s)
    seq, h, elem, layers = 32, 64, 2, 2
    embedding = sum(o.saved_bytes for o in embedding_ops(s))
    assert _peak_act(full, rank=0) == pytest.approx(2 * (layers * seq * h * elem + embedding))
    assert _peak_act(full, rank=0) < _peak_act(none, rank=0) / 4
    # the recomputed backward needs a working set while it runs, and costs time
    assert max(m.by_category["recompute"] for m in full.memory) > 0
    assert full.step_time_s > none.step_time_s


def test_a_larger_microbatch_group_holds_more_chunks_in_flight_at_the_same_bubble():
    # training.microbatch_group_size N (Megatron-Core microbatch_group_size_per_vp_stage): rank 0's
    # warm-up is 2(P-1) + (V-1)N chunk-forwards, one more in flight; the analytic engine agrees.
    from pipesim.whatif.analytic import analytic_report
    A, M12 = 1e9, 12
    out = {}
    for n in (None, 6, 12):
        extra = {"microbatch_group_size": n} if n else {}
        s = tiny(P=P, M=M12, V=2, schedule="interleaved", extra_training=extra)
        out[n] = pipesim.simulate(s, stage_costs=uniform(s, f=0.5, b=1.0, act=A))
        held = min(2 * (P - 1) + (2 - 1) * (n or P) + 1, 2 * M12)
        assert _peak_act(out[n]) == pytest.approx(held * A), n
        assert out[n].step_time_s == pytest.approx(M12 * 3 + (P - 1) * 3 / 2)
        real = tiny(P=P, M=M12, V=2, schedule="interleaved", extra_training=extra)
        sim, ana = pipesim.simulate(real), analytic_report(real)
        assert ana["peak_memory_bytes"] == pytest.approx(sim.peak_memory_bytes, rel=0.05), n


@pytest.mark.parametrize("sets, needle", [
    (["training.microbatch_group_size=3"], r"must lie in \[P=4, M=12\]"),
    (["training.microbatch_group_size=5"], "last group of 2 micro-batches"),
    (["training.microbatch_group_size=6", "training.schedule=1f1b"], "interleaved schedule"),
    (["training.microbatch_group_size=0"], "training.microbatch_group_size"),
])
def test_a_bad_microbatch_group_is_one_line_naming_the_key(sets, needle):
    from pipesim.errors import ScenarioError
    from pipesim.scenario.load import load_scenario
    base = tiny(P=P, M=12, V=2, schedule="interleaved")
    with pytest.raises(ScenarioError, match=needle) as err:
        load_scenario(base, sets)
    assert "training.microbatch_group_size" in str(err.value) and "\n" not in str(err.value)


def test_the_emulator_runs_the_grouped_plan():
    from pipesim.emulator.worker import plan_for
    s = tiny(P=2, M=6, V=2, schedule="interleaved", extra_training={"microbatch_group_size": 3})
    ranks = plan_for(s).ranks
    first = [(a.microbatch, a.stage // 2) for a in ranks[0] if a.kind == "F"][:6]
    assert first == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
