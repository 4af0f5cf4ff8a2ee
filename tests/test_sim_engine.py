"""Exact event logs of tiny scenarios worked out by hand (2 ranks, 1-2 micro-batches, known link)."""
from types import SimpleNamespace

import pytest

import pipesim
from pipesim.errors import PlanError
from pipesim.schedules import Action, Plan
from _sim_helpers import log, tiny, uniform

# Links in these tests run at exactly 1 GB/s with no latency, so 0.5e9 bytes take 0.5 s.
C = 0.5


def test_two_ranks_one_microbatch_gpipe():
    s = tiny(P=2, M=1, schedule="gpipe")
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, send=0.5e9))
    # rank 0: F [0,1], send [1,1.5]; rank 1: F [1.5,2.5], B [2.5,4.5], send back [4.5,5]; rank 0: B [5,7]
    assert log(r) == [
        (0, "B", 0, 0, 5.0, 7.0), (0, "F", 0, 0, 0.0, 1.0), (0, "RECV_B", 0, 0, 1.0, 5.0),
        (0, "SEND_F", 0, 0, 1.0, 1.5),
        (1, "B", 1, 0, 2.5, 4.5), (1, "F", 1, 0, 1.5, 2.5), (1, "RECV_F", 1, 0, 0.0, 1.5),
        (1, "SEND_B", 1, 0, 4.5, 5.0)]
    assert r.step_time_s == 7.0
    # rank 0 computes 3 of 7 s, rank 1 3 of 7 s (span = end of last compute = 7)
    assert [x["bubble_fraction"] for x in r.ranks] == pytest.approx([4 / 7, 4 / 7])
    # exposed p2p: rank 0 waited [1,5] of which the gradient was on the wire [4.5,5]; rank 1 [1,1.5]
    assert [x["exposed_comm_s"]["P2P"] for x in r.ranks] == pytest.approx([0.5, 0.5])


def test_two_ranks_two_microbatches_1f1b():
    s = tiny(P=2, M=2, schedule="1f1b")
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, send=0.5e9))
    # rank 0 row F0 F1 B0 B1, rank 1 row F0 B0 F1 B1 (warm-up P-1-r forwards)
    compute = [x for x in log(r, streams=("compute",))]
    assert compute == [
        (0, "B", 0, 0, 5.0, 7.0), (0, "B", 0, 1, 8.0, 10.0), (0, "F", 0, 0, 0.0, 1.0), (0, "F", 0, 1, 1.0, 2.0),
        (1, "B", 1, 0, 2.5, 4.5), (1, "B", 1, 1, 5.5, 7.5), (1, "F", 1, 0, 1.5, 2.5), (1, "F", 1, 1, 4.5, 5.5)]
    sends = log(r, streams=("send",))
    assert sends == [(0, "SEND_F", 0, 0, 1.0, 1.5), (0, "SEND_F", 0, 1, 2.0, 2.5),
                     (1, "SEND_B", 1, 0, 4.5, 5.0), (1, "SEND_B", 1, 1, 7.5, 8.0)]
    # free communication: (M + P - 1)(f + b) = 9; the two gradient hops on rank 0's critical path add 2c
    assert r.step_time_s == 10.0
    free = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, send=0.0))
    assert free.step_time_s == 9.0


@pytest.mark.parametrize("P,M", [(2, 3), (3, 4), (4, 6)])
def test_gpipe_with_comm_matches_hand_formula(P, M):
    # GPipe with non-blocking sends and c <= f: stage k runs F_m at (m + k) f + k c, so the last
    # forward ends at (M+P-1) f + (P-1) c and the backward wave adds (M+P-1) b + (P-1) c.
    f, b, c = 1.0, 2.0, 0.25
    s = tiny(P=P, M=M, schedule="gpipe")
    r = pipesim.simulate(s, stage_costs=uniform(s, f=f, b=b, send=c * 1e9))
    expected = (M + P - 1) * (f + b) + 2 * (P - 1) * c
    assert r.step_time_s == pytest.approx(expected)
    free = pipesim.simulate(s, stage_costs=uniform(s, f=f, b=b))
    # bubble grows from (P-1)/(M+P-1) to 1 - M(f+b)/expected
    assert free.bubble_fraction == pytest.approx((P - 1) / (M + P - 1))
    assert r.bubble_fraction == pytest.approx(1 - M * (f + b) / expected)


