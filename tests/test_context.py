"""Context parallelism: scenario keys and errors, exact FLOP split, ring overlap, placement,
memory, the llama3.1-405b preset and the llama3-405b validation family (no torch)."""
from pathlib import Path

import pytest

from pipesim import load_scenario, simulate
from pipesim.costs import stage_costs
from pipesim.costs.context import PREFIX, context_comm
from pipesim.costs.layers import flash_attention, layer_ops, shapes_of
from pipesim.costs.stage import cost_model_for
from pipesim.costs.summary import iteration_flops, total_params
from pipesim.costs.topology import placement
from pipesim.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[1]


def scenario(context=2, seq=4096, mode="ring", layout="balanced", tensor=1, nodes=1, a2a=None, **model):
    return load_scenario({
        "model": {"preset": "llama2-7b", "seq_length": seq, "num_layers": 4, **model},
        "system": {"preset": "dgx-h100", "num_nodes": nodes},
        "parallel": {"tensor": tensor, "context": context, "context_mode": mode, "context_layout": layout,
                     "pipeline": 1, "sequence_parallel": tensor > 1,
                     **({"context_a2a": a2a} if a2a else {})},
        "training": {"micro_batch_size": 1, "global_batch_size": 16,
                     "attention": "flash"}})


def attention_flops(s):
    return sum(o.flops_fwd for o in layer_ops(s) if o.name == "attention" or o.name.startswith(PREFIX))


@pytest.mark.parametrize("mode,cp,a2a", [(m, cp, None) for m in ("ring", "allgather", "a2a") for cp in (2, 4, 8)]
                         + [("a2a+p2p", 4, 2), ("a2a+p2p", 8, 2), ("a2a+p2p", 8, 4)])
def test_causal_attention_flops_split_exactly(mode, cp, a2a):
    one = scenario(context=1)
    many = scenario(context=cp, mode=mode, a2a=a2a)
    assert attention_flops(many) * cp == pytest.approx(attention_flops(one), rel=1e-12)


def test_a2a_runs_whole_sequence_attention_on_a_share_of_the_heads():
    """Ulysses: one causal block over all 4096 tokens with 32/4 heads; the all-to-alls move the
    local Q, K, V in and O out (forward), keep 1/4 of each, and nothing hides them."""
    s = scenario(context=4, mode="a2a")
    blocks = [o for o in layer_ops(s) if o.name.startswith(PREFIX)]
    one = flash_attention(shapes_of(scenario(context=1)), 8, 8, "bf16", True)
    assert len(blocks) == 1 and blocks[0].flops_fwd == pytest.approx(one.flops_fwd)
    sh = shapes_of(s)
    cc = context_comm(s, cost_model_for(s), layer_ops(s))
    local = sh.b * sh.s * 32 * 128 * 2            # one of Q, K, V, O on this rank: 1024 tokens x 32 heads
    assert cc.bytes_fwd == pytest.approx(4 * local * 3 / 4)
    assert cc.fwd_exposed > 0 and cc.fwd_hidden == 0 and cc.bwd_exposed == cc.fwd_exposed


def test_a2a_p2p_rings_over_the_groups_with_their_head_share():
    """context 8 = all-to-all groups of 2 x a ring of 4: four ring blocks over 4096/4 tokens of
    32/2 heads; the all-to-all stays inside a node, the ring crosses nodes (tensor 2: 16 ranks)."""
    s = scenario(context=8, mode="a2a+p2p", a2a=2, tensor=2, nodes=2)
    blocks = [o for o in layer_ops(s) if o.name.startswith(PREFIX)]
    assert len(blocks) == 4
    assert placement(s, "cp_a2a").nodes == 1 and placement(s, "cp_ring").nodes == 2
    ring = scenario(context=8, tensor=2, nodes=2)
    ring_cc = context_comm(ring, cost_model_for(ring), layer_ops(ring))
    cc = context_comm(s, cost_model_for(s), layer_ops(s))
    # a ring block is as large as plain ring attention's, with half the steps
    sh = shapes_of(ring)
    block = sh.b * sh.s * 2 * 16 * 128 * 2
    assert ring_cc.bytes_fwd == pytest.approx(7 * block)
    assert cc.bytes_fwd - 3 * block == pytest.approx(sh.b * sh.s * 4 * 16 * 128 * 2 / 2)


