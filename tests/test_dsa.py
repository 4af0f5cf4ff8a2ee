"""DeepSeek sparse attention (pipesim/costs/dsa.py): FLOPs by the paper's and FlashMLA's counts,
what tensor and context parallelism do to it, memory, model FLOPs, presets and one-line errors."""
import pytest

from pipesim import load_scenario, simulate
from pipesim.costs import stage_costs
from pipesim.costs.dsa import HEAD_PAD, keys_per_query
from pipesim.costs.layers import layer_ops
from pipesim.costs.recompute_modules import mla_freed
from pipesim.costs.stage import cost_model_for
from pipesim.costs.summary import model_flops, total_params
from pipesim.errors import ScenarioError
from pipesim.presets.models import MODELS

ATTENTION_BLOCK = ("q_absorb", "dsa_", "attention", "v_up", "kv_up")


def dsa(seq=8192, tensor=1, context=1, variant="dsa", system="dgx-h100", mode="allgather", layout="balanced",
        **model):
    nodes = max(1, tensor * context // 8)
    return load_scenario({
        "model": {"preset": "deepseek-v3.2", "attention_variant": variant, "seq_length": seq, "num_layers": 4,
                  "num_experts": 64, "moe_first_dense_layers": 1, **model},
        "system": {"preset": system, "num_nodes": nodes},
        "parallel": {"tensor": tensor, "context": context, "sequence_parallel": tensor > 1,
                     **({"context_mode": mode, "context_layout": layout} if context > 1 else {})},
        "training": {"micro_batch_size": 1, "global_batch_size": 8 * nodes}})


def ops_of(s) -> dict:
    return {o.name: o for o in layer_ops(s)}


def block_seconds(s) -> float:
    cm = cost_model_for(s)
    return sum(cm.time(o, "fwd").seconds + cm.time(o, "bwd").seconds
               for o in layer_ops(s) if o.name.startswith(ATTENTION_BLOCK))


def test_keys_per_query_is_the_causal_prefix_capped_at_topk():
    assert keys_per_query(4, 8) == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert keys_per_query(10, 4) == pytest.approx((1 + 2 + 3 + 4 * 7) / 10)
    assert keys_per_query(1 << 20, 2048) == pytest.approx(2048, rel=1e-3)


def test_flops_follow_the_paper_and_flashmla_counts():
    S = 131072
    s = dsa(seq=S)
    m, ops = s.model, ops_of(s)
    k = keys_per_query(S, 2048)
    # FlashMLA tests/lib.py: 2·queries·topk·heads·(d_qk + d_v), d_qk = 512 + 64, d_v = 512
    assert ops["attention"].flops_fwd == pytest.approx(2 * S * k * 128 * (576 + 512))
    assert ops["attention"].flops_bwd == pytest.approx(2 * S * k * 128 * (3 * 576 + 2 * 512))
    # paper Eq. 1: 2·H_I·d_I per causal (query, key) pair
    assert ops["dsa_index_scores"].flops_fwd == pytest.approx(2 * 64 * 128 * S * S / 2)
    # the absorbed einsums cost what kv_up costs in MLA
    mla = ops_of(dsa(seq=S, variant="mla"))
    assert ops["q_absorb"].flops_fwd + ops["v_up"].flops_fwd == pytest.approx(mla["kv_up"].flops_fwd)
    assert ops["q_absorb"].params + ops["v_up"].params == mla["kv_up"].params
    # model FLOPs: the sparse kernel's backward without its score re-computation; the indexer once
    assert model_flops(ops["attention"]) == pytest.approx(3 * ops["attention"].flops_fwd)
    assert model_flops(ops["dsa_index_scores"]) == ops["dsa_index_scores"].flops_fwd


def test_sparse_attention_pays_off_only_at_long_sequences():
    assert block_seconds(dsa(seq=4096)) > block_seconds(dsa(seq=4096, variant="mla"))
    assert block_seconds(dsa(seq=131072)) < 0.3 * block_seconds(dsa(seq=131072, variant="mla"))


def test_tensor_parallelism_duplicates_the_indexer_and_pads_the_sparse_heads():
    one, eight = dsa(seq=32768), dsa(seq=32768, tensor=8)
    o1, o8 = ops_of(one), ops_of(eight)
    for name in ("dsa_idx_q", "dsa_idx_k", "dsa_idx_w", "dsa_index_scores"):
        assert o8[name].flops_fwd == o1[name].flops_fwd
    assert o8["dsa_idx_q"].params == o1["dsa_idx_q"].params
    assert o8["attention"].flops_fwd == pytest.approx(o1["attention"].flops_fwd / 8)
    # 16 heads per GPU run as 64: a quarter of the kernel's work is real
    assert o8["attention"].fused_attention == ("sparse_mla", 16 / HEAD_PAD)
    c1, c8 = cost_model_for(one), cost_model_for(eight)
    t1, t8 = c1.time(o1["attention"], "fwd").seconds, c8.time(o8["attention"], "fwd").seconds
    assert t8 == pytest.approx(t1 * (HEAD_PAD / 16) / 8, rel=0.02)      # half, not an eighth
    # the loss target is all-reduced over the tensor group ([tokens, topk] fp32)
    (ar,) = o8["dsa_loss_target"].comm_fwd
    assert (ar.kind, ar.group, ar.bytes) == ("all_reduce", "tp", 32768 * 2048 * 4)


def test_frozen_indexer_has_no_loss_and_no_backward():
    ops = ops_of(dsa(dsa_indexer_loss="none"))
    assert "dsa_loss_target" not in ops and "dsa_indexer_grad" not in ops
    assert ops["dsa_idx_q"].flops_bwd == 0 and ops["dsa_idx_q"].params > 0
    trained = ops_of(dsa())
    # trained: weight gradients only (the indexer's inputs are detached)
    assert trained["dsa_idx_q"].flops_bwd == trained["dsa_idx_q"].flops_fwd
    assert trained["dsa_idx_q"].dgrad_fraction == 0.0


def test_memory_keeps_the_topk_indices_and_the_latent_tensors():
    S = 16384
    ops = ops_of(dsa(seq=S))
    assert ops["dsa_topk"].saved_bytes == S * 2048 * 4
    e = 2
    assert ops["attention"].saved_bytes == pytest.approx(S * 128 * 576 * e + S * 576 * e + S * 128 * 512 * e
                                                         + S * 128 * 4)
    # selective recompute of the up-projection frees the absorbed query
    s = dsa(seq=S)
    assert mla_freed(s, layer_ops(s)) == S * 128 * 576 * e


def test_context_parallelism_gathers_latent_and_indexer_keys():
    S, cp = 65536, 4
    s = dsa(seq=S, context=cp)
    ops = ops_of(s)
    T = S // cp
    assert ops["attention.cp0"].flops_fwd == pytest.approx(2 * T * keys_per_query(S, 2048) * 128 * 1088)
    assert ops["dsa_index_scores"].flops_fwd == pytest.approx(2 * 64 * 128 * T * S / 2)
    c = stage_costs(s)[0]
    assert c.cp_bytes > 0 and c.cp_comm_fwd > 0
    # the gathered buffer: every token's latent key (576) and indexer key (128), BF16
    assert c.cp_buffer_fwd == pytest.approx(S * (576 + 128) * 2)
    rep = simulate(s)
    assert rep.data["exposed_comm_s"]["CP"] > 0


def test_deepseek_v32_is_v3_plus_the_indexer():
    base = {"system": {"preset": "dgx-h100", "num_nodes": 1}, "parallel": {"data": 8},
            "training": {"global_batch_size": 8}}
    v3 = load_scenario({"model": "deepseek-v3", **base})
    v32 = load_scenario({"model": "deepseek-v3.2", **base})
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
    assert total_params(v32) - total_params(v3) == 61 * per_layer
    assert MODELS["glm-5"]["reference_params"] == 744e9


@pytest.mark.parametrize("patch,words", [
    ({"system": "dgx-a100-80gb"}, ["model.attention_variant", "SM90", "A100"]),
    ({"causal": False}, ["model.attention_variant", "not causal"]),
    ({"q_lora_rank": None}, ["model.q_lora_rank", "compressed query"]),
    ({"mode": "ring"}, ["parallel.context_mode", "allgather", "'ring'"]),
    ({"dsa_index_topk": 0}, ["dsa_index_topk must be positive"]),
    ({"dsa_indexer_loss": "dense"}, ["model.dsa_indexer_loss"]),
])
def test_one_line_errors(patch, words):
    patch = dict(patch)
    kw = {"system": patch.pop("system")} if "system" in patch else {}
    if "mode" in patch:
        kw.update(context=2, mode=patch.pop("mode"))
    with pytest.raises(ScenarioError) as err:
        dsa(**kw, **patch)
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_glm5_scenario_simulates_with_its_recipe():
    s = load_scenario("scenarios/longseq/glm5-128k-416xh100.yaml")
    rep = simulate(s)
    assert rep.num_gpus == 416 and rep.data["exposed_comm_s"]["CP"] > 0
    assert not rep.data["oom"]


def test_a_contiguous_split_leaves_the_last_rank_the_most_indexer_pairs():
    S, cp = 65536, 4
    balanced = ops_of(dsa(seq=S, context=cp))["dsa_index_scores"].flops_fwd
    last = ops_of(dsa(seq=S, context=cp, layout="contiguous"))["dsa_index_scores"].flops_fwd
    T = S // cp
    assert balanced == pytest.approx(2 * 64 * 128 * T * S / 2)
    assert last == pytest.approx(2 * 64 * 128 * T * (S - T / 2)) and last > 1.7 * balanced


def test_the_indexer_is_a_calibration_op_and_a_profile_times_it():
    from pipesim.calibrate.ops import make_runner
    from pipesim.costs.profile import CostProfile, Measurement, work_of
    from pipesim.costs.summary import required_measurements
    s = dsa(seq=4096)
    (key, shape), = ops_of(s)["dsa_index_scores"].measure_fwd
    assert (key, shape) in required_measurements(s)
    # the profile's work for the key is the op's FLOPs, the diagonal included
    assert work_of(key, shape) == pytest.approx(ops_of(s)["dsa_index_scores"].flops_fwd * (4097 / 4096))
    small = dict(shape, seq=32, heads=4, head_dim=16, dtype="fp32")
    fn, impl = make_runner(key, small, "cpu")
    assert impl == "torch" and fn().shape == (1, 32, 32)
    prof = CostProfile(device={"kind": "cuda", "name": "H100"}, measurements=[Measurement(key, shape, 0.0123, 0.0123, 0.0123, 1)])
    t = cost_model_for(s, profile=prof).time(ops_of(s)["dsa_index_scores"], "fwd")
    assert t.source == "measured" and t.seconds == pytest.approx(0.0123)
    # under CP the op is one rank's block of the square: no lookup
    assert ops_of(dsa(seq=4096, context=2))["dsa_index_scores"].measure_fwd == ()


def test_deepseek_v32_sparse_stage_example_fits_and_beats_dense_mla():
    path = "scenarios/longseq/deepseek-v3.2-128k-2048xh800.yaml"
    s = load_scenario(path)
    rep = simulate(s, trace=False)
    assert s.num_gpus == 2048 and not rep.oom and rep.data["exposed_comm_s"]["CP"] > 0
    dense = simulate(load_scenario(path, ["model.attention_variant=mla"]), trace=False)
    assert rep.step_time_s < 0.5 * dense.step_time_s


def test_index_share_runs_the_indexer_on_one_layer_in_freq():
    from pipesim.costs.dsa import INDEXER_OPS, topk_share
    s = dsa(seq=32768, num_layers=8, dsa_index_topk_freq=4, dsa_index_skip_offset=1)
    # Megatron-Core's is_dsa_skip_topk_layer: layers 1 and 5 compute, the others reuse
    assert [s.model.computes_topk(n) for n in range(1, 9)] == [True, False, False, False, True, False, False, False]
    assert topk_share(s) == pytest.approx(2 / 8)
    shared, every = ops_of(s), ops_of(dsa(seq=32768, num_layers=8))
    for name in INDEXER_OPS:
        assert shared[name].flops_fwd == pytest.approx(every[name].flops_fwd / 4)
    assert shared["attention"].flops_fwd == every["attention"].flops_fwd
    assert total_params(s) < total_params(dsa(seq=32768, num_layers=8))


def test_index_share_cannot_cross_a_pipeline_stage():
    with pytest.raises(ScenarioError) as e:
        load_scenario({"model": {"preset": "deepseek-v3.2", "seq_length": 8192, "num_layers": 8, "num_experts": 64,
                                 "moe_first_dense_layers": 1, "dsa_index_topk_freq": 4},
                       "system": {"preset": "dgx-h100", "num_nodes": 1},
                       "parallel": {"pipeline": 2, "layers_per_stage": [3, 5], "data": 4},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8}})
    msg = str(e.value)
    assert "model.dsa_index_topk_freq" in msg and "starts at layer 4" in msg and "\n" not in msg
    for bad, words in (({"dsa_index_topk_freq": 0}, "dsa_index_topk_freq must be positive"),
                       ({"dsa_index_skip_offset": -1}, "dsa_index_skip_offset must not be negative")):
        with pytest.raises(ScenarioError, match=words):
            dsa(**bad)