def test_sends_on_one_link_serialise():
    # a send of 2 s after a 1 s forward: the second micro-batch's send queues behind the first
    s = tiny(P=2, M=2, schedule="gpipe")
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, send=2e9, grad_send=0.0))
    sends = log(r, streams=("send",))
    assert sends[:2] == [(0, "SEND_F", 0, 0, 1.0, 3.0), (0, "SEND_F", 0, 1, 3.0, 5.0)]


def test_latency_adds_per_message():
    s = tiny(P=2, M=1, schedule="gpipe", latency_us=1e5)      # 0.1 s per message
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, send=0.5e9))
    assert r.step_time_s == pytest.approx(7.0 + 2 * 0.1)


def test_compression_adds_quantize_and_dequantize():
    s = tiny(P=2, M=1, schedule="gpipe")
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, send=0.25e9, grad_send=0.5e9, q=0.1, dq=0.2))
    # F 1, quantize 0.1, wire 0.25, dequantize 0.2, F 1, B 2, gradient 0.5, B 2
    assert r.step_time_s == pytest.approx(1 + 0.1 + 0.25 + 0.2 + 1 + 2 + 0.5 + 2)
    kinds = {(e.rank, e.kind) for e in r.events}
    assert (0, "QUANTIZE") in kinds and (1, "DEQUANTIZE") in kinds


def test_dp_buckets_overlap_the_backward():
    # one stage, data 2 on one node (ring all-reduce of B bytes over 2 GPUs: 2(n-1)/n B / bw = B / bw);
    # 2e9 bytes of gradients in two 1e9 buckets -> 1 s each, ready at the middle and end of B [1,3]
    s = tiny(P=1, M=1, data=2, extra_training={"grad_bucket_MB": 1000},
             extra_parallel={"collective": "ring"})
    costs = uniform(s, f=1, b=2, grad_bytes=2e9)
    r = pipesim.simulate(s, stage_costs=costs)
    dp = [(e.start, e.end) for e in r.events if e.kind == "DP" and e.rank == 0]
    assert dp == [(2.0, 3.0), (3.0, 4.0)]
    assert r.step_time_s == 4.0
    assert r.ranks[0]["exposed_comm_s"]["DP"] == pytest.approx(1.0)
    s2 = tiny(P=1, M=1, data=2, extra_training={"grad_bucket_MB": 1000, "overlap_grad_reduce": False},
              extra_parallel={"collective": "ring"})
    assert pipesim.simulate(s2, stage_costs=uniform(s2, f=1, b=2, grad_bytes=2e9)).step_time_s == 5.0
    full = pipesim.simulate(s, mode="full", stage_costs=costs)
    assert full.step_time_s == 4.0 and len(full.ranks) == 2


def test_zero3_gathers_before_forward_and_backward():
    # weights all-gathered (ring, n = 2: B/2 / bw) before F and B, the second prefetched during F;
    # prefetched gathers run layer by layer, so F (2 layers) starts once its first layer's half
    # of the gather is in
    s = tiny(P=1, M=1, data=2, extra_training={"zero_stage": 3}, extra_parallel={"collective": "ring"})
    assert s.model.num_layers == 2
    costs = uniform(s, f=1, b=2, params=0.5e9)   # bf16: 1e9 bytes of weights -> 0.5 s per gather
    r = pipesim.simulate(s, stage_costs=costs)
    gathers = [(e.start, e.end) for e in r.events if e.kind == "ZERO_GATHER" and e.rank == 0]
    assert gathers == [(0.0, 0.5), (0.5, 1.0)]
    assert log(r, rank=0, streams=("compute",)) == [(0, "B", 0, 0, 1.25, 3.25), (0, "F", 0, 0, 0.25, 1.25)]
    assert r.step_time_s == 3.25


