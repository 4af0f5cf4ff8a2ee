"""PyTorch FSDP2 keeps fp32 weight and gradient shards and no separate master copy: 16 bytes per
parameter over the group with Adam, whatever the reduce dtype (pipesim/costs/memory.py)."""
import pytest

from pipesim import load_scenario
from pipesim.costs.memory import static_memory
from pipesim.costs.stage import stage_costs


def llama(collectives: str, fp32_reduce: bool, reshard: bool = True):
    return load_scenario({"model": {"preset": "llama3-8b", "seq_length": 4096},
                          "system": {"preset": "dgx-h100", "num_nodes": 1},
                          "parallel": {"data": 8},
                          "training": {"micro_batch_size": 1, "global_batch_size": 8, "zero_stage": 3,
                                       "zero3_collectives": collectives, "grad_reduce_in_fp32": fp32_reduce,
                                       "reshard_after_forward": reshard}})


@pytest.mark.parametrize("fp32_reduce", [False, True])
def test_fsdp2_shards_are_fp32_masters(fp32_reduce):
    c = stage_costs(llama("fsdp2", fp32_reduce))[0]
    per = c.params / 8
    assert c.static.weights == pytest.approx(4 * per)            # the fp32 shard
    assert c.static.gradients == pytest.approx(4 * per)
    assert c.static.optimizer == pytest.approx(8 * per)          # Adam's m and v only
    megatron = stage_costs(llama("layer", fp32_reduce))[0]       # 16-bit weights + fp32 masters in the optimizer
    assert megatron.static.total == pytest.approx((18 if fp32_reduce else 16) * per)


def test_resident_weights_add_their_gathered_copy_only_over_a_group():
    c = stage_costs(llama("fsdp2", True, reshard=False))[0]
    assert c.static.weights == pytest.approx(4 * c.params / 8 + 2 * c.params)
    alone = static_memory(1.0, "bf16", "adam", 3, 1, resident_weights=True, fp32_shards=True)
    assert (alone.weights, alone.gradients, alone.optimizer) == (4.0, 4.0, 8.0)
