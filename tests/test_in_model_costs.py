"""Op costs timed inside the model (pipesim/calibrate/in_context.py) and the eager layout copies
(pipesim/costs/eager_copies.py)."""
import json
import os

import pytest

from pipesim.calibrate.in_context import samples_by_key

ROOT = os.path.join(os.path.dirname(__file__), "..")
TINY = os.path.join(ROOT, "scenarios", "emulator", "tiny_1f1b.yaml")

F32 = {"dtype": "fp32"}
ITEMS = [("gemm", dict(F32, m=8, k=4, n=12)), ("gemm", dict(F32, m=4, k=8, n=12)),
         ("bmm", dict(F32, batch=2, m=8, n=8, k=4, bias=True)),
         ("bmm", dict(F32, batch=2, m=8, n=4, k=8, bias=False)),
         ("softmax_fwd", dict(F32, rows=16, cols=8)), ("layer_norm_bwd", dict(F32, rows=8, cols=4)),
         ("gelu_fwd", dict(F32, numel=96)), ("bias_bwd", dict(F32, rows=8, cols=12)), ("copy", {"bytes": 384}),
         ("cross_entropy_bwd", {"tokens": 8, "vocab": 12})]


def _key(op, shape):
    return (op, tuple(sorted(shape.items())))


def test_aten_calls_map_onto_the_cost_models_keys():
    rec = [("addmm", [(12,), (8, 4), (4, 12)], "fwd", 5e-3, 384),       # linear with a bias
           ("mm", [(8, 4), (4, 12)], "bwd", 4e-3, 384),                  # same GEMM in a backward
           ("addmm_", [(12, 4), (12, 8), (8, 4)], "bwd", 3e-3, 192),     # weight gradient, transposed
           ("baddbmm", [(8, 8), (2, 8, 4), (2, 4, 8)], "fwd", 2e-3, 512),
           ("bmm", [(2, 4, 8), (2, 8, 8)], "bwd", 1e-3, 256),            # P^T dC: the transpose of (8, 4, k=8)
           ("_softmax", [(2, 8, 8)], "fwd", 7e-4, 512),
           ("native_layer_norm_backward", [(8, 4), (8, 4)], "bwd", 6e-4, 128),
           ("gelu", [(8, 12)], "fwd", 5e-4, 384), ("sum", [(8, 12)], "bwd", 4e-4, 48),
           ("cat", [], "bwd", 3e-4, 384), ("clone", [(8, 12)], "bwd", 9.0, 384),   # clone only counts forward
           ("view", [(8, 12)], "fwd", 9.0, 0),
           ("nll_loss_backward", [(), (8, 12), (8,), ()], "bwd", 1e-4, 384),          # a cross-entropy's
           ("_log_softmax_backward_data", [(8, 12), (8, 12)], "bwd", 2e-4, 384),      # two halves
           ("nll_loss_backward", [(), (8, 12), (8,), ()], "bwd", 3e-4, 384),
           ("_log_softmax_backward_data", [(8, 12), (8, 12)], "bwd", 2e-4, 384)]
    got = samples_by_key(rec, ITEMS, {(8, 12): 1e-3})
    assert got[_key("gemm", dict(F32, m=8, k=4, n=12))] == pytest.approx([4e-3, 4e-3])   # 5 ms less the 1 ms bias
    assert got[_key("gemm", dict(F32, m=4, k=8, n=12))] == [3e-3]
    assert got[_key("bmm", dict(F32, batch=2, m=8, n=8, k=4, bias=True))] == [2e-3]
    assert got[_key("bmm", dict(F32, batch=2, m=8, n=4, k=8, bias=False))] == [1e-3]
    assert got[_key("softmax_fwd", dict(F32, rows=16, cols=8))] == [7e-4]
    assert got[_key("layer_norm_bwd", dict(F32, rows=8, cols=4))] == [6e-4]
    assert got[_key("gelu_fwd", dict(F32, numel=96))] == [5e-4]
    assert got[_key("bias_bwd", dict(F32, rows=8, cols=12))] == [4e-4]
    assert got[_key("copy", {"bytes": 384})] == [3e-4]
    assert got[_key("cross_entropy_bwd", {"tokens": 8, "vocab": 12})] == [pytest.approx(4e-4)]  # medians 2e-4 + 2e-4
    assert len(got) == 10


