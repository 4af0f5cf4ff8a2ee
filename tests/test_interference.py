"""Compute slowed beside overlapped data-parallel collectives (sim/interference.py): NCCL's ring
channel count, the overlap arithmetic, and both timing paths agreeing on it."""
import pytest

import pipesim
from pipesim.costs.collectives import GroupPlacement, Link
from pipesim.costs.moe_interference import gemm_slowdown
from pipesim.costs.nccl_channels import dp_collective_sms, ring_ctas
from pipesim.sim import simulate
from pipesim.sim.interference import add_busy, finish_time

LLAMA = "scenarios/llama2-7b-2x8-a100-zero1.yaml"
LINK = Link(1e9, 0.0)


def _group(size: int, per_node: int) -> GroupPlacement:
    return GroupPlacement(size=size, per_node=per_node, intra=LINK, inter=LINK)


@pytest.mark.parametrize("preset, size, per_node, ctas", [
    # one node: H100 370 GB/s of NVLink at 60 GB/s a channel = 6, doubled twice; A100 240 / 40 the same
    ("dgx-h100", 8, 8, 24), ("dgx-a100-80gb", 8, 8, 24),
    # B200: 722 GB/s at 90 = 8 channels -> 32
    ("dgx-b200", 8, 8, 32),
    # across nodes, one 50 GB/s NIC per GPU at 48 GB/s a channel: 8 NICs = 8 channels, not doubled
    # on sm_90 (under 50 GB/s with more than 4), then 16; one NIC: 1 -> 2 -> 4
    ("dgx-h100", 32, 8, 16), ("dgx-h100", 32, 1, 4),
    # A100's 25 GB/s HDR NICs at 24 GB/s: never doubled by the search (under 25 GB/s), 8 -> 16, 1 -> 2
    ("dgx-a100-80gb", 32, 8, 16), ("dgx-a100-80gb", 32, 1, 2),
])
def test_ring_ctas_follow_nccl_channel_search(preset, size, per_node, ctas):
    s = pipesim.load_scenario(LLAMA, overrides=[f"system.preset={preset}"])
    assert ring_ctas(s, "dp_cp", _group(size, per_node)) == ctas


def test_ring_ctas_capped_and_switched_off():
    s = pipesim.load_scenario(LLAMA, overrides=["system.preset=dgx-h100", "training.nccl_max_ctas.dp=8"])
    assert ring_ctas(s, "dp_cp", _group(8, 8)) == 8
    off = pipesim.load_scenario(LLAMA, overrides=["system.preset=dgx-h100", "training.collective_sm_contention=false"])
    assert dp_collective_sms(off, _group(8, 8)) == 0
    assert dp_collective_sms(s, _group(1, 1)) == 0          # no collective without a group


def test_finish_time_runs_at_one_over_the_ratio_inside_the_collectives():
    busy = [(0.0, 1.0), (2.0, 3.0), (4.0, 6.0)]
    # from 2.5, 2 s of work at ratio 2: 0.25 done by 3.0, 1.0 by 4.0, the last 0.75 beside the third
    # collective takes 1.5 s: ends at 5.5
    assert finish_time((busy,), 2.5, 2.0, 2.0) == pytest.approx(5.5)
    assert finish_time((busy,), 6.0, 1.0, 2.0) == 7.0             # nothing beside it
    assert finish_time((busy,), 4.0, 10.0, 2.0) == pytest.approx(15.0)   # 1 s done in [4, 6], 9 after
    # the DAG pass's two lists (finished jobs', then the current job's runs) give the same time
    assert finish_time((busy[:2], busy[2:]), 0.5, 3.0, 1.5) == finish_time((busy,), 0.5, 3.0, 1.5)


def test_add_busy_merges_back_to_back_buckets_of_one_job_only():
    busy: list = []
    add_busy(busy, 0.0, 1.0, False)
    add_busy(busy, 1.0, 2.0, True)          # the job's next bucket, back to back: one run
    add_busy(busy, 2.0, 3.0, False)         # a new job: its own interval
    add_busy(busy, 3.5, 4.0, True)          # a gap: a new run
    assert busy == [(0.0, 2.0), (2.0, 3.0), (3.5, 4.0)]


