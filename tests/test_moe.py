"""Mixture of experts: presets, checks, routing imbalance, all-to-all, memory, A2A overlap."""
import math

import numpy as np
import pytest

from pipesim import load_scenario
from pipesim.costs import stage_costs
from pipesim.costs.layers import layer_ops, shapes_of
from pipesim.costs.moe import a2a_costs, expert_params, load_factor
from pipesim.costs.summary import active_params, iteration_flops, total_params
from pipesim.errors import ScenarioError
from pipesim.presets.models import ACTIVE_PARAMS, MODELS
from pipesim.sim import simulate


def moe(model=None, system="dgx-h100", nodes=1, parallel=None, training=None):
    model = model or {"preset": "llama2-7b", "num_layers": 4, "num_experts": 8, "moe_top_k": 2,
                      "seq_length": 1024}
    par = {"sequence_parallel": True, **(parallel or {})}
    tr = {"global_batch_size": 64, "attention": "flash", **(training or {})}
    return load_scenario({"model": model, "system": {"preset": system, "num_nodes": nodes},
                          "parallel": par, "training": tr})


@pytest.mark.parametrize("name", sorted(ACTIVE_PARAMS))
def test_moe_presets_total_and_active_params(name):
    s = moe(model=name, parallel={"data": 8})
    ref = MODELS[name]["reference_params"]
    assert abs(total_params(s) - ref) <= 0.01 * ref
    active, with_embedding, resolution = ACTIVE_PARAMS[name]
    got = active_params(s, input_embedding=with_embedding)
    assert abs(got - active) <= max(0.01 * active, resolution)
    assert got < 0.4 * total_params(s)


@pytest.mark.parametrize("name", sorted(ACTIVE_PARAMS))
def test_moe_presets_load_and_cost(name):
    s = moe(model=name, parallel={"data": 8, "expert": 8})
    costs = stage_costs(s)
    assert costs[0].moe_layers == s.model.num_moe_layers > 0
    assert costs[0].ep_comm_fwd > 0 and costs[0].forward > costs[0].ep_comm_fwd