def test_zero3_prefetched_gather_paces_the_layers():
    """A gather slower than the compute it hides under: the last layer computes after the
    whole gather, so the pass ends one layer's compute after it (2 layers; 2 s gathers)."""
    s = tiny(P=1, M=1, data=2, extra_training={"zero_stage": 3}, extra_parallel={"collective": "ring"})
    costs = uniform(s, f=1, b=2, params=2e9)     # 4e9 bytes: 2 s per gather on the ring
    r = pipesim.simulate(s, stage_costs=costs)
    assert [(e.start, e.end) for e in r.events if e.kind == "ZERO_GATHER" and e.rank == 0] == [(0.0, 2.0), (2.0, 4.0)]
    # F: first layer's weights at 1.0, but the second only at 2.0 -> F ends 2.5, runs [1.5, 2.5];
    # B: its gather ends 4.0 -> ends 4.0 + 1.0 (one of its two layers), runs [3.0, 5.0]
    assert log(r, rank=0, streams=("compute",)) == [(0, "B", 0, 0, 3.0, 5.0), (0, "F", 0, 0, 1.5, 2.5)]


def test_zero3_without_prefetch_gathers_when_each_action_is_reached():
    """DeepSpeed <= 0.3.16: every gather waits for the compute before it (nothing hides); with
    full recompute a large layer's backward gathers again what its recomputed forward released
    (hidden 12288: all but the last MLP matrix, 8 of 12 h², costs/zero3_reuse.py); a framework
    gather rate below the network's sets the gather time."""
    zero3 = {"zero_stage": 3, "zero3_prefetch": False}
    s = tiny(P=1, M=1, data=2, extra_training=zero3, extra_parallel={"collective": "ring"})
    costs = uniform(s, f=1, b=2, params=0.5e9)           # 0.5 s per gather on the ring
    r = pipesim.simulate(s, stage_costs=costs)
    assert [(e.start, e.end) for e in r.events if e.kind == "ZERO_GATHER" and e.rank == 0] == [(0.0, 0.5), (1.5, 2.0)]
    assert r.step_time_s == 4.0                          # 3.25 with the gather prefetched
    big = {"hidden_size": 12288, "num_attention_heads": 96}
    s = tiny(P=1, M=1, data=2, extra_training={**zero3, "recompute": "full"}, extra_parallel={"collective": "ring"},
             extra_model=big)
    assert pipesim.simulate(s, stage_costs=costs).step_time_s == pytest.approx(4.0 + 0.5 * 2 / 3, rel=1e-4)  # op params carry biases
    s = tiny(P=1, M=1, data=2, extra_training={**zero3, "zero3_gather_GBps": 0.5}, extra_parallel={"collective": "ring"})
    # 1e9 bytes, half of them from the other rank, at 0.5 GB/s: 1 s per gather
    assert pipesim.simulate(s, stage_costs=costs).step_time_s == 5.0


def test_sharded_gradients_reduce_after_every_microbatch():
    """ZeRO-2 holds gradients sharded, so each backward reduce-scatters its own (DeepSpeed, FSDP);
    ZeRO-1 accumulates full gradients and reduces once, after the last backward. One stage, data 2
    on a ring: a 1e9-byte bucket reduce-scatters in 0.5 s; F [0,1] B [1,3] F [3,4] B [4,6]."""
    def dp_events(zero):
        s = tiny(P=1, M=2, data=2, extra_training={"zero_stage": zero, "grad_bucket_MB": 1000},
                 extra_parallel={"collective": "ring"})
        r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, grad_bytes=2e9), engine_choice="simpy")
        return [(e.start, e.end) for e in r.events if e.kind == "DP" and e.rank == 0], r
    one, r1 = dp_events(1)
    two, r2 = dp_events(2)
    assert one == [(5.0, 5.5), (6.0, 6.5)]
    assert two == [(2.0, 2.5), (3.0, 3.5), (5.0, 5.5), (6.0, 6.5)]
    assert r1.step_time_s == r2.step_time_s      # the first backward's reduction hides under F1