def test_static_persistent_gemm_runs_a_second_wave_clc_does_not():
    # 8192 x 8192 output, 2048 tiles, 16 of 132 SMs held: a static stride's late CTAs start after
    # a whole stride (about 2x); tile by tile, 18 waves on 116 SMs instead of 16 on 132
    static = gemm_slowdown(8192, 8192, 1, 132, 16, True)
    dynamic = gemm_slowdown(8192, 8192, 1, 132, 16, False)
    assert static == pytest.approx(30 / 16)
    assert dynamic == pytest.approx(18 / 16)


@pytest.mark.parametrize("preset", ["dgx-a100-80gb", "dgx-h100", "dgx-b200"])
def test_contention_slows_the_step_and_both_engines_agree(preset):
    s = pipesim.load_scenario(LLAMA, overrides=[f"system.preset={preset}", "system.num_nodes=2"])
    dag = simulate(s, trace=False).to_dict(include_trace=False)
    engine = simulate(s, trace=False, engine_choice="simpy").to_dict(include_trace=False)
    assert dag["engine"] == "dag"
    assert dag["step_time_s"] == engine["step_time_s"]
    lost = [r.get("compute_contention_s", 0.0) for r in dag["ranks"]]
    assert lost == [r.get("compute_contention_s", 0.0) for r in engine["ranks"]]
    assert max(lost) > 0
    off = pipesim.load_scenario(LLAMA, overrides=[f"system.preset={preset}", "system.num_nodes=2",
                                                  "training.collective_sm_contention=false"])
    alone = simulate(off, trace=False).to_dict(include_trace=False)
    assert all("compute_contention_s" not in r for r in alone["ranks"])
    assert alone["step_time_s"] < dag["step_time_s"]


def test_zero3_gathers_slow_the_compute_beside_them():
    s = pipesim.load_scenario(LLAMA, overrides=["system.preset=dgx-h100", "system.num_nodes=2", "training.zero_stage=3",
                                                "parallel.pipeline=1", "parallel.tensor=1", "parallel.data=16",
                                                "parallel.virtual_stages=1", "training.schedule=1f1b"])
    on = simulate(s, trace=False).to_dict(include_trace=False)
    assert on["engine"] == "simpy"
    assert max(r.get("compute_contention_s", 0.0) for r in on["ranks"]) > 0


@pytest.mark.parametrize("extra", [[], ["training.zero_stage=3", "parallel.pipeline=1", "parallel.tensor=1",
                                        "parallel.data=16", "parallel.virtual_stages=1", "training.schedule=1f1b"]])
def test_the_closed_form_loses_what_the_simulator_loses(extra):
    from pipesim.whatif.analytic import analytic_report
    s = pipesim.load_scenario(LLAMA, overrides=["system.preset=dgx-h100", "system.num_nodes=2"] + extra)
    simulated = max(r.get("compute_contention_s", 0.0) for r in simulate(s, trace=False).to_dict(include_trace=False)["ranks"])
    closed = analytic_report(s)["compute_contention_s"]
    assert simulated > 0 and closed == pytest.approx(simulated, rel=0.1)


def test_expert_time_ratio_is_taken_at_a_per_layer_reductions_own_size():
    """FSDP reduces one wrapped layer per collective: the expert-data-parallel time ratio is read
    at that size, not the bucket's (at the bucket's a tenth of the link latencies doubled the
    per-layer reductions of Qwen3-235B with EP 8 under FSDP: the metamorphic audit)."""
    from pipesim.costs.moe import edp_ratio, grad_ratio
    from pipesim.costs.memory import grad_elem_bytes
    from pipesim.costs.stage import costed_layer_ops
    s = pipesim.load_scenario({"model": {"preset": "qwen3-30b-a3b"}, "system": {"preset": "dgx-h100", "num_nodes": 4},
                               "parallel": {"data": 32, "expert": 8},
                               "training": {"zero_stage": 3, "zero3_collectives": "layer", "micro_batch_size": 1,
                                            "global_batch_size": 32}})
    ops = costed_layer_ops(s, moe=True)
    layer = sum(o.params for o in ops) * grad_elem_bytes(s.training)
    assert grad_ratio(s, ops) == edp_ratio(s, "reduce_scatter", nbytes=layer)
    assert grad_ratio(s, ops) != edp_ratio(s, "reduce_scatter")