def test_deepseek_v3_layer_mix_and_mla():
    m = moe(model="deepseek-v3", parallel={"data": 8}).model
    assert [m.is_moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert m.num_moe_layers == 58
    names = [o.name for o in layer_ops(moe(model="deepseek-v3", parallel={"data": 8}), True)]
    assert {"q_down", "q_up", "kv_down", "kv_up", "router", "expert_fc1", "shared_fc1"} <= set(names)
    assert "qkv" not in names


BAD = [
    ({"moe_top_k": 9}, {}, 8, ["model.moe_top_k", "moe_top_k(9) > num_experts(8)"]),
    ({}, {"expert": 3}, 6, ["parallel.expert", "num_experts(8) % expert(3) = 2 ≠ 0"]),
    ({}, {"expert": 8, "expert_tensor": 2}, 8,
     ["parallel.expert", "expert(8)·expert_tensor(2) = 16 does not divide tensor(1)·data(8) = 8"]),
    ({}, {"tensor": 2, "sequence_parallel": False}, 8, ["parallel.sequence_parallel", "tensor(2)"]),
    ({"num_experts": 0}, {"expert": 2}, 8, ["parallel.expert", "needs an MoE model"]),
]


@pytest.mark.parametrize("model,parallel,gpus,words", BAD)
def test_malformed_moe_sections_name_the_key(model, parallel, gpus, words):
    model = {"preset": "llama2-7b", "num_layers": 4, "num_experts": 8, "moe_top_k": 2, "seq_length": 1024, **model}
    with pytest.raises(ScenarioError) as err:
        load_scenario({"model": model, "system": {"preset": "dgx-h100", "gpus_per_node": gpus},
                       "parallel": {"sequence_parallel": True, **parallel},
                       "training": {"global_batch_size": 48}})
    msg = str(err.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_load_factor_matches_the_stated_statistical_model():
    """Monte Carlo of the docstring's model (Poisson-Gamma expert counts, EP ranks of E/EP experts):
    the closed form's expected busiest-rank load is within 3 % of the simulated one."""
    s = moe(parallel={"expert": 8, "data": 8, "tensor": 1},
            training={"moe_routing": "dropless", "moe_routing_skew": 0.3})
    sh = shapes_of(s)
    lam = load_factor(s, sh)
    rng = np.random.default_rng(0)
    E, ep, k = 8, 8, 2
    N = sh.tokens * k * ep
    c = 0.3
    w = rng.gamma(1 / c**2, c**2, size=(4000, E))          # mean 1, CV c
    counts = rng.poisson(N * w / E)
    ranks = counts.reshape(4000, ep, E // ep).sum(axis=2)
    sim = (ranks.max(axis=1) / (N / ep)).mean()
    assert lam > 1.05
    assert abs(lam - sim) / sim < 0.03


def test_routing_modes_order():
    base = dict(parallel={"expert": 8, "data": 8})
    bal = load_factor(moe(**base, training={"moe_routing": "balanced"}))
    drop = load_factor(moe(**base, training={"moe_routing": "dropless"}))
    cap = load_factor(moe(**base, training={"moe_routing": "capacity", "moe_capacity_factor": 1.05}))
    assert bal == 1.0 < cap <= 1.05 < drop
    assert load_factor(moe(parallel={"expert": 1, "data": 8})) == 1.0 + 0.0  # one rank: nothing to wait for


def test_a2a_hierarchy_and_dispatchers():
    one_node = a2a_costs(*_s_sh(moe(parallel={"expert": 8, "data": 8})))
    two_nodes = a2a_costs(*_s_sh(moe(nodes=2, parallel={"expert": 8, "tensor": 1, "data": 16},
                                     model={"preset": "llama2-7b", "num_layers": 4, "num_experts": 16,
                                            "moe_top_k": 2, "seq_length": 1024})))
    assert one_node.inter_bytes == 0 and one_node.fwd > 0
    # EP 8 on one node: 7/8 of the copies cross NVLink
    s, sh = _s_sh(moe(parallel={"expert": 8, "data": 8}))
    assert one_node.intra_bytes == pytest.approx(sh.tokens * 2 * sh.h * sh.e * 7 / 8)
    assert two_nodes.inter_bytes == 0            # EP 8 inside one 8-GPU node even on two nodes
    wide = dict(nodes=2, parallel={"expert": 16, "tensor": 1, "data": 16},
                model={"preset": "llama2-7b", "num_layers": 4, "num_experts": 16, "moe_top_k": 4, "seq_length": 1024})
    nccl = a2a_costs(*_s_sh(moe(**wide, training={"moe_dispatcher": "alltoall"})))
    deepep = a2a_costs(*_s_sh(moe(**wide, training={"moe_dispatcher": "deepep"})))
    assert nccl.inter_bytes > deepep.inter_bytes > 0     # a token crosses once per remote node
    assert deepep.fwd < nccl.fwd
    assert a2a_costs(*_s_sh(moe(parallel={"expert": 1, "data": 8}))).fwd == 0.0


def _s_sh(s):
    return s, shapes_of(s)


def test_expert_flops_independent_of_ep_and_memory_sharded():
    costs = {ep: stage_costs(moe(parallel={"expert": ep, "data": 8}, training={"moe_routing": "balanced"}))[0]
             for ep in (1, 2, 8)}
    assert costs[1].flops == pytest.approx(costs[8].flops)
    ops = {ep: layer_ops(moe(parallel={"expert": ep, "data": 8}), True) for ep in (1, 8)}
    assert expert_params(ops[1]) == pytest.approx(8 * expert_params(ops[8]))
    # optimizer states of the experts are sharded over expert-data parallelism (ZeRO-1)
    assert costs[8].static.optimizer < costs[1].static.optimizer
    assert costs[8].expert_params == pytest.approx(costs[1].expert_params / 8)


def test_model_flops_do_not_count_imbalance():
    a = moe(parallel={"expert": 8, "data": 8}, training={"moe_routing": "dropless"})
    b = moe(parallel={"expert": 8, "data": 8}, training={"moe_routing": "balanced"})
    assert iteration_flops(a) == iteration_flops(b)
    assert stage_costs(a)[0].forward > stage_costs(b)[0].forward


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 1, 1, 4), ("interleaved", 2, 2, 8), ("interleaved", 4, 2, 8),
                                            ("dualpipe-v", 4, 2, 16), ("interleaved", 2, 4, 6)])