def test_sharded_gradients_without_overlap_block_after_every_backward():
    """ZeRO-2 without overlap (DeepSpeed's overlap_comm false): each backward's reduce-scatter runs
    right after it and the rank waits; ZeRO-1 without overlap reduces once, after the last. Same
    one-stage, data-2 ring as above: 1 s of reduce-scatter per backward."""
    def run(zero):
        s = tiny(P=1, M=2, data=2, extra_training={"zero_stage": zero, "grad_bucket_MB": 1000,
                                                     "overlap_grad_reduce": False},
                 extra_parallel={"collective": "ring"})
        r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, grad_bytes=2e9))
        return [(e.start, e.end) for e in r.events if e.kind == "DP" and e.rank == 0], r
    one, r1 = run(1)
    two, r2 = run(2)
    assert one == [(6.0, 6.5), (6.5, 7.0)]
    assert two == [(3.0, 3.5), (3.5, 4.0), (7.0, 7.5), (7.5, 8.0)]
    assert log(r2, rank=0, streams=("compute",))[2:] == [(0, "F", 0, 0, 0.0, 1.0), (0, "F", 0, 1, 4.0, 5.0)]
    assert r2.step_time_s == pytest.approx(r1.step_time_s + 1.0)
    assert r2.engine == "simpy"                   # the DAG pass does not model a blocking wait


def test_zero3_kept_weights_gather_once_per_microbatch():
    """FSDP reshard_after_forward=False: the forward's gather serves the backward; the weights
    count unsharded. Gathers of 0.5 s (1e9 bytes of weights on a 2-rank ring)."""
    kept = {"zero_stage": 3, "reshard_after_forward": False}
    s = tiny(P=1, M=2, data=2, extra_training=kept, extra_parallel={"collective": "ring"})
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, params=0.5e9))
    gathers = [(e.start, e.end) for e in r.events if e.kind == "ZERO_GATHER" and e.rank == 0]
    assert gathers == [(0.0, 0.5), (0.5, 1.0)]           # F0's, then F1's prefetched during F0
    assert [x[1:4] for x in log(r, rank=0, streams=("compute",))] == [
        ("B", 0, 0), ("B", 0, 1), ("F", 0, 0), ("F", 0, 1)]
    assert r.step_time_s == 6.25              # first layer's half of the 0.5 s gather + 2 x (F 1 s + B 2 s)
    refetch = tiny(P=1, M=2, data=2, extra_training={"zero_stage": 3}, extra_parallel={"collective": "ring"})
    r2 = pipesim.simulate(refetch, stage_costs=uniform(refetch, f=1, b=2, params=0.5e9))
    assert len([e for e in r2.events if e.kind == "ZERO_GATHER" and e.rank == 0]) == 4
    from pipesim.costs.memory import static_memory
    assert static_memory(1e9, "bf16", "adam", 3, 8, resident_weights=True).weights == 2e9
    assert static_memory(1e9, "bf16", "adam", 3, 8).weights == 2e9 / 8


def test_zero3_collectives_per_layer_pay_one_latency_per_layer():
    """PyTorch FSDP gathers and reduce-scatters one flat buffer per wrapped layer; DeepSpeed's
    ZeRO-3 one collective per parameter tensor, each paying the ring's latency."""
    from pipesim.sim.workload import build as build_workload
    base = {"zero_stage": 3}
    per_tensor = build_workload(tiny(P=1, M=1, data=2, extra_training=base))
    per_layer = build_workload(tiny(P=1, M=1, data=2, extra_training={**base, "zero3_collectives": "layer"}))
    c = per_layer.stage_costs[0]
    assert per_layer.gather_tensors[0] == c.layers < per_tensor.gather_tensors[0] == c.param_tensors
    assert len(per_layer.buckets[0]) == c.layers