def test_stage_trace_replaces_the_isolated_timings():
    torch = pytest.importorskip("torch")
    from pipesim.calibrate.in_context import in_context, trace_stages
    from pipesim.calibrate.run import measure_ops, plan
    from pipesim.emulator import prepare
    from pipesim.emulator.layers import TPGroup, WeightGradStore
    from pipesim.emulator.model import build_stages
    s = prepare(TINY)
    stages, _ = build_stages(s, [0, 1], TPGroup(), WeightGradStore(), 0, torch.float32, False)
    items, notes = plan("cpu", s)
    ops = [m.to_dict() for m in measure_ops(items, "cpu", quick=True, notes=notes, budget_s=0.0)]
    shape = (s.model.seq_length, s.training.micro_batch_size, s.model.hidden_size)
    records = trace_stages(stages, shape, s.model.vocab_size, patterns=1)
    out, replaced = in_context(ops, items, records)
    now = {m["op"] for m in out if m.get("impl") == "torch in-model"}
    assert now >= {"gemm", "bmm", "softmax_fwd", "softmax_bwd", "layer_norm_fwd", "layer_norm_bwd",
                   "gelu_fwd", "gelu_bwd", "copy", "cross_entropy_fwd", "cross_entropy_bwd"}
    assert replaced == sum(m.get("impl") == "torch in-model" for m in out)
    assert all(m["median_s"] > 0 and m["isolated_s"] > 0 for m in out if "isolated_s" in m)
    assert {m["op"] for m in out if "mean_s" in m} == now
    assert len(out) == len(ops)
    for m in stages.values():                   # the trace leaves no gradient behind
        assert all(p.grad is None or not p.grad.any() for p in m.parameters())


def test_in_model_keys_carry_the_mean_of_their_samples(monkeypatch):
    from pipesim.calibrate import in_context as ic
    m = {"op": "copy", "shape": {"bytes": 64}, "median_s": 0.5, "p10_s": 0.5, "p90_s": 0.5, "n": 3}
    monkeypatch.setattr(ic, "samples_by_key", lambda records, items, bias: {ic._freeze("copy", {"bytes": 64}): [1.0, 1.0, 4.0]})
    (out,), replaced = ic.in_context([m], [], [])
    assert replaced == 1 and out["median_s"] == 1.0 and out["mean_s"] == pytest.approx(2.0) and out["isolated_s"] == 0.5


def test_layout_copies_only_on_cpu_profiles_with_a_host_model(tmp_path):
    from pipesim.costs.eager_copies import copy_bytes, lookups
    from pipesim.costs.stage import stage_costs
    from pipesim.costs.summary import required_measurements
    from pipesim.emulator import prepare
    s = prepare(TINY)
    m = s.model
    T = s.training.micro_batch_size * m.seq_length
    fwd, bwd = copy_bytes(s)
    assert fwd == [T * m.hidden_size * 4]
    assert bwd == [T * 3 * m.hidden_size * 4, T * m.hidden_size * 4, T * m.hidden_size * 4]
    assert all(item in required_measurements(s) for item in lookups(s))
    meas = [{"op": "copy", "shape": {"bytes": n}, "median_s": 1e-3} for n in sorted(set(fwd + bwd))]
    prof = {"version": 1, "device": {"name": "cpu-core-fp32", "kind": "cpu"}, "measurements": meas}
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(prof))
    prof["device"]["host"] = {"layout": {"cores": 2, "ranks": 2, "threads_per_rank": 1}, "action_s": 0.0,
                              "kernel_launch_s": 0.0}
    host = tmp_path / "host.json"
    host.write_text(json.dumps(prof))
    a = stage_costs(prepare(TINY, [f"costs.profile={plain}"]))[0]
    b = stage_costs(prepare(TINY, [f"costs.profile={host}"]))[0]
    assert b.forward - a.forward == pytest.approx(a.layers * 1e-3)
    assert b.backward - a.backward == pytest.approx(a.layers * 3e-3)
    assert b.input_grad - a.input_grad == pytest.approx(a.layers * 3e-3)
    assert b.weight_grad == pytest.approx(a.weight_grad)