def test_a2a_overlap_hides_comm_without_deadlock(schedule, p, v, m):
    kw = dict(model={"preset": "llama2-7b", "num_layers": 8, "num_experts": 16, "moe_top_k": 4, "seq_length": 1024},
              nodes=2 * p, parallel={"expert": 16, "tensor": 1, "pipeline": p, "virtual_stages": v})
    gbs = m * 16
    plain = simulate(moe(**kw, training={"schedule": schedule, "global_batch_size": gbs}), trace=False).to_dict()
    over = simulate(moe(**kw, training={"schedule": schedule, "global_batch_size": gbs, "moe_a2a_overlap": True}),
                    trace=False).to_dict()
    assert plain["moe"]["a2a_exposed_s"] == pytest.approx(plain["moe"]["a2a_total_s"])
    assert over["moe"]["a2a_total_s"] == pytest.approx(plain["moe"]["a2a_total_s"])
    exposed = [sum(r["exposed_comm_s"].get("EP_A2A", 0.0) for r in rep["ranks"]) for rep in (plain, over)]
    assert exposed[1] < 0.8 * exposed[0]
    assert over["step_time_s"] < plain["step_time_s"]
    assert over["exposed_comm_s"]["EP_A2A"] == pytest.approx(over["moe"]["a2a_exposed_s"])


@pytest.mark.parametrize("parallel, training, says", [
    ({"pipeline": 4}, {}, "needs an interleaved schedule"),
    ({"pipeline": 1}, {"recompute": "full"}, "without full recomputation"),
    ({"expert": 1}, {}, "needs expert parallelism")])
def test_a2a_overlap_where_megatron_core_cannot_run_it_is_one_line(parallel, training, says):
    """Megatron-Core's TransformerConfig asserts expert parallelism, no full recompute and, with
    pipeline stages, virtual stages for --overlap-moe-expert-parallel-comm. Plain 1F1B over 4
    stages used to simulate, every pair holding its forward's send back: a step half again as long
    as without the overlap (qwen3-30b-a3b on 16 H100: 12.1 -> 20.1 s)."""
    from pipesim.errors import ScenarioError
    kw = dict(model={"preset": "llama2-7b", "num_layers": 8, "num_experts": 16, "moe_top_k": 4, "seq_length": 1024},
              nodes=8, parallel={"expert": 16, "tensor": 1, **parallel})
    with pytest.raises(ScenarioError, match=r"training\.moe_a2a_overlap: .*" + says):
        moe(**kw, training={"global_batch_size": 128, "moe_a2a_overlap": True, **training})


def test_pair_cost_formula():
    """Four slots: max(F_att, B_com) + max(F_dis, B_moe) + max(F_moe, B_dis) + max(F_com, B_att)."""
    from pipesim.sim.a2a_overlap import pair_cost
    from pipesim.sim.workload import Cost
    f = Cost(3.0, a2a=1.0, moe_block=1.2)           # F: attention 0.8, MoE 1.2, dispatch = combine 0.5
    b = Cost(5.0, a2a=1.0, moe_block=2.5)           # B: attention 1.5, MoE 2.5, 0.5 + 0.5
    c = pair_cost(f, b)
    assert c.dur == pytest.approx(max(0.8, 0.5) + max(0.5, 2.5) + max(1.2, 0.5) + max(0.5, 1.5))
    assert c.a2a_exposed == pytest.approx(0.0)
    f, b = Cost(3.0, a2a=2.0, moe_block=0.6), Cost(4.0, a2a=2.0, moe_block=1.0)   # transfer bound
    c = pair_cost(f, b)
    assert c.dur == pytest.approx(1.0 + 1.0 + 1.0 + 1.0) and c.a2a_exposed == pytest.approx(4.0 - 3.0)
    assert math.isclose(pair_cost(Cost(2.0), Cost(3.0)).dur, 5.0)      # nothing to hide: the sum


