"""training.optimizer_state_dtype: Adam's moments in BF16 (Megatron-Core's precision-aware optimizer)."""
import pytest

from pipesim.costs import stage_costs
from pipesim.costs.memory import optimizer_bytes_per_param
from pipesim.costs.optimizer import optimizer_bytes
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario


def scenario(dtype="fp32", **training):
    return load_scenario({"model": {"preset": "llama2-7b", "num_layers": 4}, "system": {"preset": "dgx-h100"},
                          "parallel": {"data": 8},
                          "training": {"global_batch_size": 8, "zero_stage": 1, "optimizer_state_dtype": dtype,
                                       **training}})


def test_bf16_moments_keep_8_bytes_of_state_per_parameter_instead_of_12():
    # fp32 master (4) + m and v (4 + 4, or 2 + 2)
    assert optimizer_bytes_per_param("adam", "bf16") == 12 and optimizer_bytes_per_param("adam", "bf16", 2) == 8
    fp32, bf16 = stage_costs(scenario())[0], stage_costs(scenario("bf16"))[0]
    assert bf16.static.optimizer == pytest.approx(fp32.static.optimizer * 8 / 12)
    assert bf16.static.weights == fp32.static.weights and bf16.static.gradients == fp32.static.gradients


def test_the_adam_kernel_moves_8_bytes_less_per_parameter():
    # read master, grad, m, v and write master, m, v: 28 bytes, 20 with 2-byte moments
    full, half = (optimizer_bytes("adam", "bf16", 4, 1e6, 1e6, moment_bytes=b) for b in (4, 2))
    assert full - half == pytest.approx(8 * 1e6)
    assert stage_costs(scenario("bf16"))[0].optimizer_step < stage_costs(scenario())[0].optimizer_step


@pytest.mark.parametrize("sets, needle", [
    (["training.optimizer=sgd"], "optimizer: sgd"),
    (["training.precision=fp32"], "precision: fp32"),
    (["training.optimizer_state_dtype=fp16"], "training.optimizer_state_dtype"),
])
def test_bf16_states_outside_mixed_precision_adam_are_refused_in_one_line(sets, needle):
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario("bf16"), sets)
    assert needle in str(err.value) and "training.optimizer_state_dtype" in str(err.value)
    assert "\n" not in str(err.value)


def test_master_remainders_keep_2_bytes_of_master_per_parameter():
    """training.master_weights remainders (TE FusedAdam store_param_remainders): the master's low 16
    bits beside the BF16 parameter, 2 bytes instead of 4; with BF16 moments 6 bytes of state in all."""
    assert optimizer_bytes_per_param("adam", "bf16", 4, 2) == 10 and optimizer_bytes_per_param("adam", "bf16", 2, 2) == 6
    fp32, rem = stage_costs(scenario())[0], stage_costs(scenario(master_weights="remainders"))[0]
    assert rem.static.optimizer == pytest.approx(fp32.static.optimizer * 10 / 12)
    assert rem.static.weights == fp32.static.weights and rem.static.gradients == fp32.static.gradients
    # the parameter is updated in place: no copy of the master into it (read 4, write 2 per parameter)
    full, rem_bytes = (optimizer_bytes("adam", "bf16", 4, 1e6, 1e6, master_bytes=b) for b in (4, 2))
    assert full - rem_bytes == pytest.approx(6 * 1e6)
    assert rem.optimizer_step < fp32.optimizer_step


@pytest.mark.parametrize("sets, needle", [
    (["training.optimizer=sgd"], "optimizer is sgd"),
    (["training.precision=fp16"], "got fp16"),
    (["training.zero_stage=3"], "zero_stage <= 2"),
    (["training.precision=fp8", "training.fp8_recipe=tensorwise"], "fp8_recipe tensorwise"),
])
def test_remainders_outside_bf16_adam_on_the_distributed_optimizer_are_refused_in_one_line(sets, needle):
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario(master_weights="remainders"), sets)
    assert "training.master_weights" in str(err.value) and needle in str(err.value) and "\n" not in str(err.value)
    load_scenario(scenario(master_weights="remainders"), ["training.precision=fp8", "training.fp8_recipe=delayed"])
