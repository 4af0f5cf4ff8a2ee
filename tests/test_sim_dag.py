"""The DAG fast path (sim/dag.py) against the SimPy engine: bit-equal reports on every schedule."""
import pytest

import pipesim
from pipesim.schedules import SCHEDULES
from _sim_helpers import tiny

P, M = 4, 8
LAYOUTS = {"gpipe": 1, "1f1b": 1, "interleaved": 2, "looped-bfs": 2, "zb-h1": 1, "zb-h2": 1, "zb-v": 2,
           "dualpipe-v": 2}
# Settings that change what the fast path must reproduce: DP buckets sharing the port with the
# sends (one node: p2p and DP both on NVLink), reduction after the plan + ZeRO-1 all-gather,
# quantized sends with recomputation, a straggler, slow links where sends queue on a port, and
# tensor parallelism without SP (each received tensor all-gathered over the TP group), and activation
# offloading over a slow host link (copies outlast the passes; activations leave and return), and
# context parallelism without data parallelism.
VARIANTS = {
    "dp-overlap": dict(data=2, bw_GBps=0.05, extra_training={"grad_bucket_MB": 0.05}),
    "dp-after-zero1": dict(data=2, extra_training={"overlap_grad_reduce": False, "zero_stage": 1}),
    "zero1-param-gather-overlap": dict(data=2, extra_training={"zero_stage": 1, "overlap_param_gather": True}),
    "zero2-every-microbatch": dict(data=2, bw_GBps=0.05, extra_training={"zero_stage": 2, "grad_bucket_MB": 0.05}),
    "quantized-recompute": dict(extra_training={"activation_compression_bits": 8, "recompute": "full"}),
    "straggler": dict(data=2, heterogeneity={"rank_speed": {2: 0.6}}),
    "slow-links": dict(bw_GBps=0.002, latency_us=50.0),
    "tp-scatter-gather": dict(tensor=2),
    "offload": dict(extra_training={"offload_activation_layers": 1}, extra_system={"host_link_GBps": 1e-3}),
    # data 1 but context 2: gradients are still reduced (and ZeRO-1 shards still gathered) over
    # data x context (the DAG path used to skip both when parallel.data was 1)
    "cp-only-zero1": dict(gpus_per_node=8, extra_parallel={"context": 2},
                          extra_training={"zero_stage": 1, "grad_bucket_MB": 0.05}),
}


def test_every_registered_schedule_is_covered():
    assert set(SCHEDULES) <= set(LAYOUTS)


def both(s, **kw):
    fast = pipesim.simulate(s, trace=False, **kw)
    ref = pipesim.simulate(s, trace=False, engine_choice="simpy", **kw)
    return fast, ref


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_dag_is_bit_equal_to_simpy(name, variant):
    s = tiny(P=P, M=M, V=LAYOUTS[name], schedule=name, **VARIANTS[variant])
    fast, ref = both(s)
    assert fast.engine == "dag" and ref.engine == "simpy"
    assert fast.step_time_s == ref.step_time_s
    assert [r["compute_busy_s"] for r in fast.ranks] == [r["compute_busy_s"] for r in ref.ranks]
    assert [r["peak_memory_bytes"] for r in fast.ranks] == [r["peak_memory_bytes"] for r in ref.ranks]
    a, b = fast.to_dict(include_trace=False), ref.to_dict(include_trace=False)
    a.pop("engine"), b.pop("engine")
    assert a == b


def test_port_sharing_is_exercised():
    """The dp-overlap variant really interleaves buckets with sends on one port (else the test
    above would not check the lazy DP stream)."""
    s = tiny(P=P, M=M, schedule="1f1b", **VARIANTS["dp-overlap"])
    r = pipesim.simulate(s, trace=True, engine_choice="simpy")
    sends = sorted((e.start, e.end) for e in r.events if e.rank == 3 and e.stream == "send")
    dp = sorted((e.start, e.end) for e in r.events if e.rank == 3 and e.stream == "dp")
    assert sends and dp and dp[0][0] < sends[-1][1]


@pytest.mark.parametrize("kw, why", [
    (dict(data=2, extra_training={"zero_stage": 3}), {}),
    (dict(data=2, heterogeneity={"rank_speed": {2: 0.6}}), {"mode": "full"}),    # unequal replicas
    (dict(), {"trace": True}),
])
def test_engine_runs_where_the_dag_does_not_apply(kw, why):
    s = tiny(P=2, M=4, **kw)
    r = pipesim.simulate(s, **{"trace": False, **why})
    assert r.engine == "simpy"


