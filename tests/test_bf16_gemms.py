"""training.bf16_gemms: GEMM groups an FP8 / FP4 recipe keeps in BF16 in every layer."""
import pytest

from pipesim import load_scenario
from pipesim.costs.fp8 import BF16_GEMM_GROUPS
from pipesim.costs.stage import bf16_variant, costed_layer_ops, stage_costs
from pipesim.errors import PipesimError

BASE = {"model": {"preset": "llama3-8b", "num_layers": 8}, "system": {"preset": "dgx-b200"},
        "parallel": {"data": 8},
        "training": {"global_batch_size": 16, "precision": "fp8", "fp8_recipe": "nvfp4", "zero_stage": 1,
                     "attention": "flash"}}


def ops_of(*sets):
    return {o.name: o for o in costed_layer_ops(load_scenario(BASE, list(sets)))}


def test_a_kept_group_runs_its_gemms_in_bf16_without_casts_and_keeps_bf16_inputs():
    fp4, kept = ops_of(), ops_of("training.bf16_gemms=[attention]")
    plain = {o.name: o for o in costed_layer_ops(bf16_variant(load_scenario(BASE)))}
    assert fp4["qkv"].gemms_fwd[0][4] == "fp4" and kept["qkv"].gemms_fwd[0][4] == "bf16"
    assert kept["fc1"] == fp4["fc1"]                                  # the MLP stays FP4
    assert "qkv_fp8_cast" in fp4 and "qkv_fp8_cast" not in kept and "proj_fp8_cast" not in kept
    assert kept["qkv"].saved_bytes == plain["qkv"].saved_bytes        # the BF16 LN output
    assert kept["proj"].saved_bytes == plain["proj"].saved_bytes == 0.0    # shares flash's output


def test_kept_groups_hold_no_low_precision_weight_copies():
    all_bf16 = load_scenario(BASE, ["training.bf16_gemms=[attention, mlp]"])
    assert stage_costs(all_bf16)[0].fp8_params == 0.0
    assert stage_costs(load_scenario(BASE))[0].fp8_params > 0.0
    assert set(BF16_GEMM_GROUPS) >= {"attention", "mlp", "experts", "moe_latent", "ssm_out_proj"}


@pytest.mark.parametrize("sets, needle", [
    (["training.precision=bf16", "training.bf16_gemms=[attention]"], "precision: bf16"),
    (["training.bf16_gemms=[norms]"], "training.bf16_gemms"),
])
def test_bad_bf16_gemms_are_one_line(sets, needle):
    with pytest.raises(PipesimError) as err:
        load_scenario(BASE, sets)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_mxfp8_groups_inside_an_nvfp4_run_keep_fp8_gemms_casts_and_copies():
    from pipesim.costs.fp8 import CAST_BYTES, weight_copy_bytes
    fp4, mixed = ops_of(), ops_of("training.mxfp8_gemms=[mlp]")
    assert fp4["fc1"].gemms_fwd[0][4] == "fp4" and mixed["fc1"].gemms_fwd[0][4] == "fp8"
    assert mixed["qkv"] == fp4["qkv"]
    _, m, n, k, _ = mixed["fc1"].gemms_fwd[0]
    assert mixed["fc1_fp8_cast"].bytes_fwd == pytest.approx(m * k * CAST_BYTES["mxfp8"])
    assert fp4["fc1_fp8_cast"].bytes_fwd == pytest.approx(m * k * CAST_BYTES["nvfp4"])
    a = stage_costs(load_scenario(BASE))[0]
    b = stage_costs(load_scenario(BASE, ["training.mxfp8_gemms=[mlp]"]))[0]
    mlp = mixed["fc1"].params + mixed["fc2"].params
    assert b.static.weights - a.static.weights == pytest.approx(
        8 * mlp * (weight_copy_bytes("mxfp8", "b200") - weight_copy_bytes("nvfp4", "b200")))


def test_bf16_mtp_runs_the_mtp_blocks_and_projection_in_bf16():
    base = {"model": {"preset": "deepseek-v3", "num_layers": 4, "moe_first_dense_layers": 1, "mtp_layers": 1},
            "system": {"preset": "dgx-b200", "num_nodes": 4}, "parallel": {"data": 32, "expert": 32},
            "training": {"global_batch_size": 32, "precision": "fp8", "fp8_recipe": "mxfp8"}}
    plain, kept = load_scenario(base), load_scenario(base, ["training.bf16_mtp=true"])
    from pipesim.costs.stage import costed_mtp_ops
    assert {o.name: o for o in costed_mtp_ops(kept)}["mtp_eh_proj"].gemms_fwd[0][4] == "bf16"
    assert kept.mtp_cost_kinds == [("bf16", True)] and plain.mtp_cost_kinds == [True]
    a, b = stage_costs(plain)[-1], stage_costs(kept)[-1]
    assert b.forward > a.forward and b.fp8_params < a.fp8_params and b.params == a.params


@pytest.mark.parametrize("sets, needle", [
    (["training.fp8_recipe=mxfp8", "training.mxfp8_gemms=[mlp]"], "need fp8_recipe: nvfp4"),
    (["training.mxfp8_gemms=[mlp]", "training.fp8_param_gather=true"], "fp8_param_gather"),
    (["training.mxfp8_gemms=[mlp]", "training.bf16_gemms=[mlp]"], "also in training.bf16_gemms"),
    (["training.precision=bf16", "training.fp8_recipe=tensorwise", "training.bf16_mtp=true"], "training.bf16_mtp"),
])
def test_bad_mixed_recipes_are_one_line(sets, needle):
    with pytest.raises(PipesimError) as err:
        load_scenario(BASE, sets)
    assert needle in str(err.value) and "\n" not in str(err.value)