def test_the_html_report_names_the_contention():
    from pipesim.report.html import _metrics
    s = pipesim.load_scenario(LLAMA, overrides=["system.preset=dgx-h100", "system.num_nodes=2"])
    rep = simulate(s, trace=False)
    assert "SM contention (max rank)" in _metrics(rep.to_dict(include_trace=False), s)
    off = pipesim.load_scenario(LLAMA, overrides=["system.preset=dgx-h100", "system.num_nodes=2",
                                                  "training.collective_sm_contention=false"])
    assert "SM contention" not in _metrics(simulate(off, trace=False).to_dict(include_trace=False), off)


def test_finish_time_holds_an_action_at_its_next_norm_kernel_until_the_collective_ends():
    busy = [(1.0, 3.0)]
    # 1 s done when the collective starts, a norm every 0.5 s: the one at 1.0 waits until 3.0
    assert finish_time((busy,), 0.0, 2.0, 1.5, stall=0.5) == pytest.approx(4.0)
    # the next norm at 1.2: 0.2 s more beside the collective (ratio 1), then the wait, then 0.8 s
    assert finish_time((busy,), 0.0, 2.0, 1.0, stall=0.4) == pytest.approx(3.8)
    # started inside a collective: its first kernel is a norm, so it starts when the collective ends
    assert finish_time(([(0.0, 3.0)],), 0.0, 2.0, 1.0, stall=0.4) == pytest.approx(5.0)
    # a collective that ends before the next norm costs only its contention
    assert finish_time(([(0.5, 0.6)],), 0.0, 2.0, 1.0, stall=0.4) == pytest.approx(2.0)


@pytest.mark.parametrize("norm, phase, hidden, ctas", [
    # TransformerEngine's tuned registries (normalization/*/ln_*_cuda_kernel.cu, rmsnorm_*)
    ("layernorm", "fwd", 10240, 1), ("layernorm", "fwd", 12288, 2), ("layernorm", "fwd", 65536, 8),
    ("layernorm", "bwd", 6144, 1), ("layernorm", "bwd", 8192, 2), ("layernorm", "bwd", 12800, 5),
    ("rmsnorm", "fwd", 8192, 1), ("rmsnorm", "bwd", 4096, 1),
    # hidden sizes no tuned launcher has: the general one's widest width (LN / RMSNorm: 8192 forward,
    # 4096 backward) split over ceil(hidden / width) CTAs
    ("layernorm", "fwd", 7168, 1), ("layernorm", "bwd", 7168, 2), ("rmsnorm", "fwd", 16384, 2),
    ("rmsnorm", "bwd", 5120, 2),
])
def test_norm_kernels_split_a_row_over_ctas_as_transformer_engine_registers_them(norm, phase, hidden, ctas):
    from pipesim.costs.norm_kernels import ctas_per_row
    assert ctas_per_row(norm, phase, hidden) == ctas


def _wide(*extra) -> list:
    """The Llama 2 7B scenario widened to a LayerNorm hidden 8192, whose backward norm is cooperative."""
    return ["system.preset=dgx-h100", "system.num_nodes=2", "model.norm=layernorm", "model.hidden_size=8192",
            "model.num_attention_heads=64", "model.num_kv_heads=64", *extra]


def test_cooperative_norms_wait_for_the_collectives_in_both_engines():
    from pipesim.costs.norm_kernels import cooperative_norms
    from pipesim.costs.stage import stage_costs
    from pipesim.costs.topology import placement
    base = pipesim.load_scenario(LLAMA, overrides=_wide())
    assert cooperative_norms(base) == (False, True)
    waits = pipesim.load_scenario(LLAMA, overrides=_wide("training.norm_sm_margin=0"))
    costs = stage_costs(waits)[0]
    assert costs.dp_norm_waits_fwd == 0 and costs.dp_norm_waits_bwd > 0
    dag = simulate(waits, trace=False).to_dict(include_trace=False)
    engine = simulate(waits, trace=False, engine_choice="simpy").to_dict(include_trace=False)
    assert dag["engine"] == "dag" and dag["step_time_s"] == engine["step_time_s"]
    plain = simulate(base, trace=False).to_dict(include_trace=False)
    assert dag["step_time_s"] > plain["step_time_s"]
    # a margin at least the collectives' SMs: the norms fit beside them, nothing waits
    held = dp_collective_sms(base, placement(base, "dp_cp"))
    roomy = pipesim.load_scenario(LLAMA, overrides=_wide(f"training.norm_sm_margin={held}"))
    assert stage_costs(roomy)[0].dp_norm_waits_bwd == 0
    assert simulate(roomy, trace=False).to_dict(include_trace=False)["step_time_s"] == plain["step_time_s"]


