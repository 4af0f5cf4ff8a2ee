"""The MoE terms added for issue 14's follow-up: host lockstep after the dispatcher's count sync,
Megatron's two-stream overlap of a layer pair with the SMs the all-to-all kernels take,
Transformer Engine's grouped-GEMM rounds, the validation error budget."""
import pytest

from pipesim import load_scenario
from pipesim.costs import stage_costs
from pipesim.costs.layers import layer_ops
from pipesim.costs.moe import TE_GEMM_STREAMS, expert_gemm_rounds
from pipesim.costs.moe_host import (SYNC_ROUND_TRIP_S, TORCH_OP_HOST_S, kernels_of, lockstep_exposed,
                                    post_sync_sequence)
from pipesim.costs.moe_dispatch import DEFAULT_SMS
from pipesim.costs.moe_interference import comm_sms, cta_makespan, gemm_slowdown
from pipesim.costs.stage import cost_model_for
from pipesim.sim.a2a_overlap import pair_cost, two_streams
from pipesim.sim.workload import Cost


def moe(experts=16, ep=8, training=None, system="dgx-h100", gpu=None):
    sysd = {"preset": system, "num_nodes": 1, **({"gpu": gpu} if gpu else {})}
    return load_scenario({"model": {"preset": "llama2-7b", "num_layers": 4, "num_experts": experts, "moe_top_k": 2,
                                    "seq_length": 1024},
                          "system": sysd, "parallel": {"expert": ep, "data": 8, "sequence_parallel": True},
                          "training": {"global_batch_size": 64, "attention": "flash", **(training or {})}})


def test_lockstep_recurrence_by_hand():
    # GPU work longer than the host's issue time: only the first launch is exposed
    assert lockstep_exposed([(10.0, 1), (10.0, 1)], 1.0) == pytest.approx(1.0)
    # tiny kernels behind a slow host: the GPU waits for each launch
    assert lockstep_exposed([(0.1, 1)] * 5, 1.0) == pytest.approx(5.1 - 0.5)   # last op ends at 5 + 0.1
    # an op of 4 kernels is issued kernel by kernel: 4 launches of 1 before its last quarter runs
    assert lockstep_exposed([(2.0, 4)], 1.0) == pytest.approx(4.0 + 0.5 - 2.0)
    assert lockstep_exposed([], 1.0) == 0.0


def test_post_sync_sequence_order_and_kernels():
    s = moe()
    ops = layer_ops(s, True)
    names = [o.name for o in ops]
    seq = post_sync_sequence(ops, [float(i) for i in range(len(ops))], 2, dispatch=-7.0, combine=-9.0)
    # permute first, then the dispatch transfer; combine just before unpermute; the layer wraps around
    assert seq[0][0] == names.index("permute") and seq[1] == (-7.0, 1)
    assert seq[seq.index((-9.0, 1)) + 1][0] == names.index("unpermute")
    assert seq[-1][0] == names.index("permute") - 1          # ... up to the next layer's router
    assert len(seq) == len(ops) + 2
    assert [n for _, n in seq].count(2) == 2          # fc1 and fc2: one GEMM per local expert
    assert kernels_of(ops[names.index("expert_fc1")], 16) == 16 and kernels_of(ops[0], 16) == 1


def test_host_exposure_is_a_real_term():
    s = moe()
    c = stage_costs(s)[0]
    per_kernel = s.system.gpu.kernel_launch + TORCH_OP_HOST_S
    assert per_kernel == pytest.approx(5e-6 + 3.3e-6)
    # at least the sync's round trip and the first launch after it, per MoE layer
    assert c.moe_host_fwd >= c.moe_layers * (SYNC_ROUND_TRIP_S + per_kernel) * 0.999
    # a synchronous host (CPU eager) already pays every launch: no extra term; EP 1 has no sync
    assert stage_costs(moe(ep=1))[0].moe_host_fwd == 0.0
    # the term is inside the forward and the MoE block time
    assert c.moe_block_fwd >= c.moe_host_fwd
    # a step replayed as one CUDA graph synchronises with no host (a capture admits none)
    graphed = stage_costs(moe(training={"cuda_graphs": "full_iteration"}))[0]
    assert graphed.moe_host_fwd == 0.0 and graphed.forward == pytest.approx(c.forward - c.moe_host_fwd)


