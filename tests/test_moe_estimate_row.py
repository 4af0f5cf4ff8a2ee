"""`pipesim estimate` on an MoE model shows the layer's expert-parallel all-to-alls as a row of
their own (report/estimate.py a2a_row): they are the layer's largest communication and no op
carries them."""
from pipesim import load_scenario
from pipesim.costs.layers import shapes_of
from pipesim.costs.moe import a2a_costs
from pipesim.report.estimate import estimate


def test_the_moe_layer_lists_its_all_to_alls_and_counts_them_in_its_totals():
    s = load_scenario("scenarios/qwen3-30b-a3b-16xh100.yaml")
    est = estimate(s)
    (row,) = [r for r in est["rows"] if r["op"] == "ep_all_to_all"]
    a = a2a_costs(s, shapes_of(s))
    assert row["t_comm_fwd_s"] == a.fwd > 0 and row["comm_bytes_bwd"] == a.bytes_bwd > 0
    layer = [r for r in est["rows"] if r["block"] == "layer"]
    assert est["per_layer"]["t_comm_fwd_s"] == sum(r["t_comm_fwd_s"] for r in layer) >= a.fwd
    dense = load_scenario("scenarios/gpt3-175b-1024xa100.yaml")
    assert not [r for r in estimate(dense)["rows"] if r["op"] == "ep_all_to_all"]