def test_mla_attention_splits_over_context_parallelism():
    """DeepSeek-V3's MLA under CP 2: its attention is the CP blocks (half the causal work each
    rank), and their K/V exchange is costed with MLA's head widths."""
    def mla(cp):
        return load_scenario({"model": {"preset": "deepseek-v3", "seq_length": 4096, "num_layers": 4,
                                        "moe_first_dense_layers": 3, "mtp_layers": 0},
                              "system": {"preset": "dgx-h100", "num_nodes": 1},
                              "parallel": {"tensor": 4, "context": cp, "pipeline": 1, "sequence_parallel": True},
                              "training": {"micro_batch_size": 1, "global_batch_size": 8, "attention": "flash"}})
    one, two = mla(1), mla(2)
    assert attention_flops(two) * 2 == pytest.approx(attention_flops(one), rel=1e-12)
    cc = context_comm(two, cost_model_for(two), layer_ops(two))
    sh = shapes_of(two)                          # 2048 local tokens, 32 heads per rank, K 192 + V 128 wide
    assert cc.bytes_fwd == pytest.approx(sh.b * sh.s * 32 * (192 + 128) * 2)


def test_noncausal_contiguous_split_exactly_and_causal_contiguous_costs_the_busiest_rank():
    one = scenario(context=1, causal=False)
    many = scenario(context=4, layout="contiguous", causal=False)
    assert attention_flops(many) * 4 == pytest.approx(attention_flops(one))
    # causal + contiguous: the last rank works on every step (lock-step ring): a causal block and
    # 3 full ones of (S/4)^2 pairs = 3.5 S^2/16, against S^2/2 for the whole causal attention
    busy = scenario(context=4, layout="contiguous")
    assert attention_flops(busy) == pytest.approx(attention_flops(scenario(context=1)) * 3.5 / 16 * 2)


def test_gemms_see_seq_over_cp_tokens_and_model_flops_do_not_change():
    one, two = scenario(context=1), scenario(context=2)
    f1 = {o.name: o.flops_fwd for o in layer_ops(one)}
    f2 = {o.name: o.flops_fwd for o in layer_ops(two)}
    for name in ("qkv", "proj", "fc1", "fc2"):
        assert f2[name] * 2 == pytest.approx(f1[name])
    assert iteration_flops(two) == pytest.approx(iteration_flops(one))
    assert total_params(two) == total_params(one)