def test_held_sms_and_two_stream_pair():
    assert comm_sms(moe(training={"moe_dispatcher": "deepep"})) == DEFAULT_SMS["deepep"] == 20
    assert comm_sms(moe(training={"moe_dispatcher": "hybridep"})) == DEFAULT_SMS["hybridep"] == 32
    assert comm_sms(moe(training={"moe_dispatcher": "hybridep", "moe_dispatcher_sms": 16})) == 16
    assert comm_sms(moe(training={"moe_dispatcher": "alltoall"})) == 0
    w = dict(F_att=0.69, F_moe=1.15, F_dis=1.15, F_com=1.15, B_att=1.62, B_dg=0.99, B_wg=0.99, B_com=1.15, B_dis=1.15)
    # no slowdown: F_att under B_com; then the compute stream never waits: B_dg (under F_dis),
    # B_wg (under B_dis), F_moe, B_att (under F_com) -- by hand
    assert two_streams(w) == pytest.approx(1.15 + 0.99 + 0.99 + 1.15 + 1.62)
    # every task 4/3 slower beside a transfer (rate 0.75): F_att 0.69/0.75 < 1.15; B_dg needs
    # 0.99/0.75 = 1.32 > 1.15 -> 1.15 + 0.99 - 0.8625 at full speed; B_wg likewise under B_dis;
    # F_moe 1.15 alone; F_com ‖ B_att: 1.15 + 1.62 - 0.8625
    slow = dict.fromkeys(("F_att", "F_moe", "B_att", "B_dg", "B_wg"), 1 / 0.75)
    rest = 0.99 - 1.15 * 0.75
    hand = 1.15 + (1.15 + rest) + (1.15 + rest) + 1.15 + (1.15 + 1.62 - 1.15 * 0.75)
    assert two_streams(w, slow) == pytest.approx(hand)
    assert two_streams(w, slow) > two_streams(w)
    # nothing to hide: the sum of the compute
    assert two_streams(dict(F_att=2.0, B_att=3.0), slow) == pytest.approx(5.0)
    f = Cost(3.0, a2a=1.0, moe_block=1.2, overlap_slow=(1.1, 1.3))
    b = Cost(5.0, a2a=1.0, moe_block=2.5, overlap_slow=(1.2, 1.4), moe_wgrad=1.0)
    c = pair_cost(f, b)
    assert c.dur == pytest.approx(two_streams(dict(F_att=0.8, F_moe=1.2, F_dis=0.5, F_com=0.5, B_att=1.5, B_dg=1.5,
                                                   B_wg=1.0, B_com=0.5, B_dis=0.5),
                                              dict(F_att=1.1, F_moe=1.3, B_att=1.2, B_dg=1.4, B_wg=1.4)))
    assert c.a2a_exposed == pytest.approx(c.dur - (3.0 - 1.0) - (5.0 - 1.0))   # minus both computes


def test_persistent_gemms_lose_a_wave_to_the_held_sms():
    # 132 persistent CTAs, 20 SMs held: 20 CTAs wait for a free SM and run a second round
    assert cta_makespan(132, 1, 132, 132, True) == 1
    assert cta_makespan(132, 1, 132, 112, True) == 2
    # 400 tiles: CTAs do 3-4 tiles each; with 112 SMs the 20 late CTAs finish after 3 + 3 rounds
    assert cta_makespan(400, 1, 132, 132, True) == 4
    assert cta_makespan(400, 1, 132, 112, True) == 6
    # one CTA per tile (Ampere): the tiles just spread over fewer SMs
    assert cta_makespan(400, 1, 108, 88, False) == 5 and cta_makespan(400, 1, 108, 108, False) == 4
    assert gemm_slowdown(2500, 5120, 1, 132, 0, True) == 1.0
    assert gemm_slowdown(2500, 5120, 1, 132, 20, True) > 1.3
    # an MoE layer beside DeepEP runs slower; beside NCCL's all-to-all (no SMs held here) it does not
    deepep = stage_costs(moe(training={"moe_dispatcher": "deepep"}))[0]
    assert deepep.moe_overlap_slow_fwd[1] > 1.0 and deepep.moe_overlap_slow_bwd[0] > 1.0
    assert stage_costs(moe())[0].moe_overlap_slow_fwd == (1.0, 1.0)


def test_moe_weight_gradient_share_reaches_the_backward_cost():
    c = stage_costs(moe())[0]
    assert 0 < c.moe_block_wgrad < c.moe_block_bwd


