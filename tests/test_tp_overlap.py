"""Transformer Engine's Userbuffers overlap (training.tp_overlap: userbuffers, pipesim/costs/
tp_overlap.py): each of a layer's linears by its TE method, chunks and SMs."""
import pytest

import pipesim
from pipesim.costs.layers import layer_ops
from pipesim.costs.stage import comm_seconds, cost_model_for, op_terms
from pipesim.costs.tp_overlap import TE_DEFAULTS, _chunked, column_backward_block, forward_block, setting
from pipesim.errors import ScenarioError
from pipesim.sim import simulate

BASE = {"model": {"preset": "llama3-70b", "num_layers": 4, "seq_length": 4096}, "system": {"preset": "dgx-h100"},
        "parallel": {"tensor": 8, "data": 1, "sequence_parallel": True},
        "training": {"global_batch_size": 2, "attention": "flash", "overlap_tp_comm": True,
                     "tp_grad_overlap": True, "tp_overlap": "userbuffers"}}


def _ops(sets=()):
    s = pipesim.load_scenario(BASE, list(sets))
    cm = cost_model_for(s)
    return s, cm, {o.name: o for o in layer_ops(s)}


def test_settings_come_from_the_gemm_then_all_then_transformer_engine():
    s, _, _ = _ops(["training.tp_overlap_cfg={all: {num_sm: 8}, proj_fprop: {num_sm: 24}}"])
    assert setting(s.training, "proj_fprop", "num_sm") == 24 and setting(s.training, "fc2_fprop", "num_sm") == 8
    assert setting(s.training, "fc2_fprop", "num_splits") == TE_DEFAULTS["num_splits"] == 4
    assert TE_DEFAULTS["set_sm_margin"] is True            # TE >= 2.0


def test_a_ring_exchange_starts_on_its_own_chunk_and_pays_for_smaller_gemms():
    s, cm, ops = _ops()
    qkv = ops["qkv"]
    g = qkv.gemms_fwd[0]
    alone = cm.gemm_time(*g)
    # 8 chunks of M/8 rows, three at a time on TE's GEMM streams
    chunked = 8 / 3 * cm.gemm_time(3, g[1] / 8, g[2], g[3], g[4])
    assert _chunked(cm, g, 8) == pytest.approx(chunked)
    assert forward_block(cm, s.training, 8, qkv, 1e-9) == pytest.approx(max(0.0, chunked - alone))  # a free wire
    slow = 10 * alone                                                    # the wire outlasts every chunk
    assert forward_block(cm, s.training, 8, qkv, slow) == pytest.approx(slow + chunked / 8 - alone)
    agg, cm_a, _ = _ops(["training.tp_overlap_cfg={qkv_fprop: {aggregate: true}}"])
    assert forward_block(cm_a, agg.training, 8, qkv, slow) == pytest.approx(slow + _chunked(cm, g, 4) / 4 - alone)


def test_a_pipelined_reduce_scatter_costs_its_gemm_the_sms_of_its_kernel():
    s, cm, ops = _ops()
    fc2 = ops["fc2"]
    comm = comm_seconds(s, fc2.comm_fwd)
    few = forward_block(cm, s.training, 8, fc2, comm)
    s24, cm24, _ = _ops(["training.tp_overlap_cfg={fc2_fprop: {num_sm: 24}}"])
    assert forward_block(cm24, s24.training, 8, fc2, comm) > few > 0
    # the last chunk's reduce-scatter is always exposed
    assert few >= comm / 4


def test_a_bulk_overlap_hides_the_collective_behind_the_whole_gemm():
    s, cm, ops = _ops(["training.tp_overlap_cfg={all: {set_sm_margin: false}}"])
    fc1 = ops["fc1"]
    dgrad, wgrad = fc1.gemms_bwd
    d, w = cm.gemm_time(*dgrad), cm.gemm_time(*wgrad)
    b, i = column_backward_block(cm, s.training, fc1, 1e-9, 1e-9)
    assert b == pytest.approx(0.0, abs=1e-8)                 # a nearly free kernel beside: nothing lost
    b, i = column_backward_block(cm, s.training, fc1, 3 * d, 3 * w)
    assert b == pytest.approx(2 * d + 2 * w)                 # the collectives outlast their GEMMs
    assert i == pytest.approx(2 * d + 3 * w)                 # a lone I keeps the reduce-scatter whole
    sm, cm_m, _ = _ops()                                      # with the margin: GEMMs on 116 SMs
    assert column_backward_block(cm_m, sm.training, fc1, 1e-9, 1e-9)[0] > 0