def test_optimizer_step_ends_the_step():
    s = tiny(P=2, M=1, schedule="gpipe")
    r = pipesim.simulate(s, stage_costs=uniform(s, f=1, b=2, opt=0.25))
    assert r.step_time_s == pytest.approx(6.25)
    assert r.pipeline_span_s == pytest.approx(6.0)


def test_deadlock_names_blocked_actions_and_prints_grid():
    s = tiny(P=2, M=1)
    A = Action
    # rank 0 waits for the gradient of micro-batch 0 before running its forward: a cycle
    plan = Plan("bad", 2, 2, 1, (0, 1), ((A(0, "B", 0), A(0, "F", 0)), (A(1, "F", 0), A(1, "B", 0))))
    with pytest.raises(PlanError) as exc:
        pipesim.simulate(s, stage_costs=uniform(s), plan=plan)
    msg = str(exc.value)
    assert "rank 0 blocked at 0RECV_B0" in msg and "rank 1 blocked at 1RECV_F0" in msg
    assert "[0RECV_B0]" in msg and "[1RECV_F0]" in msg          # the marked grid


def test_reruns_are_bit_identical():
    s = tiny(P=2, M=4, data=2, extra_training={"grad_bucket_MB": 0.001})
    a = pipesim.simulate(s).to_dict()
    b = pipesim.simulate(s).to_dict()
    assert a == b


def test_schedule_from_csv_matches_the_generated_plan():
    from pathlib import Path
    csv = Path(__file__).resolve().parent.parent / "scenarios" / "plans" / "1f1b_p2_m4.csv"
    a, b = tiny(P=2, M=4, schedule=str(csv)), tiny(P=2, M=4, schedule="1f1b")
    assert pipesim.simulate(a, stage_costs=uniform(a)).step_time_s == pipesim.simulate(
        b, stage_costs=uniform(b)).step_time_s == (4 + 1) * 3
    with pytest.raises(PlanError, match="4 micro-batches"):
        pipesim.simulate(tiny(P=2, M=2, schedule=str(csv)))


def test_explicit_recompute_actions_take_their_time_out_of_the_backward():
    from pipesim.schedules import generate, unit_time
    plan = generate("1f1b", stages=2, microbatches=2, recompute=True)
    s = tiny(P=2, M=2, extra_training={"recompute": "full"})
    # B costs 3 including 1 s of recompute: an explicit R takes that second, B keeps 2
    r = pipesim.simulate(s, plan=plan, stage_costs=uniform(s, f=1, b=3, recompute=1.0, rc_working=5.0))
    assert r.step_time_s == unit_time(plan, f=1, b=2, r=1).makespan
    assert max(m.by_category["recompute"] for m in r.memory) == 5.0


def test_dp_all_reduce_and_pipeline_send_share_the_nic():
    # one GPU per node: the DP all-reduce and the pipeline gradient send leave through the same
    # NIC. Rank 1's B runs [2.5, 4.5]; bucket 0 (1.5 s, ready at 3.5) has 0.5 s left when the
    # 0.5 s gradient send starts at 4.5: they share the NIC, so the send ends at 5.5 (not 5.0 as
    # alone) and the bucket 0.5 s later than planned (network.py Port.send); rank 0's B then runs
    # [5.5, 7.5] and its two buckets [6.5, 8.0], [8.0, 9.5].
    s = tiny(P=2, M=1, data=2, nodes=4, gpus_per_node=1, schedule="gpipe",
             extra_training={"grad_bucket_MB": 1500}, extra_parallel={"collective": "ring"})
    costs = uniform(s, f=1, b=2, send=0.5e9, grad_bytes=3e9)
    for mode in ("representative", "full"):
        r = pipesim.simulate(s, mode=mode, stage_costs=costs)
        sends = [(e.start, e.end) for e in r.events if e.kind == "SEND_B"]
        assert set(sends) == {(4.5, 5.5)}
        assert r.step_time_s == 9.5


