"""training.recompute: selective_op, torchtitan's per-op save list: keep the attention output and
every second matmul's output, re-run the rest of the layer in the backward."""
import pytest

from pipesim import load_scenario
from pipesim.costs import stage_costs
from pipesim.costs.layers import FP32, shapes_of
from pipesim.costs.stage import OP_SAC_SAVED_MATMULS, cost_model_for, costed_layer_ops, layer_recompute
from pipesim.errors import ScenarioError


def scenario(recompute="selective_op", tensor=1, **training):
    return load_scenario({
        "model": {"num_layers": 4, "hidden_size": 2048, "num_attention_heads": 16, "seq_length": 2048,
                  "vocab_size": 1024, "norm": "rmsnorm", "activation": "swiglu", "bias": False,
                  "position": "rotary", "dropout": False},
        "system": {"preset": "dgx-h100", "num_nodes": 1},
        "parallel": {"tensor": tensor, "pipeline": 1, "data": 8 // tensor, "sequence_parallel": tensor > 1},
        "training": {"micro_batch_size": 2, "global_batch_size": 16 // tensor, "precision": "bf16",
                     "attention": "flash", "recompute": recompute, **training}})


def test_reruns_half_the_matmuls_and_every_memory_bound_op_but_not_attention():
    s = scenario()
    cm, ops = cost_model_for(s), costed_layer_ops(s)
    t, kept, working = layer_recompute(s, cm, ops)
    fwd = {o.name: cm.time(o, "fwd").seconds for o in ops}
    expect = sum((1 - OP_SAC_SAVED_MATMULS) * fwd[o.name] if o.kind == "matmul" else fwd[o.name]
                 for o in ops if not (o.attention_core or o.flash))
    assert t == pytest.approx(expect)
    full_t = layer_recompute(s, cm, ops, policy="full")[0]
    attention = sum(fwd[o.name] for o in ops if o.attention_core or o.flash)
    assert t < full_t - attention
    sh = shapes_of(s)
    tokens = sh.b * sh.s
    matmul_out = sum(g[0] * g[1] * g[2] for o in ops if o.kind == "matmul" for g in o.gemms_fwd) * sh.e
    # the layer input, half the matmul outputs, the attention output and its log-sum-exp
    assert kept == pytest.approx(tokens * sh.h * sh.e + OP_SAC_SAVED_MATMULS * matmul_out
                                 + tokens * sh.a * sh.d * sh.e + sh.b * sh.a * sh.s * FP32)
    assert kept + working == pytest.approx(sum(o.saved_bytes for o in ops))
    assert working > 0


def test_sits_between_no_recompute_and_full_in_time_and_memory():
    c = {rc: stage_costs(scenario(rc))[0] for rc in ("none", "selective_op", "full")}
    assert c["none"].recompute == 0 < c["selective_op"].recompute < c["full"].recompute
    assert c["full"].activation_bytes < c["selective_op"].activation_bytes < c["none"].activation_bytes


def test_sequence_parallel_gathers_run_again():
    s = scenario(tensor=2)
    cm, ops = cost_model_for(s), costed_layer_ops(s)
    t = layer_recompute(s, cm, ops)[0]
    compute_only = sum((1 - OP_SAC_SAVED_MATMULS) * cm.time(o, "fwd").seconds if o.kind == "matmul"
                       else cm.time(o, "fwd").seconds for o in ops if not (o.attention_core or o.flash))
    assert t > compute_only


def test_cnn_and_emulator_refuse_it_in_one_line():
    with pytest.raises(ScenarioError, match="training.recompute") as e:
        load_scenario({"model": {"arch": "cnn", "cnn": "resnet50"}, "system": {"preset": "dgx-a100-80gb", "num_nodes": 1},
                       "parallel": {"pipeline": 2, "data": 4},
                       "training": {"micro_batch_size": 8, "global_batch_size": 64, "recompute": "selective_op"}})
    assert "\n" not in str(e.value)
    from pipesim.emulator.model import check_supported
    with pytest.raises(ScenarioError, match="selective_op is not emulated"):
        check_supported(scenario())
    with pytest.raises(ScenarioError, match="training.recompute_modules"):
        check_supported(scenario("selective", recompute_modules=["mlp"]))
