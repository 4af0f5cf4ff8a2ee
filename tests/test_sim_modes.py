"""Representative vs full mode, placement on nodes, heterogeneity."""
import pytest

import pipesim
from pipesim.errors import ScenarioError
from _sim_helpers import tiny, uniform

SYMMETRIC = [
    dict(P=2, M=4, data=2, tensor=2, nodes=2),
    dict(P=2, M=4, data=2, tensor=2, nodes=1, extra_training={"zero_stage": 1}),
    dict(P=4, M=8, data=2, tensor=1, nodes=2, schedule="zb-h1"),
    dict(P=2, M=4, V=2, data=4, tensor=1, nodes=2, schedule="interleaved",
         extra_training={"zero_stage": 3, "grad_bucket_MB": 0.01}),
    dict(P=2, M=2, data=2, tensor=2, nodes=4, gpus_per_node=2, inter_GBps=0.1,
         extra_training={"recompute": "selective", "activation_compression_bits": 8}),
]


@pytest.mark.parametrize("kw", SYMMETRIC)
def test_representative_and_full_agree_on_symmetric_layouts(kw):
    s = tiny(**kw)
    rep = pipesim.simulate(s, trace=False)
    full = pipesim.simulate(s, mode="full", trace=False)
    assert full.step_time_s == rep.step_time_s
    assert full.peak_memory_bytes == rep.peak_memory_bytes
    assert full.bubble_fraction == pytest.approx(rep.bubble_fraction)
    assert len(rep.ranks) == s.parallel.pipeline
    assert len(full.ranks) == s.num_gpus
    # every GPU of a pipeline rank matches its representative
    by_stage = {r["stage"]: r for r in rep.ranks}
    for r in full.ranks:
        assert r["compute_busy_s"] == by_stage[r["stage"]]["compute_busy_s"]


def test_trace_off_gives_the_same_metrics():
    s = tiny(P=2, M=4, data=2, nodes=2)
    a = pipesim.simulate(s, trace=True)
    b = pipesim.simulate(s, trace=False)
    assert not b.events and a.events
    da, db = a.to_dict(include_trace=False), b.to_dict(include_trace=False)
    assert (da.pop("engine"), db.pop("engine")) == ("simpy", "dag")    # traces need the engine
    assert da == db


def test_pipeline_hop_across_nodes_uses_the_inter_node_link():
    # pipeline outermost (Megatron tp-dp-pp): with 1 GPU per node each hop crosses the NIC
    kw = dict(P=2, M=1, schedule="gpipe", bw_GBps=1.0)
    one_node = tiny(**kw, nodes=1)
    two_nodes = tiny(**kw, nodes=2, inter_GBps=0.5)
    r1 = pipesim.simulate(one_node, stage_costs=uniform(one_node, send=0.5e9))
    r2 = pipesim.simulate(two_nodes, stage_costs=uniform(two_nodes, send=0.5e9))
    assert r1.step_time_s == pytest.approx(6 + 2 * 0.5)
    assert r2.step_time_s == pytest.approx(6 + 2 * 1.0)


def test_rank_order_changes_what_crosses_nodes():
    # data 2, pipeline 2 on 2 nodes of 2: tp-dp-pp puts the DP pair in a node (pipeline crosses);
    # tp-pp-dp puts the pipeline pair in a node
    base = dict(P=2, M=1, data=2, nodes=2, schedule="gpipe", bw_GBps=1.0, inter_GBps=0.25)
    a = tiny(**base)
    b = tiny(**base, extra_parallel={"rank_order": "tp-pp-dp"})
    ra = pipesim.simulate(a, stage_costs=uniform(a, send=0.5e9))
    rb = pipesim.simulate(b, stage_costs=uniform(b, send=0.5e9))
    assert ra.step_time_s == pytest.approx(6 + 2 * 2.0)
    assert rb.step_time_s == pytest.approx(6 + 2 * 0.5)


def test_straggler_slows_its_stage():
    het = {"rank_speed": {1: 0.5}}          # global rank 1 = pipeline rank 1 (tp=dp=1) at half speed
    s = tiny(P=2, M=1, schedule="gpipe", heterogeneity=het)
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2))
    assert r.step_time_s == pytest.approx(1 + 2 + 4 + 2)
    assert [x["compute_busy_s"] for x in r.ranks] == pytest.approx([3.0, 6.0])


def test_straggler_in_one_replica_gates_data_parallel_step():
    # data 2: a slow GPU in replica 1 slows the whole step in full mode (DP all-reduce waits for it);
    # representative mode assumes the slowest member everywhere, the same step here
    het = {"rank_speed": {3: 0.5}}
    s = tiny(P=2, M=2, data=2, heterogeneity=het)
    base = tiny(P=2, M=2, data=2)
    costs = uniform(s, f=1, b=2, grad_bytes=1e6)
    full = pipesim.simulate(s, mode="full", stage_costs=costs)
    rep = pipesim.simulate(s, stage_costs=costs)
    fast = pipesim.simulate(base, mode="full", stage_costs=uniform(base, f=1, b=2, grad_bytes=1e6))
    assert full.step_time_s > fast.step_time_s
    assert full.step_time_s == pytest.approx(rep.step_time_s)


def test_slow_node_link_override():
    kw = dict(P=2, M=1, schedule="gpipe", nodes=2, bw_GBps=1.0)
    slow = tiny(**kw, heterogeneity={"node_inter_bandwidth_GBps": {1: 0.25}})
    r = pipesim.simulate(slow, stage_costs=uniform(slow, send=0.5e9), mode="full")
    # a transfer between nodes 0 and 1 runs at the slower end: 0.5e9 / 0.25e9 = 2 s each way
    assert r.step_time_s == pytest.approx(6 + 2 * 2.0)
    rep = pipesim.simulate(slow, stage_costs=uniform(slow, send=0.5e9))
    assert rep.step_time_s == pytest.approx(r.step_time_s)


def test_unknown_mode_is_a_clear_error():
    with pytest.raises(ScenarioError, match="representative"):
        pipesim.simulate(tiny(), mode="everything")