def test_mxfp8_forward_norms_are_cudnns_and_never_wait():
    from pipesim.costs.norm_kernels import cooperative_norms
    s = pipesim.load_scenario(LLAMA, overrides=_wide("model.hidden_size=16384", "model.num_attention_heads=128",
                                                     "model.num_kv_heads=128", "system.preset=dgx-b200",
                                                     "training.precision=fp8", "training.fp8_recipe=mxfp8"))
    assert cooperative_norms(s) == (False, True)


def test_a_norm_sm_margin_below_zero_or_of_every_sm_is_refused_naming_the_key():
    from pipesim.costs.stage import stage_costs
    from pipesim.errors import ScenarioError
    with pytest.raises(ScenarioError, match="norm_sm_margin"):
        pipesim.load_scenario(LLAMA, overrides=["training.norm_sm_margin=-1"])
    with pytest.raises(ScenarioError, match="training.norm_sm_margin: 108 leaves no SM of A100-SXM4-80GB's 108"):
        stage_costs(pipesim.load_scenario(LLAMA, overrides=["training.norm_sm_margin=108"]))


# a GPT layer of hidden 12288 (LayerNorm: TE's forward splits a row over 2 CTAs, the backward over 4),
# two micro-batches a step on 4 DGX H100: the data-parallel collectives overlap much of the compute
WIDE = {"model": {"name": "wide", "num_layers": 8, "hidden_size": 12288, "num_attention_heads": 96,
                  "seq_length": 2048, "vocab_size": 50304},
        "system": {"preset": "dgx-h100", "num_nodes": 4},
        "parallel": {"tensor": 8, "data": 4, "sequence_parallel": True},
        "training": {"micro_batch_size": 1, "global_batch_size": 8, "zero_stage": 1, "overlap_grad_reduce": True,
                     "overlap_param_gather": True, "grad_reduce_in_fp32": True}}


def test_the_why_names_the_waiting_norms_and_suggests_the_margin():
    from pipesim.report.explain import explain, headline
    from pipesim.report.html import _metrics
    s = pipesim.load_scenario(WIDE, overrides=["training.norm_sm_margin=0"])
    rep = simulate(s, trace=True)
    why = explain(rep, s)
    # one GPU a node in each data-parallel group: NCCL's 4 ring CTAs (test_ring_ctas_...)
    assert why["norm_wait"] == {"margin": 0, "dp": 4, "a2a": 0, "sms": 4}
    assert "cooperative norm kernels wait for them (training.norm_sm_margin 0 < their 4 SMs)" in \
        "\n".join(headline(why, rep))
    best = why["suggestions"][0]
    assert best["title"] == "norm_sm_margin 4"
    plain = simulate(pipesim.load_scenario(WIDE), trace=False).to_dict(include_trace=False)
    assert best["step_time_s"] == plain["step_time_s"]
    assert "norm kernels waiting" in _metrics(rep.to_dict(include_trace=False), s)