def test_contention_leaves_tensor_parallel_waits_out():
    from pipesim.emulator.results import contention
    from pipesim.report.trace import TraceEvent
    busy = TraceEvent(0, "compute", "F", 0, 0, 0.0, 0.010, args={"cpu_s": 0.008})
    waiting = TraceEvent(1, "compute", "F", 0, 0, 0.0, 0.020, args={"cpu_s": 0.008, "tp": 0.010})
    assert contention([busy]) == pytest.approx(1.25)
    assert contention([busy, waiting]) == pytest.approx(1.25)     # the 10 ms in the all-reduce is not contention
    # the copies inside a gather (CPU time within the TP window) leave the CPU side as its wall leaves
    # the wall side: a quiet machine reads 1, not 0.8
    copying = TraceEvent(2, "compute", "F", 0, 0, 0.0, 0.020, args={"cpu_s": 0.010, "tp": 0.010, "tp_cpu": 0.002})
    assert contention([busy, copying]) == pytest.approx(1.25)


def test_tp_group_hands_its_collectives_cpu_time_to_one_action():
    from pipesim.emulator.layers import TPGroup
    tp = TPGroup(size=2)
    tp.cpu_s = 0.003
    assert tp.take_cpu() == 0.003 and tp.take_cpu() == 0.0


def test_fitted_memory_rate_ignores_ops_timed_in_the_model():
    from pipesim.costs.profile import IN_MODEL, profile_from_dict
    copy = {"op": "copy", "shape": {"bytes": 2**24}, "median_s": 1e-3}
    gelu = {"op": "gelu_fwd", "shape": {"numel": 2**24, "dtype": "fp32"}, "median_s": 1e-3}
    dev = {"name": "cpu-core-fp32", "kind": "cpu"}
    alone = profile_from_dict({"version": 1, "device": dev, "measurements": [copy, gelu]})
    slow = dict(gelu, median_s=1.0, impl=IN_MODEL, isolated_s=1e-3)     # the same op, timed in the model
    both = profile_from_dict({"version": 1, "device": dev, "measurements": [copy, slow]})
    assert both.achieved("memory") == pytest.approx(alone.achieved("memory"))
    assert both.lookup("gelu_fwd", numel=2**24, dtype="fp32")[0] == 1.0     # lookups use the in-model time


def test_ranks_that_ran_an_op_in_their_stages_give_its_cost():
    from pipesim.costs.profile import IN_MODEL
    from pipesim.emulator.rank_calibration import _mean_over_ranks
    key = {"op": "gemm", "shape": {"m": 8, "k": 8, "n": 8, "dtype": "fp32"}, "p10_s": 1.0, "p90_s": 1.0, "n": 3}
    alone = dict(key, median_s=1.0)                                   # rank 0 has no LM head: timed alone
    inside = dict(key, median_s=3.0, impl=IN_MODEL, isolated_s=1.5)   # rank 1 ran it in its stage
    other = dict(key, median_s=5.0, impl=IN_MODEL, isolated_s=2.5)
    (m,) = _mean_over_ranks([[alone], [inside], [other]])
    assert m["median_s"] == pytest.approx(4.0) and m["isolated_s"] == pytest.approx(2.0) and m["impl"] == IN_MODEL
    (m,) = _mean_over_ranks([[alone], [dict(alone, median_s=3.0)]])
    assert m["median_s"] == pytest.approx(2.0)