def test_deadlock_still_reported_by_the_engine(tmp_path):
    from pipesim.errors import PlanError
    from pipesim.schedules import Action, Plan
    # rank 0 waits for a gradient of micro-batch 1 before rank 1 has received micro-batch 1's forward
    rows = ((Action(0, "F", 0), Action(0, "B", 1), Action(0, "F", 1), Action(0, "B", 0)),
            (Action(1, "F", 0), Action(1, "B", 0), Action(1, "F", 1), Action(1, "B", 1)))
    plan = Plan("bad", 2, 2, 2, (0, 1), rows)
    s = tiny(P=2, M=2)
    with pytest.raises(PlanError, match="deadlock"):
        pipesim.simulate(s, trace=False, plan=plan)


@pytest.mark.parametrize("variant", ["dp-overlap", "dp-after-zero1", "slow-links"])
@pytest.mark.parametrize("name", ["1f1b", "zb-v", "interleaved"])
def test_symmetric_full_mode_walks_one_replica_bit_equal(name, variant):
    s = tiny(P=P, M=M, V=LAYOUTS[name], schedule=name, **{"data": 2, **VARIANTS[variant], **(
        {"data": 3} if variant == "slow-links" else {})})
    fast, ref = both(s, mode="full")
    assert fast.engine == "dag" and ref.engine == "simpy" and len(fast.ranks) == s.num_gpus
    a, b = fast.to_dict(include_trace=False), ref.to_dict(include_trace=False)
    a.pop("engine"), b.pop("engine")
    assert a == b


@pytest.mark.parametrize("schedule, p, v", [("1f1b", 1, 1), ("interleaved", 2, 2)])
def test_moe_a2a_overlap_plans_bit_equal(schedule, p, v):
    """Issue 14's fused F+B steps ("FB") are compute steps like any other for the DAG pass."""
    from pipesim import load_scenario
    s = load_scenario({"model": {"preset": "llama2-7b", "num_layers": 8, "num_experts": 16, "moe_top_k": 4,
                                 "seq_length": 1024},
                       "system": {"preset": "dgx-h100", "num_nodes": 2 * p},
                       "parallel": {"sequence_parallel": True, "expert": 16, "tensor": 1, "pipeline": p,
                                    "virtual_stages": v},
                       "training": {"global_batch_size": 8 * 16, "attention": "flash", "schedule": schedule,
                                    "moe_a2a_overlap": True}})
    fast, ref = both(s)
    assert fast.engine == "dag" and fast.moe["a2a_exposed_s"] < fast.moe["a2a_total_s"]
    a, b = fast.to_dict(include_trace=False), ref.to_dict(include_trace=False)
    a.pop("engine"), b.pop("engine")
    assert a == b


@pytest.mark.parametrize("most", [1, 3])
def test_flat_memory_replay_equals_the_tuple_replay(most):
    """The flat (time, change id) memory log (DAG pass and engine) replays to the same peak and
    breakdown, bit for bit, as a (time, changes) tuple log: random logs with ties, integer static
    bytes, and changes of one entry (the one-delta fast path) or up to three."""
    import random
    from pipesim.sim.memory import CATEGORIES, ChangeIds, MemoryTracker
    rng = random.Random(7 + most)
    for _ in range(200):
        static = {c: rng.choice([0, 0.0, rng.random() * 1e9]) for c in CATEGORIES[:3]}
        a, b, reg = MemoryTracker(static), MemoryTracker(static), ChangeIds()
        pool = [tuple((rng.choice(CATEGORIES), rng.uniform(-1e8, 3e8)) for _ in range(rng.randint(1, most)))
                for _ in range(6)]
        times, ids = [], []
        for _ in range(rng.randint(0, 60)):
            t, ch = float(rng.randint(0, 20)) * 0.1, rng.choice(pool)
            a.log.append((t, ch))
            times.append(t)
            ids.append(reg.id_of(ch))
        b.flat = (times, ids, reg)
        a.finish(False)
        b.finish(False)
        assert reg.single or most > 1
        assert (a.peak, a.peak_by) == (b.peak, b.peak_by)
        assert [type(v) for v in a.peak_by.values()] == [type(v) for v in b.peak_by.values()]


