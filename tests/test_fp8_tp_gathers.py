"""Sequence-parallel all-gathers of FP8 linears move FP8 bytes (pipesim/costs/fp8.py fp8_gathers):
Transformer Engine and torchao quantize before they gather; the reduce-scatters stay 16-bit, and a
LoRA-targeted base whose gathered norm output the adapter reads gathers in 16 bits."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import layer_ops

BASE = {"model": {"preset": "llama3-8b", "num_layers": 4}, "system": {"preset": "dgx-h100"},
        "parallel": {"tensor": 4, "data": 2, "sequence_parallel": True},
        "training": {"global_batch_size": 8, "precision": "fp8", "attention": "flash"}}


def _comms(s):
    return {o.name: (o.comm_fwd, o.comm_bwd) for o in layer_ops(s)}


def test_fp8_gathers_one_byte_and_scatters_two():
    bf16 = _comms(load_scenario(BASE, ["training.precision=bf16"]))
    fp8 = _comms(load_scenario(BASE))
    for name in ("qkv", "fc1"):     # column: the input gathered (again for dW), its gradient scattered
        (ag16,), (again16, rs16) = bf16[name]
        (ag8,), (again8, rs8) = fp8[name]
        assert (ag8.kind, again8.kind, again8.wgrad_input, rs8.kind) == ("all_gather", "all_gather", True,
                                                                          "reduce_scatter")
        assert ag8.bytes == again8.bytes == pytest.approx(ag16.bytes / 2) == pytest.approx(again16.bytes / 2)
        assert rs8.bytes == rs16.bytes
    for name in ("proj", "fc2"):                    # row: the output scattered, its gradient gathered
        (rs16,), (ag16,) = bf16[name]
        (rs8,), (ag8,) = fp8[name]
        assert rs8.bytes == rs16.bytes and ag8.bytes == pytest.approx(ag16.bytes / 2)


def test_without_sequence_parallelism_the_all_reduces_stay_16_bit():
    plain = ["parallel.sequence_parallel=false"]
    assert _comms(load_scenario(BASE, plain)) == _comms(load_scenario(BASE, plain + ["training.precision=bf16"]))


def test_a_lora_targeted_column_base_gathers_its_norm_output_in_16_bits():
    lora = ["training.lora_rank=16", "training.lora_targets=[qkv, proj]"]
    fp8, bf16 = _comms(load_scenario(BASE, lora)), _comms(load_scenario(BASE, lora + ["training.precision=bf16"]))
    assert fp8["qkv"][0] == bf16["qkv"][0]                        # returned to the adapter: 16-bit
    assert fp8["fc1"][0][0].bytes == pytest.approx(bf16["fc1"][0][0].bytes / 2)    # not targeted: FP8
    regather = _comms(load_scenario(BASE, lora + ["training.lora_sp_regather=true"]))
    assert regather["qkv"][0][0].bytes == pytest.approx(bf16["qkv"][0][0].bytes / 2)
