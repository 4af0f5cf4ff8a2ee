"""training.recompute_modules (Megatron-Core --recompute-modules) under recompute: selective."""
import pytest

from pipesim import load_scenario
from pipesim.costs.recompute_modules import mla_freed
from pipesim.costs.stage import comm_seconds, cost_model_for, costed_layer_ops, layer_recompute
from pipesim.errors import ScenarioError


def scenario(modules=("core_attn",), recompute="selective", preset=None, tensor=1, **model):
    spec = {"preset": preset, "num_layers": 4} if preset else {
        "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "seq_length": 2048, "vocab_size": 4096,
        "norm": "rmsnorm", "activation": "swiglu", "position": "rotary", "bias": False, "dropout": False}
    spec.update(model)
    par = {"tensor": tensor, "pipeline": 1, "data": 8 // tensor, "sequence_parallel": tensor > 1}
    if preset:
        par["expert"] = 8 // tensor
    return load_scenario({"model": spec, "system": {"preset": "dgx-h100", "num_nodes": 1}, "parallel": par,
                          "training": {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16",
                                       "attention": "flash", "recompute": recompute,
                                       "recompute_modules": list(modules)}})


def layer(s, moe=False):
    cm = cost_model_for(s)
    ops = costed_layer_ops(s, moe)
    return cm, {o.name: o for o in ops}, layer_recompute(s, cm, ops)


def test_layernorm_discards_the_norm_outputs_the_linears_kept():
    cm, ops, (t, kept, dropped) = layer(scenario(["layernorm"]))
    assert t == pytest.approx(cm.time(ops["ln1"], "fwd").seconds + cm.time(ops["ln2"], "fwd").seconds)
    assert dropped == pytest.approx(ops["qkv"].saved_bytes + ops["fc1"].saved_bytes)
    assert kept + dropped == pytest.approx(sum(o.saved_bytes for o in ops.values()))


def test_mlp_checkpoint_reruns_the_block_and_its_collectives():
    for tensor in (1, 2):
        s = scenario(["mlp"], tensor=tensor)
        cm, ops, (t, kept, dropped) = layer(s)
        compute = sum(cm.time(ops[n], "fwd").seconds for n in ("fc1", "act", "fc2"))
        comms = comm_seconds(s, ops["fc1"].comm_fwd + ops["fc2"].comm_fwd)
        assert t == pytest.approx(compute + comms)
        assert (comms > 0) == (tensor > 1)
        assert dropped == pytest.approx(ops["act"].saved_bytes + ops["fc2"].saved_bytes)


def test_moe_act_and_mla_up_projections():
    s = scenario(["moe_act", "mla_up_proj"], preset="deepseek-v3", moe_first_dense_layers=0)
    cm, ops, (t, kept, dropped) = layer(s, moe=True)
    assert t == pytest.approx(sum(cm.time(ops[n], "fwd").seconds for n in ("expert_act", "q_up", "kv_up")))
    m = s.model
    qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    qkv = mla_freed(s, list(ops.values()))
    assert 0 < qkv < ops["attention"].saved_bytes
    assert qkv / (ops["attention"].saved_bytes - qkv) == pytest.approx((2 * qk + v) / v, rel=0.05)
    assert dropped == pytest.approx(ops["expert_fc2"].saved_bytes + qkv)


def test_default_is_the_attention_core_and_flash_frees_nothing_but_runs_again():
    """Megatron-Core checkpoints the core attention whatever its kernel (attention.py
    _checkpointed_attention_forward under checkpoint_core_attention): a fused kernel keeps nothing
    large, so nothing is freed, but its forward runs again in the backward."""
    cm, ops, (t, kept, dropped) = layer(scenario())
    assert dropped == 0 and t == pytest.approx(cm.time(ops["attention"], "fwd").seconds) and t > 0


def test_eager_core_attention_reruns_scores_softmax_and_the_product_with_v():
    """The unfused core (Korthikanti et al. 2022, Sec. 4.2, Fig. 3): QK^T, softmax, dropout and the
    attention over V all run again; the s x s tensors are what is freed."""
    s = load_scenario({"model": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "seq_length": 2048,
                                 "vocab_size": 4096, "dropout": True},
                       "system": {"preset": "dgx-a100-80gb", "num_nodes": 1}, "parallel": {"data": 8},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16",
                                    "attention": "eager", "recompute": "selective"}})
    cm, ops, (t, kept, dropped) = layer(s)
    core = ("logits", "softmax", "attn_dropout", "attend")
    assert t == pytest.approx(sum(cm.time(ops[n], "fwd").seconds for n in core))
    assert dropped == pytest.approx(sum(ops[n].selective_dropped_bytes for n in core)) and dropped > 0


def test_modules_need_selective_and_known_names():
    with pytest.raises(ScenarioError, match="training.recompute_modules") as e:
        scenario(["mlp"], recompute="full")
    assert "\n" not in str(e.value)
    with pytest.raises(ScenarioError, match=r"training.recompute_modules\[0\].*'moe_act'") as e:
        scenario(["attention"])
    assert "\n" not in str(e.value)


def test_a_suggested_other_policy_resets_the_submodules():
    from pipesim.report.suggest import recompute_candidate, variant
    s = scenario(["mlp"])
    title, changes, how = recompute_candidate(s, "full")
    assert how == "--set training.recompute=full --set training.recompute_modules=[core_attn]"
    assert variant(s, changes).training.recompute_modules == ("core_attn",)
    assert recompute_candidate(scenario(), "full")[2] == "--set training.recompute=full"


def test_moe_checkpoint_reruns_the_block_and_its_all_to_all():
    from pipesim.costs.moe import MoELayerCosts
    from pipesim.costs.layers import shapes_of
    from pipesim.costs.stage import layer_recompute as rc
    s = scenario(["moe"], preset="qwen3-30b-a3b")
    cm = cost_model_for(s)
    moe = MoELayerCosts.build(s, cm, shapes_of(s), rc)
    ops = {o.name: o for o in moe.ops}
    block = sum(cm.time(o, "fwd").seconds for n, o in ops.items()
                if n.removesuffix("_fp8_cast") in ("router", "router_topk", "permute", "expert_fc1", "expert_act",
                                                   "expert_fc2", "unpermute"))
    assert moe.recompute == pytest.approx(block + moe.a2a.fwd + moe.host_fwd)
    # the block keeps only its input (what the router saved)
    freed = ("router_topk", "permute", "expert_fc1", "expert_act", "expert_fc2", "unpermute")
    assert moe.saved == pytest.approx(sum(o.saved_bytes for n, o in ops.items() if n not in freed))
    act_only = MoELayerCosts.build(scenario(["moe_act"], preset="qwen3-30b-a3b"), cm, shapes_of(s), rc)
    assert act_only.recompute < moe.recompute and moe.saved < act_only.saved