def test_norms_that_wait_for_the_dispatcher_stop_the_overlapped_attention():
    """Under the A2A overlap the attention part of a layer (its norms) waits for a transfer whose
    dispatcher holds more SMs than the margin: Megatron-Bridge sets 20 with DeepEP / HybridEP, the
    model zoo 24 for its overlap runs."""
    from pipesim.costs.norm_kernels import norm_wait
    from pipesim.costs.stage import stage_costs

    def qwen(**training):       # Qwen3-30B-A3B's MoE widened to a LayerNorm of 8192: backward norm cooperative
        return pipesim.load_scenario({
            "model": {"preset": "qwen3-30b-a3b", "seq_length": 4096, "norm": "layernorm", "hidden_size": 8192},
            "system": {"preset": "dgx-h100", "num_nodes": 1},
            "parallel": {"data": 8, "expert": 8},
            "training": {"micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16", "moe_routing": "balanced",
                         "moe_dispatcher": "deepep", "moe_a2a_overlap": True, **training}})
    plain, waits, roomy = qwen(), qwen(norm_sm_margin=0), qwen(norm_sm_margin=24)
    attention_fwd, attention_bwd = stage_costs(waits)[0].moe_overlap_slow_fwd[0], stage_costs(waits)[0].moe_overlap_slow_bwd[0]
    assert attention_bwd == float("inf") and attention_fwd == stage_costs(plain)[0].moe_overlap_slow_fwd[0]
    assert norm_wait(waits) == {"margin": 0, "dp": 24, "a2a": 20, "sms": 24}
    assert norm_wait(plain) is None and norm_wait(roomy) is None
    step = {k: simulate(s, trace=False).to_dict(include_trace=False) for k, s in (("plain", plain), ("waits", waits))}
    assert step["waits"]["step_time_s"] == simulate(waits, trace=False, engine_choice="simpy").to_dict(
        include_trace=False)["step_time_s"]
    assert step["waits"]["exposed_comm_s"]["EP_A2A"] > step["plain"]["exposed_comm_s"]["EP_A2A"]
    assert simulate(roomy, trace=False).to_dict(include_trace=False)["step_time_s"] == step["plain"]["step_time_s"]


def test_a_gemm_sm_margin_trades_a_narrower_grid_for_no_second_wave():
    # 8192^2 output on 132 SMs: with 16 SMs left free, 16 held ones cost no wave, 24 do (8 late CTAs)
    assert gemm_slowdown(8192, 8192, 1, 132, 16, True, margin=16) == 1.0
    assert gemm_slowdown(8192, 8192, 1, 132, 24, True, margin=16) > 1.5
    from pipesim.costs.stage import cost_model_for
    plain = cost_model_for(pipesim.load_scenario(WIDE))
    narrow = cost_model_for(pipesim.load_scenario(WIDE, overrides=["training.gemm_sm_margin=16"]))
    # alone, the GEMM takes its tiles in waves over 116 SMs instead of 132
    assert 1.05 < narrow.gemm_time(1, 8192, 8192, 8192, "bf16") / plain.gemm_time(1, 8192, 8192, 8192, "bf16") < 132 / 116 + 0.01
    s = pipesim.load_scenario(WIDE, overrides=["training.gemm_sm_margin=4"])   # the 4 ring CTAs beside it
    dag = simulate(s, trace=False).to_dict(include_trace=False)
    assert dag["step_time_s"] == simulate(s, trace=False, engine_choice="simpy").to_dict(include_trace=False)["step_time_s"]
    base = simulate(pipesim.load_scenario(WIDE), trace=False).to_dict(include_trace=False)
    lost = max(r.get("compute_contention_s", 0.0) for r in dag["ranks"])
    assert lost < 0.01 * max(r.get("compute_contention_s", 0.0) for r in base["ranks"])
    assert dag["step_time_s"] < base["step_time_s"]


def test_the_why_simulates_a_gemm_margin_beside_contended_collectives():
    from pipesim.report.explain import explain
    s = pipesim.load_scenario(WIDE)
    why = explain(simulate(s, trace=True), s)
    assert "gemm_sm_margin 4" in [x["title"] for x in why["suggestions"]]


def test_a_gemm_margin_that_leaves_no_sm_is_refused_naming_the_key():
    from pipesim.errors import ScenarioError
    with pytest.raises(ScenarioError, match="training.gemm_sm_margin: 132 leaves no SM"):
        from pipesim.costs.stage import stage_costs
        stage_costs(pipesim.load_scenario(WIDE, overrides=["training.gemm_sm_margin=132"]))
    with pytest.raises(ScenarioError, match="gemm_sm_margin must be"):
        pipesim.load_scenario(WIDE, overrides=["training.gemm_sm_margin=-2"])
