"""The ZeRO-1/2 parameter all-gather runs bucket by bucket (Megatron-Core's distributed optimizer),
and an MoE stage's expert bytes enter it at the time ratio of a collective of that bucket's size.

Before: one all-gather of every parameter byte, with the expert bytes scaled by the time ratio of a
gradient bucket. The two sizes differ, so the expert-data-parallel group's latency advantage was
applied to a collective it did not describe: on gpt-oss-120b over 64 B200 (EDP 8 against DP 64) a
network latency 4x higher made the step 7 % faster, one 10x lower made it 5 % slower."""
import pytest

import pipesim
from pipesim.costs import stage_costs
from pipesim.costs.zero3_reuse import gathered_weight_bytes, gradient_buckets, param_allgather_seconds
from pipesim.sim.dp_time import collective_seconds, param_gather_seconds
from pipesim.sim.workload import build

GPT_OSS_64 = {
    "model": {"preset": "gpt-oss-120b", "seq_length": 4096, "mtp_layers": 0},
    "system": {"preset": "dgx-b200", "num_nodes": 8},
    "parallel": {"tensor": 1, "pipeline": 1, "data": 64, "expert": 8},
    "training": {"micro_batch_size": 4, "global_batch_size": 512, "precision": "bf16", "zero_stage": 1,
                 "recompute": "selective", "overlap_grad_reduce": True, "overlap_param_gather": True,
                 "grad_reduce_in_fp32": False, "grad_bucket_MB": 256.0},
}


def _scaled_latency(k):
    s = pipesim.load_scenario(GPT_OSS_64)
    sy = s.system
    return pipesim.load_scenario(GPT_OSS_64, overrides=[
        f"system.inter_node.latency_us={sy.inter_node.latency * 1e6 * k}",
        f"system.intra_node.latency_us={sy.intra_node.latency * 1e6 * k}"])


@pytest.mark.parametrize("engine", ["sim", "analytic"])
def test_a_slower_network_never_speeds_up_an_moe_step(engine):
    steps = []
    for k in (0.1, 1.0, 4.0):
        s = _scaled_latency(k)
        if engine == "sim":
            steps.append(pipesim.simulate(s, trace=False).step_time_s)
        else:
            from pipesim.whatif.analytic import analytic_report
            steps.append(analytic_report(s)["step_time_s"])
    assert steps[0] < steps[1] < steps[2]


def test_the_gather_is_one_collective_per_gradient_bucket():
    s = pipesim.load_scenario(GPT_OSS_64)
    w = build(s)
    (c,) = w.stage_costs
    n = gradient_buckets(s.training, c)
    assert n > 1
    one = collective_seconds(w, "all_gather", gathered_weight_bytes(s.training, c) / n, 0)
    assert param_gather_seconds(w, [0], 0) == pytest.approx(n * one)
    # n collectives pay n latencies: more than one collective of all the bytes
    assert n * one > collective_seconds(w, "all_gather", gathered_weight_bytes(s.training, c), 0)


def test_no_gradients_no_gather():
    from dataclasses import replace
    s = pipesim.load_scenario(GPT_OSS_64)
    c = replace(stage_costs(s)[0], grad_bytes=0.0)
    calls = []
    assert param_allgather_seconds(s.training, c, lambda kind, n: calls.append(n) or 1.0) == 0.0
    assert not calls


@pytest.mark.parametrize("zero, cap", [(1, "SIM_BUCKETS"), (3, "SIM_BUCKETS_EVERY_MICROBATCH")])
def test_simulated_gradient_collectives_are_capped_with_every_real_one_timed(zero, cap):
    """Thousands of 1 MB buckets become at most `cap` simulated collectives, which together take
    the time of all the real ones (each real bucket's latency kept) and move all the bytes; the
    ZeRO-2/3 cap is lower because those reductions recur after every micro-batch (a 744B MoE
    stage under ZeRO-3 with 25 MB buckets was 31 million engine events, 40 s and 3.5 GB)."""
    import pipesim.sim.workload as wl
    from pipesim.sim.dp_time import bucket_seconds
    s = pipesim.load_scenario(GPT_OSS_64, overrides=["training.grad_bucket_MB=1", f"training.zero_stage={zero}"])
    w = build(s)
    (c,) = w.stage_costs
    n, m = gradient_buckets(s.training, c), len(w.buckets[0])
    assert n > getattr(wl, cap) == m
    assert sum(w.buckets[0]) == pytest.approx(c.grad_bytes)
    real = collective_seconds(w, w.grad_kind, c.grad_bytes / n, 0)
    assert m * bucket_seconds(w, 0, 0) == pytest.approx(n * real)