def test_no_gc_leaves_the_collector_as_it_found_it():
    """The run's objects are promoted to the oldest generation on the way out (freeze + unfreeze),
    but objects the process froze itself (e.g. before a fork) stay frozen."""
    import gc
    from pipesim.sim.gc_pause import no_gc
    enabled = gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
        kept = [(float(i), float(i)) for i in range(1000)]
    assert gc.isenabled() == enabled and gc.get_freeze_count() == 0
    # a tuple made in the run sits in the oldest generation, unscanned (a young collection would
    # have untracked it, and without one it would still be in the young generation)
    assert any(x is kept[0] for x in gc.get_objects(generation=2))
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with no_gc():
            kept.append((1.0, 2.0))
        assert gc.get_freeze_count() == before
    finally:
        gc.unfreeze()


def test_replicas_with_equal_memory_logs_share_one_replay_and_others_replay_their_own():
    from types import SimpleNamespace

    from pipesim.sim.summary import summarize
    from pipesim.sim.memory import ChangeIds, MemoryTracker
    reg = ChangeIds()
    up, down = reg.id_of((("activations", 3.0),)), reg.id_of((("activations", -3.0),))
    mems = [MemoryTracker({"weights": 10.0}) for _ in range(3)]
    mems[0].flat = ([0.0, 1.0], [up, down], reg)
    mems[1].flat = ([0.0, 1.0], [up, down], reg)            # replica 1: the same log
    mems[2].flat = ([0.0, 0.5, 1.0], [up, up, down], reg)  # replica 2: a second micro-batch in flight
    assert mems[0].same_flat_log(mems[1]) and not mems[0].same_flat_log(mems[2])
    table = []
    gangs = [SimpleNamespace(steps=(), table=table) for _ in mems]
    tls = [SimpleNamespace() for _ in mems]
    summarize(SimpleNamespace(), tls, mems, False, gangs)
    assert [tl.peak_memory for tl in tls] == [13.0, 13.0, 16.0]
    assert tls[2].peak_by_category["activations"] == 6.0
    assert tls[1].peak_by_category is not tls[0].peak_by_category


@pytest.mark.parametrize("zero_stage, engine", [(1, "dag"), (3, "simpy")])
def test_a_simulation_leaves_no_reference_cycles_behind(zero_stage, engine):
    """simulate() pauses the collector and moves what it kept to the oldest generation, which
    only a rare full collection scans: a cycle left per run (the SimPy driver's closures, the
    environment's bound factories) would pile up over a sweep."""
    import gc
    s = tiny(P=2, M=4, data=2, extra_training={"zero_stage": zero_stage})   # ZeRO-3: DP streams gather
    pipesim.simulate(s, trace=False)          # first-call caches
    while gc.collect():                       # earlier tests' garbage (finalizers can free more)
        pass
    report = pipesim.simulate(s, trace=False)
    assert report.engine == engine
    assert gc.collect() == 0


