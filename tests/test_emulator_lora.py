"""LoRA in the emulator (pipesim/emulator/lora.py): the base frozen, the adapters laid out over the
tensor group as Megatron-Bridge lays them out; the loss and every adapter gradient equal a
single-process run, and nothing else gets a gradient. Each case starts 2-4 local processes."""
import os

import pytest

torch = pytest.importorskip("torch")

from _emulator_helpers import matches_single_process  # noqa: E402

HERE = os.path.dirname(__file__)
TINY = os.path.join(HERE, "..", "scenarios", "emulator", "tiny_1f1b.yaml")
LLAMA = ["model.num_kv_heads=2", "model.position=rotary", "model.activation=swiglu", "model.norm=rmsnorm",
         "model.bias=false", "training.lora_rank=4"]


def check(tmp_path, sets):
    s, result = matches_single_process(TINY, tmp_path, LLAMA + sets, timeout=90)
    from pipesim.emulator.reference import assemble_grads
    _, grads = assemble_grads(str(tmp_path))
    # only adapters learn: A and B beside each targeted linear of every layer
    assert grads and all(".lora_" in name for name in grads)
    assert len(grads) == 2 * len(s.training.lora_targets) * s.model.num_layers
    assert all(float(g.abs().sum()) > 0 for g in grads.values())
    return s, result


def test_adapters_beside_every_linear_over_a_pipeline(tmp_path):
    check(tmp_path, [])


@pytest.mark.parametrize("sets", [
    ["parallel.tensor=2", "parallel.pipeline=1", "training.schedule=gpipe"],
    ["parallel.tensor=2", "system.gpus_per_node=4", "parallel.sequence_parallel=true", "training.schedule=zb-h1"],
])
def test_adapters_over_tensor_parallel_ranks_match_one_process(tmp_path, sets):
    check(tmp_path, sets)


def test_attention_only_adapters_with_data_parallelism(tmp_path):
    check(tmp_path, ["training.lora_targets=[qkv,proj]", "parallel.pipeline=1", "parallel.data=2",
                     "training.schedule=gpipe"])


def test_adapter_dropout_is_refused_by_the_emulator():
    from pipesim.emulator import prepare
    from pipesim.emulator.model import check_supported
    from pipesim.errors import ScenarioError
    with pytest.raises(ScenarioError, match="lora_dropout"):
        check_supported(prepare(TINY, LLAMA + ["training.lora_dropout=0.1"]))