def test_measured_allreduce_replaces_the_link_for_groups_of_its_size(tmp_path):
    from pipesim.calibrate.host import host_collective_seconds, host_model
    from pipesim.costs.ops import Comm
    from pipesim.costs.profile import load_profile
    from pipesim.costs.stage import comm_seconds
    from pipesim.emulator import prepare
    s = prepare(TINY)
    host = host_model(s, {"layer_fwd_s": 1e-4, "layer_bwd_s": 1e-4}, 0.0, [], {"cores": 2, "ranks": 2},
                      [(4096, 1e-3 + 4096 / 1e8), (2**20, 1e-3 + 2**20 / 1e8)], ranks=2)
    assert host["allreduce"]["latency_s"] == pytest.approx(1e-3) and host["allreduce"]["bandwidth_Bps"] == pytest.approx(1e8)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"version": 1, "device": {"name": "cpu-core-fp32", "kind": "cpu", "host": host},
                                "measurements": []}))
    prof = load_profile(path)
    assert host_collective_seconds(prof, "all_reduce", 1e6, 2) == pytest.approx(1e-3 + 1e-2)
    assert host_collective_seconds(prof, "all_reduce", 1e6, 4) is None                      # measured over 2 ranks only
    two, four = Comm("all_reduce", 1e6, "tp", 2, count=3), Comm("all_reduce", 1e6, "tp", 4)
    assert comm_seconds(s, [two], prof) == pytest.approx(3 * (1e-3 + 1e-2))
    assert comm_seconds(s, [four], prof) == pytest.approx(comm_seconds(s, [four]))   # the link, as before


def test_first_and_last_stage_pay_their_measured_host_extra(tmp_path):
    from pipesim.calibrate.host import launches_per_layer, stage_extras
    from pipesim.costs.stage import stage_costs
    from pipesim.emulator import prepare
    s = prepare(TINY)
    per_op = 1e-5
    n = launches_per_layer(s)
    dispatch = {"layer_fwd_s": n * per_op / 2, "layer_bwd_s": n * per_op / 2,
                "first_fwd_s": 1e-3, "first_bwd_s": 2e-3, "last_fwd_s": 3e-3, "last_bwd_s": 4e-3}
    ex = stage_extras(s, dispatch)
    # embedding: 1 op (1 launch forward, 1 backward); head: norm, LM head, loss (3 forward, 4 backward)
    assert ex == pytest.approx({"first_fwd_s": 1e-3 - per_op, "first_bwd_s": 2e-3 - per_op,
                                "last_fwd_s": 3e-3 - 3 * per_op, "last_bwd_s": 4e-3 - 4 * per_op})
    host = {"layout": {"cores": 2, "ranks": 2, "threads_per_rank": 1}, "action_s": 0.0, "kernel_launch_s": 0.0}
    paths = []
    for i, h in enumerate((host, dict(host, stage_extra=ex))):
        path = tmp_path / f"p{i}.json"
        path.write_text(json.dumps({"version": 1, "device": {"name": "cpu-core-fp32", "kind": "cpu", "host": h},
                                    "measurements": []}))
        paths.append(stage_costs(prepare(TINY, [f"costs.profile={path}"])))
    (a0, a1), (b0, b1) = paths
    assert b0.forward - a0.forward == pytest.approx(ex["first_fwd_s"])
    assert b1.backward - a1.backward == pytest.approx(ex["last_bwd_s"])
    assert b1.input_grad - a1.input_grad == pytest.approx(ex["last_bwd_s"])


def test_in_model_allreduce_times_override_the_fit_at_their_sizes(tmp_path):
    from pipesim.calibrate.host import host_collective_seconds, host_model
    from pipesim.costs.profile import load_profile
    from pipesim.emulator import prepare
    s = prepare(TINY)
    fit = [(4096, 1e-3 + 4096 / 1e8), (2**20, 1e-3 + 2**20 / 1e8)]
    host = host_model(s, {"layer_fwd_s": 1e-4, "layer_bwd_s": 1e-4}, 0.0, [], {"cores": 2, "ranks": 2},
                      fit, ranks=2, in_model={"all_reduce": [(169728, 5e-3)], "all_gather": [(4096, 7e-3)]},
                      tp_size=2)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"version": 1, "device": {"name": "cpu-core-fp32", "kind": "cpu", "host": host},
                                "measurements": []}))
    prof = load_profile(path)
    assert host_collective_seconds(prof, "all_reduce", 169728.0, 2) == pytest.approx(5e-3)            # the trace's time
    assert host_collective_seconds(prof, "all_reduce", 169729.0, 2) == pytest.approx(1e-3 + 169729 / 1e8)   # the fit
    assert host_collective_seconds(prof, "all_reduce", 169728.0, 4) is None
    # an all-gather the traces ran takes their time; a reduce-scatter (gloo's all-reduce and slice)
    # the all-reduce fit; an all-gather without a fit of its own none
    assert host_collective_seconds(prof, "all_gather", 4096.0, 2) == pytest.approx(7e-3)
    assert host_collective_seconds(prof, "reduce_scatter", 8192.0, 2) == pytest.approx(1e-3 + 8192 / 1e8)
    assert host_collective_seconds(prof, "all_gather", 8192.0, 2) is None
    gathers = [(4096, 2e-3 + 4096 / 5e7), (2**20, 2e-3 + 2**20 / 5e7)]          # gloo's all-gather fit
    host = host_model(s, {"layer_fwd_s": 1e-4, "layer_bwd_s": 1e-4}, 0.0, [], {"cores": 2, "ranks": 2},
                      fit, ranks=2, allgather_points=gathers)
    path.write_text(json.dumps({"version": 1, "device": {"name": "cpu-core-fp32", "kind": "cpu", "host": host},
                                "measurements": []}))
    assert host_collective_seconds(load_profile(path), "all_gather", 8192.0, 2) == pytest.approx(2e-3 + 8192 / 5e7)