def test_a2a_overlap_holds_one_layer_more_not_a_micro_batch_more():
    """Megatron-Core pairs the forward's layer i with the backward's layer L-1-i, so the paired
    forward's activations grow as the backward's are released: the peak is about one layer above
    the run without the overlap. The fused step used to allocate the whole forward before
    releasing anything: without pipelining (Qwen3-30B-A3B on 8 GB300, micro-batch 8, the
    Megatron-Bridge 26.08 recipe) 195 -> 328 GiB, out of memory where the published run fits."""
    from pipesim.sim.a2a_overlap import pair_cost
    from pipesim.sim.workload import Cost
    f = Cost(1.0, mem0=(("activations", 8.0),), mem1=(("activations", -1.0),))
    b = Cost(2.0, mem0=(("recompute", 0.5),), mem1=(("activations", -7.0), ("recompute", -0.5)))
    c = pair_cost(f, b, layers=4)
    assert dict(c.mem0) == {"activations": 2.0, "recompute": 0.5}         # one of 4 layers, B's working set
    net = {}
    for cat, d in c.mem0 + c.mem1:
        net[cat] = net.get(cat, 0.0) + d
    assert net == pytest.approx({"activations": 0.0, "recompute": 0.0})   # the same net change as F then B
    kw = dict(model={"preset": "llama2-7b", "num_layers": 8, "num_experts": 16, "moe_top_k": 4, "seq_length": 1024},
              nodes=2, parallel={"expert": 16, "tensor": 1, "pipeline": 1})
    peaks = [simulate(moe(**kw, training={"global_batch_size": 64, "moe_a2a_overlap": o}), trace=False
                      ).to_dict()["peak_memory_bytes"] for o in (False, True)]
    one_mb = stage_costs(moe(**kw, training={"global_batch_size": 64}))[0].activation_bytes
    assert peaks[0] < peaks[1] < peaks[0] + 0.5 * one_mb


def test_ep_stays_inside_a_larger_nvlink_island():
    """EP 16 over two 8-GPU nodes crosses the network; in one 16-GPU island it does not."""
    kw = dict(parallel={"expert": 16, "tensor": 1, "data": 16},
              model={"preset": "llama2-7b", "num_layers": 4, "num_experts": 16, "moe_top_k": 2, "seq_length": 1024})
    two = a2a_costs(*_s_sh(moe(nodes=2, **kw)))
    s = load_scenario({"model": kw["model"], "system": {"preset": "dgx-h100", "gpus_per_node": 16},
                       "parallel": {**kw["parallel"], "sequence_parallel": True},
                       "training": {"global_batch_size": 64, "attention": "flash"}})
    one = a2a_costs(s, shapes_of(s))
    assert two.inter_bytes > 0 and one.inter_bytes == 0 and one.fwd < two.fwd


def test_moezoo_cases_convert_and_flag_context_parallelism():
    from pipesim.whatif.validation_moe import (embedding_aware_split, load_moe_cases, moe_case_scenario,
                                               run_moe_suite)
    cases = {c["id"]: c for c in load_moe_cases()}
    assert len(cases) == 9
    sc = moe_case_scenario(cases["moezoo-qwen3-235b-deepep-ep32-pp8-a2a-overlap"])
    assert sc["parallel"]["expert"] == 32 and sc["training"]["moe_a2a_overlap"] is True
    assert sum(sc["parallel"]["layers_per_stage"]) == 94 and len(sc["parallel"]["layers_per_stage"]) == 32
    assert embedding_aware_split(94, 96)[0] == 0 and embedding_aware_split(94, 96)[-1] == 0
    results = run_moe_suite(evaluator=lambda s, mode: {"step_time_s": 10.0})
    by = {r.id: r for r in results}
    assert len(results) == 5 and not any("longseq" in r.id for r in results)
    assert by["moezoo-qwen3-235b-deepep-ep32-pp8"].error_pct == pytest.approx(100 * (10 / 19.7 - 1))
    # the long-sequence cases run with ring context parallelism (issue 15) and the README's
    # long-context command: selective recompute of the norms and the MoE block
    long = moe_case_scenario(cases["moezoo-qwen3-235b-longseq-32k"], "dropless")
    assert long["parallel"]["context"] == 2 and long["training"]["moe_routing"] == "dropless"
    assert long["training"]["recompute"] == "selective"
    assert long["training"]["recompute_modules"] == ["layernorm", "moe"]


