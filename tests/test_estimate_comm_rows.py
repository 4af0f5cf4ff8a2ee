"""`pipesim estimate` shows the communication a layer does as a whole, which no op carries, as rows
of their own (report/estimate.py): an MoE layer's expert-parallel all-to-alls (a2a_row) and a
context-parallel layer's K/V exchange (cp_row)."""
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


def test_a_context_parallel_layer_lists_its_kv_exchange_and_its_exposed_part():
    from pipesim.costs.context import context_comm
    from pipesim.costs.stage import cost_model_for, costed_layer_ops
    path = "scenarios/longseq/llama3-8b-128k-h100.yaml"
    rows = {}
    for mode in ("ring", "allgather"):
        s = load_scenario(path, [f"parallel.context_mode={mode}"])
        (row,) = [r for r in estimate(s)["rows"] if r["op"] == "cp_kv_exchange"]
        c = context_comm(s, cost_model_for(s), costed_layer_ops(s, False))
        assert (row["t_comm_fwd_s"], row["t_comm_bwd_s"]) == (c.fwd_exposed, c.bwd_exposed)
        assert row["comm_bytes_fwd"] == c.bytes_fwd > 0 and f"{mode}(cp:8)" in row["comm_fwd"]
        rows[mode] = row
    # the ring hides its transfers under the attention blocks; the all-gather hides nothing
    assert rows["ring"]["t_comm_fwd_s"] < rows["allgather"]["t_comm_fwd_s"]
    assert "hidden" in rows["ring"]["comm_fwd"]
    assert not [r for r in estimate(load_scenario("scenarios/gpt3-175b-1024xa100.yaml"))["rows"]
                if r["op"] == "cp_kv_exchange"]