def test_in_model_collectives_read_the_tp_log_by_kind_and_size():
    from pipesim.emulator.layers import TPGroup
    from pipesim.emulator.rank_calibration import in_model_collectives
    tp = TPGroup(size=2)
    ar = "all_reduce"
    tp.log = [("fwd", 0.0, 1.0, 64, ar), ("fwd", 2.0, 6.0, 64, ar), ("bwd", 6.0, 6.5, 8, ar), ("bwd", 7.0, 8.0, 64, ar)]
    other = [("fwd", 0.0, 1.0, 64, ar), ("bwd", 1.0, 1.2, 8, ar)]
    late = [("fwd", 0.0, 9.0, 64, ar), ("bwd", 9.0, 9.1, 8, ar)]
    # per size, each trace's mean (64 B: 2.0, 1.0, 9.0), then the median over the traces
    assert in_model_collectives(tp, [tp.log, other, late]) == {ar: [[8, pytest.approx(0.2)], [64, 2.0]]}
    assert in_model_collectives(tp, [tp.log]) == {ar: [[8, 0.5], [64, 2.0]]}
    assert in_model_collectives(TPGroup(size=1), [tp.log]) == {}
    # sequence parallelism: gathers and scatters of one size apart; a context-parallel exchange
    # (logged without a kind) is not a TP collective
    sp = [("fwd", 0.0, 1.0, 64, "all_gather"), ("fwd", 1.0, 4.0, 64, "reduce_scatter"), ("fwd", 4.0, 9.0, 64)]
    assert in_model_collectives(TPGroup(size=2, sequence_parallel=True), [sp]) == {
        "all_gather": [[64, 1.0]], "reduce_scatter": [[64, 3.0]]}