def test_grouped_gemm_runs_in_te_stream_rounds():
    assert TE_GEMM_STREAMS == 4
    assert expert_gemm_rounds(16, 512, 3072, 4096, "bf16") == ((4, 512, 3072, 4096, "bf16"),) * 4
    assert expert_gemm_rounds(6, 1, 2, 3, "bf16") == ((4, 1, 2, 3, "bf16"), (2, 1, 2, 3, "bf16"))
    assert expert_gemm_rounds(2, 1, 2, 3, "bf16") == ((2, 1, 2, 3, "bf16"),)
    # more, smaller experts in rounds of 4 cost more than one batched GEMM of them all would
    s = moe(experts=64, ep=2)
    cm = cost_model_for(s)
    op = next(o for o in layer_ops(s, True) if o.name == "expert_fc1")
    (b, m, n, k, dt), = {g for g in op.gemms_fwd}
    rounds = len(op.gemms_fwd)
    assert rounds == 32 // 4 and b == 4
    assert cm.time(op, "fwd").compute >= cm.gemm_time(32, m, n, k, dt) * 0.999


def test_moezoo_error_budget_spreads_the_gap_over_layer_passes():
    from pipesim.whatif.validation_moe import error_budget, load_moe_cases, moe_case_scenario
    case = next(c for c in load_moe_cases() if c["id"].endswith("tp4-ep8-pp8"))
    s = load_scenario(moe_case_scenario(case))
    b = error_budget(s, 13.0, 29.0)
    # 2048 / (8 · 1) micro-batches per rank × 94 / 8 layers per rank
    assert b["layer_pairs_per_rank"] == pytest.approx(256 * 94 / 8)
    assert b["gap_per_layer_pair_s"] == pytest.approx(16.0 / (256 * 94 / 8))
    assert b["fwd_s"] > 0 and b["bwd_s"] > b["fwd_s"] and b["a2a_fwd_s"] == pytest.approx(b["a2a_bwd_s"])
    assert 0 < b["host_fwd_s"] < b["fwd_s"]


def test_fp8_expert_gemms_keep_their_inputs_in_fp8_like_dense_linears():
    """Transformer Engine's GroupedLinear saves the column-wise FP8 copy of its inputs (1 byte)
    for the weight gradients, as Linear does: the expert GEMMs' saved bytes halve under FP8, the
    activation between them (bf16) does not."""
    def saved(precision):
        ops = {o.name: o for o in layer_ops(moe(training={"precision": precision}), True)}
        return {k: ops[k].saved_bytes for k in ("expert_fc1", "expert_act", "expert_fc2", "qkv")}
    bf16, fp8 = saved("bf16"), saved("fp8")
    assert fp8["expert_fc1"] == pytest.approx(bf16["expert_fc1"] / 2)
    assert fp8["expert_fc2"] == pytest.approx(bf16["expert_fc2"] / 2)
    assert fp8["expert_act"] == bf16["expert_act"]
    assert fp8["qkv"] == pytest.approx(bf16["qkv"] / 2)      # the dense rule it now matches


def test_fp8_expert_casts_quantize_every_local_experts_rows():
    """The cast before an FP8 grouped expert GEMM quantizes the whole permuted input (all local
    experts' rows: Transformer Engine's GroupedLinear split-quantizes it in one pass), and the
    backward's cast the whole output gradient; 16 experts on EP 8 leave 2 local experts, 5 on 1
    leave 5 (a round of 4 and a rest of 1)."""
    from pipesim.costs.fp8 import cast_bytes, cast_ops
    for experts, ep in ((16, 8), (5, 1)):
        ops = {o.name: o for o in layer_ops(moe(experts, ep, training={"precision": "fp8", "fp8_recipe": "mxfp8"}), True)}
        casts = {o.name: o for o in cast_ops(list(ops.values()), "mxfp8")}
        for name in ("expert_fc1", "expert_fc2"):
            op, cast = ops[name], casts[f"{name}_fp8_cast"]
            rows = sum(b * m for b, m, *_ in op.gemms_fwd)
            (n, k), = {g[2:4] for g in op.gemms_fwd}       # every expert GEMM has one shape
            assert rows == pytest.approx(op.flops_fwd / (2 * n * k))      # all local experts' rows
            assert cast.bytes_fwd == pytest.approx(rows * k * cast_bytes("mxfp8", None))
            assert cast.bytes_bwd == pytest.approx(rows * n * cast_bytes("mxfp8", None))