def test_ring_blocks_are_attention_ops_with_their_shapes():
    s = scenario(context=4, seq=8192)
    blocks = [o for o in layer_ops(s) if o.name.startswith(PREFIX)]
    assert len(blocks) == 4
    sh, L = shapes_of(s), 8192 // 4
    ref0 = flash_attention(sh, 32, 32, "bf16", True, q_len=L, kv_len=L)
    ref1 = flash_attention(sh, 32, 32, "bf16", False, q_len=L // 2, kv_len=L)
    assert blocks[0].flops_fwd == ref0.flops_fwd and blocks[1].flops_fwd == ref1.flops_fwd
    assert blocks[0].saved_bytes > 0 and all(b.saved_bytes == 0 for b in blocks[1:])


def test_ring_overlap_is_max_of_compute_and_transfer_per_step():
    base = scenario(context=4)
    fast = load_scenario(base, ["system.intra_node.bandwidth_GBps=1000000", "system.intra_node.latency_us=0"])
    assert context_comm(fast, cost_model_for(fast), layer_ops(fast)).fwd_exposed == 0.0
    slow = load_scenario(base, ["system.intra_node.bandwidth_GBps=0.5"])
    cm, ops = cost_model_for(slow), layer_ops(slow)
    cc = context_comm(slow, cm, ops)
    sh = shapes_of(slow)
    kv_bytes = 2 * sh.b * sh.s * sh.g * sh.d * sh.e
    hop = slow.system.intra_node.latency + kv_bytes / slow.system.intra_node.effective_bandwidth
    t = [cm.time(o, "fwd").seconds for o in ops if o.name.startswith(PREFIX)]
    assert cc.fwd_exposed == pytest.approx(sum(max(x, hop) for x in t[:-1]) + t[-1] - sum(t))
    assert cc.fwd_exposed > 0 and cc.bytes_fwd == pytest.approx(3 * kv_bytes)
    c0, c1 = stage_costs(fast)[0], stage_costs(slow)[0]
    assert c1.cp_comm_fwd == pytest.approx(4 * cc.fwd_exposed)
    assert c1.forward - c0.forward == pytest.approx(c1.cp_comm_fwd)


def test_allgather_exposes_the_gather():
    s = scenario(context=4, mode="allgather")
    c = stage_costs(s)[0]
    assert c.cp_comm_fwd > 0 and c.cp_comm_bwd > c.cp_comm_fwd and c.cp_comm_hidden == 0


def test_exposed_exchange_is_reported_as_cp_not_tp():
    s = scenario(context=4, mode="allgather", tensor=2, nodes=2)
    rep, c = simulate(s), stage_costs(s)[0]
    exposed = rep.data["exposed_comm_s"]
    M = s.num_microbatches
    assert exposed["CP"] == pytest.approx(M * (c.cp_comm_fwd + c.cp_comm_bwd)) and exposed["CP"] > 0
    assert exposed["CP"] == pytest.approx(rep.data["cp_comm_exposed_s"])
    assert exposed["TP"] == pytest.approx(M * (c.tp_comm_fwd + c.tp_comm_bwd)) and exposed["TP"] > 0
    assert "CP" not in simulate(scenario(context=1, tensor=2)).data["exposed_comm_s"]


def test_cp_ranks_inside_the_node_first_and_gradients_over_data_times_context():
    s = scenario(context=4, tensor=2, nodes=2)
    cp = placement(s, "cp")
    assert (cp.size, cp.nodes) == (4, 1)
    g = placement(s, "dp_cp")
    assert g.size == s.parallel.data * 4 == 8 and g.per_node == 4
    # an explicit order putting data inside context moves CP across nodes
    far = load_scenario(s, ["parallel.rank_order=tp-dp-cp-pp"])
    assert placement(far, "cp").nodes == 2


def test_the_gradient_group_counts_an_nvlink_domain_across_trays_as_one_fabric():
    """On GB200 NVL72 racks (4-GPU trays, 64 GPUs per NVLink domain) the data x context group
    has 32 members in each domain, as the data-parallel group of the same run without CP: its
    ring runs on NVLink between them and leaves a domain through 32 NICs, not 2."""
    base = {"model": {"preset": "llama3-8b", "seq_length": 8192},
            "system": {"preset": "gb200-nvl72", "num_nodes": 128, "nvlink_domain": 64},
            "parallel": {"tensor": 2, "pipeline": 1, "data": 64, "context": 4, "sequence_parallel": True},
            "training": {"micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"}}
    g = placement(load_scenario(base), "dp_cp")
    flat = placement(load_scenario(base, ["parallel.context=1", "parallel.data=256",
                                          "training.global_batch_size=256"]), "dp")
    assert (g.size, g.per_node, g.nodes) == (256, 32, 8) == (flat.size, flat.per_node, flat.nodes)


def test_activations_shrink_with_cp_and_kv_buffers_reach_the_timeline():
    one, two = stage_costs(scenario(context=1))[0], stage_costs(scenario(context=2))[0]
    assert two.activation_bytes < 0.55 * one.activation_bytes
    rep = simulate(scenario(context=2))
    held = max(m.by_category.get("cp_buffers", 0) for m in rep.memory)
    assert held == pytest.approx(two.cp_buffer_bwd) and held > two.cp_buffer_fwd > 0
    assert rep.memory[-1].by_category["cp_buffers"] == 0
    assert rep.num_gpus == 8


@pytest.mark.parametrize("patch,par,words", [
    ({"seq_length": 4098}, {}, ["parallel.context", "seq_length(4098)", "2·context(2) = 4"]),
    ({"causal": False}, {}, ["parallel.context_layout", "not causal"]),
    # 4 KV heads, 1 per rank at tensor 4: nothing left for an all-to-all to split
    ({"num_kv_heads": 4}, {"tensor": 4, "context_mode": "a2a"}, ["parallel.context", "num_kv_heads(4)",
                                                                "tensor(4)", "divisible by 2"]),
    ({}, {"context": 4, "tensor": 2, "context_mode": "a2a+p2p"}, ["parallel.context_a2a", "needs"]),
    ({}, {"context": 4, "tensor": 2, "context_mode": "a2a+p2p", "context_a2a": 3}, ["parallel.context_a2a",
                                                                                   "must divide context(4)"]),
    ({}, {"context_a2a": 2}, ["parallel.context_a2a", "context_mode is 'ring'"]),
    ({}, {"context_a2a": 0}, ["parallel", "context_a2a must be at least 1"]),
])
def test_one_line_errors(patch, par, words):
    raw = {"model": {"preset": "llama2-7b", "num_layers": 4, **patch}, "system": "dgx-h100",
           "parallel": {"tensor": 1, "context": 2, **par}, "training": {"global_batch_size": 8}}
    with pytest.raises(ScenarioError) as err:
        load_scenario(raw)
    text = str(err.value)
    assert "\n" not in text and all(w in text for w in words)


def test_gpu_arithmetic_names_context():
    raw = {"model": {"preset": "llama2-7b"}, "system": "dgx-h100",
           "parallel": {"tensor": 2, "context": 2, "pipeline": 1, "data": 4}, "training": {"global_batch_size": 8}}
    with pytest.raises(ScenarioError, match=r"tensor\(2\)·context\(2\)·pipeline\(1\)·data\(4\) = 16 ≠ 8 GPUs"):
        load_scenario(raw)


def test_llama31_405b_parameter_count():
    s = load_scenario({"model": "llama3.1-405b", "system": "dgx-h100", "training": {"global_batch_size": 8}})
    assert total_params(s) == pytest.approx(s.model.reference_params, rel=0.01)


def test_llama3_validation_family_converts_every_case():
    from pipesim.whatif.validation import case_scenario, load_cases
    cases = [c for c in load_cases() if c.suite == "llama3-405b"]
    assert {c.id for c in cases} >= {"llama3-405b-16384gpu-cp1-8k", "llama3-405b-16384gpu-cp16-128k"}
    for c in cases:
        s = load_scenario(case_scenario(c))
        assert s.num_gpus == c.raw["hardware"]["num_gpus"]
        assert s.parallel.context == c.raw["parallel"]["cp"]
        assert s.layers_per_stage()[0] == 0 and sum(s.layers_per_stage()) == 126


@pytest.mark.parametrize("name", ["llama2-7b-32k-cp2-h100", "llama2-7b-128k-cp4-h100", "llama2-7b-1m-cp32-h100"])
def test_long_sequence_scenarios_simulate(name):
    s = load_scenario(ROOT / "scenarios" / "longseq" / f"{name}.yaml")
    rep = simulate(s, trace=False)
    assert 0 < rep.model_tflops_per_gpu < s.system.gpu.peak_bf16 / 1e12
    assert rep.peak_memory_bytes < s.system.gpu.memory


def test_search_and_sweep_have_a_context_axis():
    import yaml
    from pipesim.whatif.grid import Grid, prepare
    from pipesim.whatif.search import SearchSpace, candidates
    raw = yaml.safe_load((ROOT / "scenarios" / "longseq" / "llama3-8b-128k-h100.yaml").read_text())
    space = SearchSpace(tensor=(2,), pipeline=(1,), micro_batch=(1,), recompute=("none",), zero=(1,))
    cps = {c["parallel"]["context"] for c in candidates(raw, 256, space)}
    assert cps == {1, 2, 4, 8, 16, 32}             # down to 4096 tokens per GPU
    short = dict(raw, model={"preset": "llama3-8b", "seq_length": 8192})
    assert {c["parallel"]["context"] for c in candidates(short, 256, space)} == {1, 2}
    variants = prepare(raw, Grid(axes={"parallel.context": [4, 8, 16]}))
    assert [v.scenario.parallel.data for v in variants] == [16, 8, 4]


def test_explain_offers_the_other_exchanges_when_cp_is_exposed():
    from pipesim.report.explain import explain
    s = load_scenario(ROOT / "scenarios" / "longseq" / "llama2-7b-128k-cp4-h100.yaml",
                      ["parallel.context_mode=allgather"])
    rep = simulate(s)
    assert rep.data["exposed_comm_s"]["CP"] > 0.02 * rep.step_time_s
    why = explain(rep, s)
    ring = [x for x in why["suggestions"] if x["changes"].get("parallel.context_mode") == "ring"]
    assert ring and ring[0]["step_time_s"] < rep.step_time_s
    again = simulate(load_scenario(ROOT / "scenarios" / "longseq" / "llama2-7b-128k-cp4-h100.yaml"), trace=False)
    assert again.step_time_s == pytest.approx(ring[0]["step_time_s"], rel=1e-9)     # the bundled file runs ring
