"""training.fp8_recipe: nvfp4 -- FP4 GEMMs on Blackwell with their two-pass casts."""
import pytest

from pipesim import load_scenario, simulate
from pipesim.costs.fp8 import CAST_BYTES, FP4_BYTES, gemm_dtype, weight_copy_bytes
from pipesim.costs.stage import cost_model_for, costed_layer_ops
from pipesim.errors import ScenarioError


def scenario(recipe="nvfp4", system="dgx-b200", **training):
    return load_scenario({
        "model": {"preset": "llama3-8b", "seq_length": 4096},
        "system": {"preset": system, "num_nodes": 1},
        "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
        "training": {"micro_batch_size": 1, "global_batch_size": 64, "precision": "fp8", "fp8_recipe": recipe,
                     "attention": "flash", **training}})


def test_gemms_run_in_fp4_and_keep_their_fp4_inputs():
    fp8, fp4 = scenario("mxfp8"), scenario()
    assert gemm_dtype(fp4.training) == "fp4" and gemm_dtype(fp8.training) == "fp8"
    ops8 = {o.name: o for o in costed_layer_ops(fp8)}
    ops4 = {o.name: o for o in costed_layer_ops(fp4)}
    assert ops4["qkv"].gemms_fwd[0][4] == "fp4" and all(g[4] == "fp4" for g in ops4["fc2"].gemms_bwd)
    assert ops4["qkv"].saved_bytes == pytest.approx(ops8["qkv"].saved_bytes * FP4_BYTES)
    # attention stays in 16 bits
    assert ops4["attention"].flash == ops8["attention"].flash
    cm = cost_model_for(fp4)
    assert cm.time(ops4["fc1"], "fwd").seconds < cm.time(ops8["fc1"], "fwd").seconds


def test_casts_are_two_passes_with_both_fp4_copies():
    assert CAST_BYTES["nvfp4"] == pytest.approx(2 + 2 + 2 * (0.5 + 1 / 16))
    ops4 = {o.name: o for o in costed_layer_ops(scenario())}
    m, k = ops4["qkv"].gemms_fwd[0][1], ops4["qkv"].gemms_fwd[0][3]
    assert ops4["qkv_fp8_cast"].bytes_fwd == pytest.approx(m * k * CAST_BYTES["nvfp4"])
    assert weight_copy_bytes("nvfp4", "b200") == pytest.approx(2 * FP4_BYTES)


def test_faster_than_mxfp8_far_from_the_tensor_core_ratio_and_mfu_against_fp4_peak():
    r8, r4 = simulate(scenario("mxfp8"), trace=False), simulate(scenario(), trace=False)
    speedup = r8.step_time_s / r4.step_time_s
    assert 1.0 < speedup < 1.5            # 2x tensor-core rate; casts, attention, norms stay
    d8, d4 = r8.to_dict(), r4.to_dict()
    assert d4["mfu"] == pytest.approx(d8["mfu"] * speedup * 4500 / 9000, rel=1e-6)


def test_hopper_is_a_one_line_error():
    with pytest.raises(ScenarioError, match="training.fp8_recipe: nvfp4 needs Blackwell") as e:
        simulate(scenario(system="dgx-h100"), trace=False)
    assert "\n" not in str(e.value)


def test_fp4_parameter_storage_drops_the_bf16_weights_and_gathers_fp4():
    """Megatron-Core --fp4-param-gather (NVFP4 native weights, #4005): the FP4 GEMMs' weights live
    as their two FP4 copies only, the distributed optimizer all-gathers the row-wise one (0.5625 bytes
    per weight instead of 2) and casts its fp32 master shard straight to FP4."""
    from pipesim.costs.fp8 import fp8_storage_cast_bytes, gathered_bytes_per_param, stored_bytes
    from pipesim.costs.stage import stage_costs
    plain = stage_costs(scenario(zero_stage=1))[0]
    stored = stage_costs(scenario(zero_stage=1, fp8_param_gather=True))[0]
    fp4 = plain.fp8_params
    assert fp4 > 0 and plain.static.weights - stored.static.weights == pytest.approx(2 * fp4)
    assert stored_bytes("nvfp4") == FP4_BYTES and stored_bytes("mxfp8") == 1.0
    assert gathered_bytes_per_param(2, 1.0, FP4_BYTES) == FP4_BYTES
    # master shard 4 read + FP4 written, the column-wise copy re-built from the gathered row-wise one
    assert fp8_storage_cast_bytes(8.0, 1.0, "nvfp4", "b200") == pytest.approx((4 + FP4_BYTES) + 8 * 2 * FP4_BYTES)
    # with the distributed optimizer a rank casts its 1/8 master shard, not every weight
    steps = dict(stored.step_ops)
    assert steps["FP8_WEIGHT_CAST"] < dict(plain.step_ops)["FP8_WEIGHT_CAST"]
