"""titan2024 held-out family: torchtitan's FSDP2 rows map as published (no simulation)."""
import pytest

from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.validation import case_scenario, load_cases


def _cases():
    return {c.id: c for c in load_cases() if c.suite == "titan2024"}


def test_rows_map_fsdp_over_every_gpu_and_the_checkpointing_mode():
    cases = _cases()
    assert len(cases) == 8
    layer = case_scenario(cases["titan2024-llama2-13b-ac-layer"])     # every 2nd of 40 layers
    assert layer["training"]["recompute"] == "full" and layer["training"]["recompute_num_layers"] == 20
    assert layer["training"]["zero_stage"] == 3 and layer["parallel"]["data"] == 64
    assert layer["training"]["kernel_fusion"] == "eager"        # the presets' norm_type rmsnorm, compile false
    assert layer["training"]["global_batch_size"] == 128 and layer["model"]["seq_length"] == 4096
    none = case_scenario(cases["titan2024-llama2-13b-ac-no"])
    assert none["training"]["recompute"] == "none" and "recompute_num_layers" not in none["training"]
    full = case_scenario(cases["titan2024-llama3-70b-ac-full"])
    assert full["system"] == {"preset": "dgx-a100-80gb", "num_nodes": 8}
    s = load_scenario(full)
    assert s.num_gpus == 64 and s.num_microbatches == 1
    assert cases["titan2024-llama3-8b-ac-layer"].target == 2904.0


def test_selective_op_rows_map_to_the_per_op_policy_and_unknown_modes_are_refused():
    op = case_scenario(_cases()["titan2024-llama2-70b-ac-op"])
    assert op["training"]["recompute"] == "selective_op" and "recompute_num_layers" not in op["training"]
    case = _cases()["titan2024-llama2-70b-ac-op"]
    case.raw = dict(case.raw, training={"activation_checkpointing": "selective block"})
    with pytest.raises(ScenarioError, match="activation checkpointing 'selective block'") as e:
        case_scenario(case)
    assert "\n" not in str(e.value)


def test_h200_rows_map_compile_and_float8_as_their_command_states():
    cases = {c.id: c for c in load_cases() if c.suite == "titan2025"}
    assert len(cases) == 2
    d = case_scenario(cases["titan2025-llama3-8b-h200-32gpu"])
    s = load_scenario(d)
    assert s.system.gpu.name.startswith("H200") and s.num_gpus == 32 and s.training.micro_batch_size == 2
    assert s.training.kernel_fusion == "fused" and s.training.attention_kernel == "fa2"    # compiled, SDPA
    assert s.training.precision == "fp8" and s.training.fp8_recipe == "tensorwise" and s.training.fp8_param_gather
    # the loss compiled with the model (torchtitan components/loss.py at e7c0cae)
    assert s.training.recompute == "selective_op" and s.training.cross_entropy == "torch_compiled"
    case = cases["titan2025-llama3-8b-h200-64gpu"]
    case.raw = dict(case.raw, training=dict(case.raw["training"], float8="rowwise"))
    with pytest.raises(ScenarioError, match="training.float8 'rowwise'") as e:
        case_scenario(case)
    assert "\n" not in str(e.value)


def test_async_tp_rows_map_tp_fsdp_and_the_compiled_loss_of_june_2025():
    cases = {c.id: c for c in load_cases() if c.suite == "titan2506"}
    assert len(cases) == 8
    vanilla = load_scenario(case_scenario(cases["titan2506-llama3.1-70b-fsdp32-tp8-bf16"]))
    fast = load_scenario(case_scenario(cases["titan2506-llama3.1-70b-fsdp32-tp8-bf16-asynctp"]))
    assert (vanilla.parallel.tensor, vanilla.parallel.data, vanilla.num_gpus) == (8, 32, 256)
    assert vanilla.training.micro_batch_size == 16 and vanilla.training.recompute == "full"
    assert not vanilla.training.overlap_tp_comm and fast.training.overlap_tp_comm
    assert vanilla.training.cross_entropy == "torch_compiled" and vanilla.training.precision == "bf16"
    f8 = load_scenario(case_scenario(cases["titan2506-llama3.1-8b-fsdp8-tp8-float8"]))
    assert f8.training.fp8_recipe == "tensorwise" and not f8.training.fp8_param_gather
    assert f8.training.recompute == "selective_op" and f8.training.micro_batch_size == 12