def test_blocking_p2p_sends_wait_for_the_receiver_and_block_the_sender():
    """training.p2p_sync (Megatron's batch_isend_irecv + torch.cuda.synchronize), GPipe on 2
    ranks, F = 1, B = 2, sends 0.25 s. Rank 0's first send finishes at 1.25 and only then does F1
    start; its second send waits for rank 1 to post that receive (after its F0, at 2.25); rank 1
    is held by its own backward send until 5.75, when rank 0 (which posted the receive at 2.25)
    has it; the last send waits for rank 0's next receive (after its B0, at 7.75). Asynchronous
    sends finish the same step at 9.5."""
    def run(sync):
        s = tiny(P=2, M=2, schedule="gpipe", extra_training={"p2p_sync": sync})
        return pipesim.simulate(s, stage_costs=uniform(s, f=1.0, b=2.0, send=0.25e9))
    r = run(True)
    assert r.engine == "simpy"
    events = [e[1:] for e in log(r) if e[1] in ("F", "B", "SEND_F", "SEND_B")]
    assert events == [
        ("B", 0, 0, 5.75, 7.75), ("B", 0, 1, 8.0, 10.0), ("F", 0, 0, 0.0, 1.0), ("F", 0, 1, 1.25, 2.25),
        ("SEND_F", 0, 0, 1.0, 1.25), ("SEND_F", 0, 1, 2.25, 2.5),
        ("B", 1, 0, 3.5, 5.5), ("B", 1, 1, 5.75, 7.75), ("F", 1, 0, 1.25, 2.25), ("F", 1, 1, 2.5, 3.5),
        ("SEND_B", 1, 0, 5.5, 5.75), ("SEND_B", 1, 1, 7.75, 8.0)]
    assert r.step_time_s == pytest.approx(10.0)
    assert run(False).step_time_s == pytest.approx(9.5)