def test_only_a_layers_four_linears_are_userbuffers_gemms():
    s, cm, ops = _ops()
    from pipesim.costs.layers import head_ops
    head = next(o for o in head_ops(s) if o.name == "lm_head")
    assert forward_block(cm, s.training, 8, head, 1e-3) is None
    dec = pipesim.load_scenario(BASE, ["training.tp_overlap=decomposed"])
    for name in ("qkv", "fc2"):
        assert op_terms(dec, cost_model_for(dec), ops[name])[4] != op_terms(s, cm, ops[name])[4]


def test_both_engines_agree_and_the_userbuffers_step_is_slower_here():
    base = pipesim.load_scenario(BASE, ["parallel.data=2", "system.num_nodes=2", "training.global_batch_size=4",
                                        "training.tp_overlap=decomposed"])
    s = pipesim.load_scenario(BASE, ["parallel.data=2", "system.num_nodes=2", "training.global_batch_size=4"])
    dag = simulate(s, trace=False).to_dict(include_trace=False)
    engine = simulate(s, trace=False, engine_choice="simpy").to_dict(include_trace=False)
    assert dag["step_time_s"] == engine["step_time_s"]
    assert dag["step_time_s"] > simulate(base, trace=False).step_time_s


@pytest.mark.parametrize("cfg, message", [
    ("{qkv: {num_sm: 4}}", "training.tp_overlap_cfg.qkv: expected one of"),
    ("{all: {num_sm: 0}}", "num_sm must be at least 1 SM"),
    ("{fc1_wgrad: {num_splits: 0}}", "num_splits must be at least 1"),
    ("{all: {num_sms: 4}}", "training.tp_overlap_cfg.all.num_sms: unknown key"),
])
def test_bad_userbuffers_settings_get_one_line(cfg, message):
    with pytest.raises(ScenarioError, match=message):
        pipesim.load_scenario(BASE, [f"training.tp_overlap_cfg={cfg}"])


def test_a_kernel_on_every_sm_is_refused():
    s = pipesim.load_scenario(BASE, ["training.tp_overlap_cfg={proj_fprop: {num_sm: 132}}"])
    with pytest.raises(ScenarioError, match=r"tp_overlap_cfg.proj_fprop.num_sm: 132 .* leaves no SM"):
        cost_model_for(s)


def test_userbuffers_hold_a_buffer_per_overlapped_gemm_for_the_whole_run():
    """TE allocates a registered buffer of [seq x micro-batch / CP, hidden] per overlapped GEMM (12
    in TE 2.x), the six all-gather ones in FP8 under FP8; none without TE's overlap."""
    from pipesim.costs.tp_overlap import userbuffers_bytes
    from pipesim.whatif.analytic import analytic_report
    s = pipesim.load_scenario(BASE, ["training.tp_overlap=decomposed"])    # the memory is TE's either way
    elements = 4096 * 8192
    assert userbuffers_bytes(s) == 12 * 2 * elements
    assert userbuffers_bytes(pipesim.load_scenario(s, ["training.precision=fp8"])) == (6 + 12) * elements
    for off in (["training.overlap_tp_comm=false"], ["training.kernel_fusion=eager"],
                ["parallel.sequence_parallel=false"]):
        assert userbuffers_bytes(pipesim.load_scenario(s, off)) == 0.0
    plain = pipesim.load_scenario(s, ["training.overlap_tp_comm=false"])
    rep, base = simulate(s, trace=False).to_dict(include_trace=False), simulate(plain, trace=False).to_dict(include_trace=False)
    by = rep["ranks"][0]["peak_memory_by_category"]
    assert by["buffers"] - base["ranks"][0]["peak_memory_by_category"]["buffers"] == pytest.approx(userbuffers_bytes(s))
    assert analytic_report(s)["peak_memory_bytes"] - analytic_report(plain)["peak_memory_bytes"] == \
        pytest.approx(userbuffers_bytes(s))
    engine = simulate(s, trace=False, engine_choice="simpy").to_dict(include_trace=False)
    assert engine["peak_memory_bytes"] == rep["peak_memory_bytes"]