def test_the_in_model_trace_feeds_the_whole_sequence_under_sequence_parallelism(monkeypatch):
    """Under sequence parallelism a stage passes a 1/t shard ([s/t, b, h], the executor's shape),
    but the first stage embeds the whole sequence: the trace's tokens are s long, so its ops and
    TP collectives have the steps' sizes (they had half of them, and no in-model time matched)."""
    import types

    import torch.distributed as dist

    from pipesim.calibrate import in_context
    from pipesim.emulator import prepare
    from pipesim.emulator.layers import TPGroup
    from pipesim.emulator.rank_calibration import trace_round
    s = prepare(TINY, ["parallel.tensor=2", "parallel.pipeline=1", "parallel.sequence_parallel=true"])
    seen = {}
    monkeypatch.setattr(in_context, "trace_stages", lambda stages, shape, vocab, counter, patterns, token_seq:
                        seen.update(shape=shape, token_seq=token_seq) or [])
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: None)
    tp = TPGroup(size=2, sequence_parallel=True)
    tp.log.append(("fwd", 0.0, 1.0, 64, "all_gather"))
    executor = types.SimpleNamespace(rt=types.SimpleNamespace(stages={}, tp=tp, counter=None),
                                     shape=(s.model.seq_length // 2, 1, s.model.hidden_size))
    records, log = trace_round(s, executor, patterns=1)
    assert seen["token_seq"] == s.model.seq_length and seen["shape"][0] == s.model.seq_length // 2
    assert log == [("fwd", 0.0, 1.0, 64, "all_gather")] and tp.log == []


def test_traces_between_the_steps_vote_with_the_median_of_their_means(monkeypatch):
    """Each trace contributes its mean (an action costs the sum of its calls); across traces the
    median, so one trace slowed by another tenant does not move the cost."""
    from pipesim.calibrate import in_context as ic
    m = {"op": "copy", "shape": {"bytes": 64}, "median_s": 0.5, "p10_s": 0.5, "p90_s": 0.5, "n": 3}
    key = ic._freeze("copy", {"bytes": 64})
    by_trace = {"a": [1.0, 3.0], "b": [2.0, 2.0], "c": [9.0, 9.0], "d": [], "e": [2.5, 2.5]}
    monkeypatch.setattr(ic, "samples_by_key", lambda records, items, bias: {key: by_trace[records]} if by_trace[records] else {})
    (out,), replaced = ic.in_context([m], [], "a", ["b", "c", "d", "e"])
    # trace means 2.0, 2.0, 9.0, 2.5 (d has no call of the key): median 2.25, not the pooled mean 3.875
    assert replaced == 1 and out["mean_s"] == pytest.approx(2.25) and out["rounds"] == 4
    assert out["n"] == 8 and out["median_s"] == pytest.approx(2.5)


def test_the_calibration_with_the_most_traces_sets_the_in_model_cost():
    from pipesim.emulator.rank_calibration import _mean_over_ranks
    base = {"op": "copy", "shape": {"bytes": 64}, "p10_s": 1.0, "p90_s": 1.0, "n": 1, "impl": "torch in-model"}
    before = [dict(base, median_s=1.0, mean_s=1.0, rounds=1)]
    after = [dict(base, median_s=3.0, mean_s=3.0, rounds=7)]
    (m,) = _mean_over_ranks([before, after, before, after])
    assert m["mean_s"] == 3.0 and m["median_s"] == 3.0


def test_dp_gradient_allreduce_takes_the_measured_host_time(tmp_path):
    from pipesim.calibrate.host import host_model
    from pipesim.emulator import prepare
    from pipesim.sim.dp_time import collective_seconds
    from pipesim.sim.workload import build
    s = prepare(TINY)
    host = host_model(s, {"layer_fwd_s": 1e-4, "layer_bwd_s": 1e-4}, 0.0, [], {"cores": 2, "ranks": 2},
                      [(4096, 1e-3 + 4096 / 1e8), (2**20, 1e-3 + 2**20 / 1e8)], ranks=2)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"version": 1, "device": {"name": "cpu-core-fp32", "kind": "cpu", "host": host},
                                "measurements": []}))
    over = ["parallel.pipeline=1", "parallel.data=2", "training.schedule=1f1b"]
    measured = build(prepare(TINY, over + [f"costs.profile={path}"]))
    analytic = build(prepare(TINY, over))
    assert collective_seconds(measured, "all_reduce", 1e6, 0) == pytest.approx(1e-3 + 1e6 / 1e8)
    assert collective_seconds(analytic, "all_reduce", 1e6, 0) != pytest.approx(1e-3 + 1e6 / 1e8)


def test_host_dispatch_is_measured_for_context_parallel_scenarios():
    # the tiny 2-stage model of the host calibration drops CP (it fails the GPU count otherwise,
    # and `pipesim crosscheck` of a CP scenario stopped in CALIBRATE_BEFORE)
    from pipesim.calibrate.host import measure_dispatch, tiny_overrides
    from pipesim.emulator import prepare
    s = prepare(os.path.join(ROOT, "scenarios", "emulator", "crosscheck_cp2.yaml"))
    assert s.parallel.context == 2
    tiny = prepare(s, tiny_overrides(s, 1))
    assert (tiny.parallel.context, tiny.parallel.pipeline) == (1, 2)
    d = measure_dispatch(s, reps=5)
    assert min(d.values()) >= 0
    # the first stage's 1-layer forward was timed: its per-layer share plus its extra is that time
    # (either part alone can be clipped to 0 when a loaded machine inverts a small difference)
    assert d["layer_fwd_s"] + d["first_fwd_s"] > 0 and d["bare_call_s"] > 0