@pytest.mark.parametrize("P, M", [(2, 2), (2, 4), (3, 6), (4, 4), (4, 12)])
@pytest.mark.parametrize("schedule, V", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_blocking_p2p_runs_every_megatron_schedule_without_deadlock_and_costs_time(schedule, V, P, M):
    """Matched batches post their receives before any send waits, and the interleaved schedule's
    steady phase runs Megatron's combined exchanges, so no rank waits on a peer that waits on it;
    blocking sends can only lengthen the step."""
    def step(sync):
        s = tiny(P=P, M=M, V=V, schedule=schedule, extra_training={"p2p_sync": sync})
        return pipesim.simulate(s, trace=False, stage_costs=uniform(s, f=1.0, b=2.0, send=0.25e9)).step_time_s
    assert step(True) > step(False)


def test_received_slices_are_all_gathered_over_the_tensor_group_without_sequence_parallelism():
    """Scatter/gather (SC'21 Sec. 4.1): each TP rank sends 1/t of an activation and the receiver
    all-gathers the full tensor over its TP group before using it; blocking, counted as TP
    communication. Under sequence parallelism the tensor stays sharded: no gather."""
    from pipesim.costs.collectives import collective_time
    from pipesim.costs.topology import placement
    from pipesim.model_stages import stage_costs_for
    s = tiny(P=2, M=2, tensor=2)
    c = stage_costs_for(s)[1]
    h, tokens = s.model.hidden_size, s.model.seq_length * s.training.micro_batch_size
    assert c.recv_gather == pytest.approx(collective_time("all_gather", tokens * h * 2, placement(s, "tp")))
    r = pipesim.simulate(s, trace=True, engine_choice="simpy")
    gathers = [e for e in r.events if e.kind == "P2P_GATHER"]
    # pipeline rank 1 gathers each micro-batch's activation, rank 0 each gradient
    assert sorted((e.rank, e.microbatch) for e in gathers) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(e.duration == pytest.approx(c.recv_gather) for e in gathers)
    sp = tiny(P=2, M=2, tensor=2, extra_parallel={"sequence_parallel": True})
    assert stage_costs_for(sp)[1].recv_gather == 0.0


def test_interleaved_steady_phase_sends_a_forward_output_only_after_the_paired_backward():
    """Megatron's interleaved 1F1B (2021-22) runs F(k), B(j), then one exchange sending both
    outputs and receiving the next forward's and the next backward's inputs
    (send_forward_backward_recv_forward_backward): the lowered row's comm steps between a forward
    and its paired backward move, receives before the forward, sends after the backward."""
    from pipesim.sim.p2p_sync import combined_exchanges, has_steady_exchanges
    from pipesim.sim.workload import STEP_COMPUTE, STEP_RECV, STEP_SEND, Step

    def st(kind, mb):
        code = STEP_COMPUTE if kind in ("F", "B") else STEP_RECV if kind.startswith("RECV") else STEP_SEND
        return Step(code, 0, kind, 0, False, (kind, mb), -1, mb, code == STEP_COMPUTE, False)

    row = [st("RECV_F", 0), st("F", 0), st("SEND_F", 0), st("RECV_F", 1), st("F", 1), st("SEND_F", 1),
           st("RECV_B", 0), st("B", 0), st("SEND_B", 0), st("RECV_F", 2), st("F", 2), st("SEND_F", 2),
           st("RECV_B", 1), st("B", 1), st("SEND_B", 1), st("RECV_B", 2), st("B", 2), st("SEND_B", 2)]
    got = [(x.kind, x.mb) for x in combined_exchanges(row)]
    assert got == [("RECV_F", 0), ("F", 0), ("SEND_F", 0), ("RECV_F", 1), ("RECV_B", 0),
                   ("F", 1), ("B", 0),
                   ("SEND_F", 1), ("SEND_B", 0), ("RECV_F", 2), ("RECV_B", 1),
                   ("F", 2), ("B", 1),
                   ("SEND_F", 2), ("SEND_B", 1), ("RECV_B", 2), ("B", 2), ("SEND_B", 2)]
    plan = SimpleNamespace(num_ranks=4, num_stages=8, num_microbatches=8)
    assert has_steady_exchanges(plan)
    plan.num_microbatches = 4          # M == P: every forward first (Megatron), no steady phase
    assert not has_steady_exchanges(plan)
    plan.num_stages, plan.num_microbatches = 4, 8
    assert not has_steady_exchanges(plan)


def test_fsdp2_copies_each_gathered_layer_out_on_the_compute_stream():
    """FSDP2 (fully_shard) copies every all-gathered layer into its parameters on the compute
    stream: 2 bytes read + 2 written per bf16 parameter, before F and again before B when the
    backward gathers again; the collectives are FSDP's per-layer ones."""
    from pipesim.costs import stage_costs
    from pipesim.costs.stage import cost_model_for
    from pipesim.sim.workload import build as build_workload
    layer = {"zero_stage": 3, "zero3_collectives": "layer"}
    plain = stage_costs(tiny(P=1, M=1, data=2, extra_training=layer))[0]
    s = tiny(P=1, M=1, data=2, extra_training={**layer, "zero3_collectives": "fsdp2"})
    fsdp2 = stage_costs(s)[0]
    copy = 2 * 2 * fsdp2.params / cost_model_for(s)._mem_rate
    assert copy > 0
    assert fsdp2.forward - plain.forward == pytest.approx(copy)
    assert fsdp2.backward - plain.backward == pytest.approx(copy)
    assert fsdp2.input_grad - plain.input_grad == pytest.approx(copy)
    assert fsdp2.weight_grad == plain.weight_grad
    assert build_workload(s).gather_tensors[0] == fsdp2.layers
    kept = {**layer, "zero3_collectives": "fsdp2", "reshard_after_forward": False}
    once = stage_costs(tiny(P=1, M=1, data=2, extra_training=kept))[0]
    plain_kept = stage_costs(tiny(P=1, M=1, data=2, extra_training={**layer, "reshard_after_forward": False}))[0]
    assert once.forward - plain_kept.forward == pytest.approx(copy)
    assert once.backward == pytest.approx(plain_kept.backward)
    # one GPU of data parallelism gathers nothing, so copies nothing
    alone = tiny(P=1, M=1, data=1, extra_training={**layer, "zero3_collectives": "fsdp2"})
    assert stage_costs(alone)[0].forward == pytest.approx(
        stage_costs(tiny(P=1, M=1, data=1, extra_training=layer))[0].forward)