def test_the_long_sequence_series_is_scored_in_megatron_cores_tflops():
    from pipesim.costs.summary import megatron_core_flops
    from pipesim.whatif.validation_moe import load_moe_cases, moe_case_scenario, run_longseq_suite
    results = run_longseq_suite(evaluator=lambda s, mode: {"step_time_s": 100.0})
    assert [(r.id[-4:], r.routing) for r in results][:2] == [("-16k", "balanced"), ("-16k", "dropless")]
    assert len(results) == 8
    case = next(c for c in load_moe_cases() if c["id"].endswith("longseq-128k"))
    s = load_scenario(moe_case_scenario(case))
    # Megatron-Core's count by hand for Qwen3-235B-A22B (94 layers, h 4096, 64 heads of 128, 4 query
    # groups, 8 of 128 experts of 1536, SwiGLU, vocab 151936 padded to 512 = 152064), 256 x 131072 tokens
    h, L, S = 4096, 94, 131072
    per_token = (12 * L * h * 1536 * 8 * 1.5 + 12 * L * h * h * ((1 + 4 / 64) + S / h / 2) * 2
                 + 6 * h * 152064)
    assert megatron_core_flops(s) == pytest.approx(256 * S * per_token)
    r = next(r for r in results if r.id == case["id"] and r.routing == "balanced")
    assert r.published == 389 and r.predicted == pytest.approx(megatron_core_flops(s) / 100.0 / 256 / 1e12)
    assert r.error_pct == pytest.approx(100 * (r.predicted / 389 - 1))


@pytest.mark.parametrize("name,total,active,tol", [
    # Kimi K2 report Table 2: 1.04T / 32.6B; its shapes count 1.026T (comment in presets/models.py)
    ("kimi-k2", 1.04e12, 32.6e9, 0.015),
    # GLM-4.5 report Table 1: 355B / 32B, not itemised; its shapes count 352.8B / 32.86B (+2.7 %)
    ("glm-4.5", 355e9, 32e9, 0.03),
])
def test_presets_without_an_exact_published_count(name, total, active, tol):
    s = moe(model=name, parallel={"data": 8, "expert": 8})
    assert abs(total_params(s) - total) <= tol * total
    assert abs(active_params(s, input_embedding=name == "kimi-k2") - active) <= tol * active
    assert stage_costs(s)[0].moe_layers == s.model.num_moe_layers


def test_megatron_cores_count_of_multi_latent_attention():
    """Megatron-Core's logger counts DeepSeek-V3's MLA with its own branch (training.py
    num_floating_point_operations, args.multi_latent_attention): q and kv down/up projections, the
    decoupled RoPE key, the output projection and the causal core, 6 FLOPs per multiply-accumulate."""
    from pipesim.costs.summary import megatron_core_flops
    s = load_scenario({"model": {"preset": "deepseek-v3", "seq_length": 4096, "mtp_layers": 0},
                       "system": {"preset": "dgx-h100", "num_nodes": 1},
                       "parallel": {"tensor": 1, "pipeline": 1, "data": 8, "expert": 8},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16"}})
    h, L, S, a = 7168, 61, 4096, 128
    mla = 6 * (1536 * (h + a * 192 + 1) + 512 * (h + a * (128 + 128) + 1) + h * 64 + a * 128 * h
               + S * (a * 192 + a * 128) / 2)
    mlp = 18 * h * (3 * 18432 + 58 * (8 * 2048 + 2048))        # SwiGLU: 3 dense layers, 58 MoE (8 routed + 1 shared)
    per_token = L * mla + mlp + 6 * h * 129280                   # 129,280 = 128 x 1010: no padding
    assert megatron_core_flops(s) == pytest.approx(8 * S * per_token)