def test_dag_runs_twice_on_one_workload():
    """Costs keep their memory change ids between runs of the same workload: equal results."""
    from pipesim.sim.dag import DagRun
    from pipesim.sim.workload import build
    w = build(tiny(P=P, M=M, schedule="1f1b", data=2), "representative")
    a, b = DagRun(w).run(), DagRun(w).run()
    assert [m.peak for m in a.mem] == [m.peak for m in b.mem] and [m.peak_by for m in a.mem] == [m.peak_by for m in b.mem]


def _reference_buckets(jobs, sends, sec):
    """The bucket stream as one Python loop per bucket (the engine's `_grad_reduce` with one
    member), interleaved with sends that reserve the same port at given times."""
    free, t, ivs, out = 0.0, 0.0, [], []
    pending = [(t0, dur, n, b) for t0, dur, n in jobs for b in range(n)]
    i = 0
    for when, dur_send in sends + [(float("inf"), 0.0)]:
        while i < len(pending):
            t0, dur, n, b = pending[i]
            if b == 0 and t0 > t:
                t = t0
            ready = t0 + dur * ((b + 1) / n)
            req = ready if ready > t else t
            if req >= when:
                break
            start = req if req > free else free
            free = t = start + sec
            if ivs and ivs[-1][1] == start:
                ivs[-1] = (ivs[-1][0], t)
            else:
                ivs.append((start, t))
            i += 1
            if b == n - 1:
                out.extend(ivs)
                ivs.clear()
        if when != float("inf"):
            start = when if when > free else free
            free = start + dur_send
    return out, free, t


def test_bucket_stream_stretches_equal_the_per_bucket_loop():
    """The DAG's bucket stream advances long stretches in numpy (one cumsum chain when buckets
    queue, elementwise when each starts at its ready time): intervals, stream and port times equal
    a per-bucket Python loop bit for bit, with sends taking the port between advances."""
    import random
    from types import SimpleNamespace
    from pipesim.sim.dag import DPStream
    from pipesim.sim.network import Port
    import pipesim.sim.dag as dag_module
    rng = random.Random(3)
    for case in range(60):
        n = rng.choice([1, 5, 40, 300])
        sec = rng.choice([1e-3, 3e-3, 7e-3]) * rng.random()
        jobs, t0 = [], 0.0
        for _ in range(rng.randint(1, 3)):
            t0 += rng.random()
            jobs.append((t0, rng.choice([0.0, 0.1, 0.5, 2.0]) * rng.random(), n))
        sends = sorted((rng.random() * 4, rng.random() * 0.05) for _ in range(rng.randint(0, 12)))
        w = SimpleNamespace(buckets={k: [1.0] * n for k in range(len(jobs))},
                            scenario=SimpleNamespace(parallel=SimpleNamespace(data=2, context=1)), grad_kind="all_reduce")
        port, dp_ivs = Port(), []
        stream = DPStream(w, 0, port, dp_ivs)
        orig = dag_module.bucket_seconds
        dag_module.bucket_seconds = lambda *a, **k: sec
        try:
            for k, (t0, dur, _) in enumerate(jobs):
                stream.put(k, t0, dur)
            for when, dur_send in sends:
                stream.advance(when)
                port.reserve(when, dur_send)
            stream.advance()
        finally:
            dag_module.bucket_seconds = orig
        ref, free, t = _reference_buckets(jobs, sends, sec)
        assert (dp_ivs, port.free_at, stream.t) == (ref, free, t), case


@pytest.mark.parametrize("variant", ["dp-overlap", "dp-after-zero1", "quantized-recompute", "slow-links",
                                     "tp-scatter-gather", "straggler"])
@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved"])
def test_dag_is_bit_equal_to_simpy_with_blocking_p2p(name, variant):
    """training.p2p_sync: a send waits for its receiver's batch to post the receive and the rank
    for its batch's sends (sim/p2p_sync.py); the DAG pass walks POST / WAIT steps for them."""
    kw = dict(VARIANTS[variant])
    kw["extra_training"] = dict(kw.get("extra_training", {}), p2p_sync=True)
    s = tiny(P=P, M=M, V=LAYOUTS[name], schedule=name, **kw)
    fast, ref = both(s)
    assert fast.engine == "dag" and ref.engine == "simpy"
    a, b = fast.to_dict(include_trace=False), ref.to_dict(include_trace=False)
    a.pop("engine"), b.pop("engine")
    assert a == b
    assert ref.step_time_s > pipesim.simulate(tiny(P=P, M=M, V=LAYOUTS[name], schedule=name, **VARIANTS[variant]),
                                              trace=False).step_time_s
