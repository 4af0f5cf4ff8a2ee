"""training.bf16_layers_start / _end: an FP8 / FP4 run keeps its first / last layers' GEMMs in
BF16 (Megatron-Core --first-last-layers-bf16)."""
import pytest

from pipesim import load_scenario, simulate
from pipesim.costs.stage import bf16_variant, costed_layer_ops, stage_costs
from pipesim.errors import PipesimError

BASE = {"model": {"preset": "llama3-8b", "num_layers": 8}, "system": {"preset": "dgx-b200"},
        "parallel": {"data": 4, "pipeline": 2},
        "training": {"global_batch_size": 16, "precision": "fp8", "fp8_recipe": "mxfp8", "zero_stage": 1}}


def scenario(*sets):
    return load_scenario(BASE, list(sets))


def test_kept_layers_cost_their_bf16_ops_and_hold_no_fp8_copies():
    fp8, kept = scenario(), scenario("training.bf16_layers_end=2")
    a, b = stage_costs(fp8), stage_costs(kept)
    assert a[0].forward == b[0].forward                 # the first stage's layers stay FP8
    from pipesim.costs.stage import cost_model_for
    cm = cost_model_for(fp8)
    per = {name: sum(cm.time(o, "fwd").seconds for o in ops)
           for name, ops in (("fp8", costed_layer_ops(fp8)), ("bf16", costed_layer_ops(bf16_variant(fp8))))}
    assert per["bf16"] > per["fp8"]                     # no FP8 GEMMs, no casts either
    assert b[1].forward - a[1].forward == pytest.approx(2 * (per["bf16"] - per["fp8"]), rel=1e-6)
    # the FP8 weight copies exist for the FP8 layers only
    assert b[1].fp8_params == pytest.approx(a[1].fp8_params / 2)
    assert b[1].static.weights < a[1].static.weights
    assert simulate(kept).step_time_s > simulate(fp8).step_time_s


def test_a_hybrid_model_keeps_its_end_layers_in_bf16_by_kind():
    s = load_scenario({"model": {"preset": "nemotronh-8b"}, "system": {"preset": "dgx-b200"},
                       "parallel": {"data": 8},
                       "training": {"global_batch_size": 8, "precision": "fp8", "fp8_recipe": "mxfp8",
                                    "bf16_layers_start": 1, "bf16_layers_end": 1}})
    assert s.layer_cost_kind(0) == ("bf16", "mamba") and s.layer_cost_kind(51) == ("bf16", "mlp")
    assert s.layer_cost_kind(1) == "mlp"
    assert stage_costs(s)[0].forward > 0


@pytest.mark.parametrize("sets, needle", [
    (["training.precision=bf16", "training.bf16_layers_end=1"], "precision: bf16"),
    (["training.bf16_layers_start=5", "training.bf16_layers_end=5"], "between 0 and num_layers(8)"),
])
def test_bad_bf16_layers_are_one_line(sets, needle):
    with pytest.raises(PipesimError) as err:
        scenario(*sets)
    assert needle in str(err.value) and "training.bf16_layers" in str(err.value) and "\n" not in str(err.value)


def test_bf16_moe_layers_cost_their_bf16_expert_gemms():
    from pipesim.costs.layers import shapes_of
    from pipesim.costs.stage import cost_model_for, moe_stage_parts
    base = {"model": {"preset": "mixtral-8x7b", "num_layers": 4}, "system": {"preset": "dgx-b200"},
            "parallel": {"data": 8, "expert": 8},
            "training": {"global_batch_size": 8, "precision": "fp8", "fp8_recipe": "mxfp8", "zero_stage": 1}}
    fp8 = load_scenario(base)
    kept = load_scenario(base, ["training.bf16_layers_end=2"])
    a, b = stage_costs(fp8)[0], stage_costs(kept)[0]
    cm, sh = cost_model_for(fp8), shapes_of(fp8)
    low, high = moe_stage_parts(fp8, cm, sh), moe_stage_parts(bf16_variant(fp8), cm, sh)
    layer = {k: sum(cm.time(o, "fwd").seconds for o in p.ops) for k, p in (("fp8", low), ("bf16", high))}
    assert b.forward - a.forward == pytest.approx(2 * (layer["bf16"] - layer["fp8"]), rel=1e-6)
    assert b.activation_bytes - a.activation_bytes == pytest.approx(2 * (high.saved - low.saved))
    assert b.params == a.params and b.fp8_params == pytest.approx(a.fp8_params / 2)
    assert b.moe_layers == a.moe_layers == 4
