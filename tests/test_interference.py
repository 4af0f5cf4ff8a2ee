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
    from pipesim.costs.step_ops import grad_elem_bytes
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
