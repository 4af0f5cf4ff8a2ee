"""Muon (training.optimizer: muon): Newton-Schulz FLOPs, the matrices it manages, the layer-wise
distribution over data-parallel ranks, tensor-parallel modes, memory and the one-line errors."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from pipesim import load_scenario
from pipesim.costs.muon import local_matrix_params, lpt_max, ns_flops
from pipesim.costs.layers import layer_ops
from pipesim.costs.stage import stage_costs
from pipesim.errors import PipesimError


def scenario(optimizer="muon", zero=1, tensor=2, data=4, **training):
    return load_scenario({"model": "llama3-8b", "system": {"preset": "dgx-h100", "gpus_per_node": tensor * data},
                          "parallel": {"tensor": tensor, "data": data, "sequence_parallel": tensor > 1},
                          "training": {"global_batch_size": 64, "attention": "flash", "precision": "bf16",
                                       "optimizer": optimizer, "zero_stage": zero, **training}})


def steps_of(s) -> dict:
    return dict(stage_costs(s)[0].step_ops)


@pytest.mark.parametrize("rows,cols", [(48, 80), (80, 48), (64, 64)])
def test_ns_flops_count_torch_reference(rows, cols):
    """The FLOPs of torch.optim.Muon's own Newton-Schulz (the reference implementation) on a
    rows x cols matrix, counted by torch's FLOP counter."""
    from torch.optim._muon import _zeropower_via_newtonschulz
    with FlopCounterMode(display=False) as counter:
        _zeropower_via_newtonschulz(torch.randn(rows, cols), (3.4445, -4.775, 2.0315), 5, 1e-7)
    assert counter.get_total_flops() == ns_flops(rows, cols, 5)


def test_lpt_packs_largest_first_onto_the_least_loaded():
    # 5 -> A, 4 -> B, 3 -> B (7), 3 -> A (8), 3 -> B (10): LPT's 10, not the optimum 9
    assert lpt_max([3, 5, 3, 4, 3], 2) == 10
    assert lpt_max([3, 5, 3], 8) == 5                   # fewer matrices than ranks: the largest
    assert lpt_max([3, 5, 3], 1) == 11                  # no distributed optimizer: all of them


def test_matrices_are_the_linear_weights_with_qkv_apart():
    s = scenario(tensor=1)
    ops = layer_ops(s)
    m = s.model
    q, kv = m.num_attention_heads * m.head_dim, m.kv_heads * m.head_dim
    h, f = m.hidden_size, m.ffn
    assert local_matrix_params(ops) == q * h + 2 * kv * h + h * q + 2 * f * h + f * h
    qkv = next(o for o in ops if o.name == "qkv")
    assert [(c, r, k) for c, r, k, _, _ in qkv.matrices] == [(1, q, h), (2, kv, h)]
    # every parameter of the layer but the two norms' weights
    assert sum(o.params for o in ops) - local_matrix_params(ops) == 2 * h


def test_muon_keeps_one_state_for_matrices_and_adam_for_the_rest():
    adam, muon = scenario("adam", zero=0), scenario("muon", zero=0)
    a, b = stage_costs(adam)[0], stage_costs(muon)[0]
    layers = adam.model.num_layers
    matrices = layers * local_matrix_params(layer_ops(muon))
    # Adam: master + m + v = 12 bytes per parameter; Muon: master + momentum = 8 for the matrices
    assert a.static.optimizer - b.static.optimizer == pytest.approx(4 * matrices, rel=1e-9)
    assert a.static.weights == b.static.weights and a.static.gradients == b.static.gradients


def test_layer_wise_distribution_divides_the_orthogonalisation():
    whole, shared = steps_of(scenario(zero=0, data=4)), steps_of(scenario(zero=1, data=4))
    assert "NEWTON_SCHULZ" in whole and "NEWTON_SCHULZ" not in steps_of(scenario("adam"))
    # 32 layers x 7 matrices over 4 ranks: LPT lands within the largest matrix of the even split
    assert whole["NEWTON_SCHULZ"] / 4 <= shared["NEWTON_SCHULZ"] < whole["NEWTON_SCHULZ"] / 4 * 1.1


def test_duplicated_tensor_mode_gathers_and_orthogonalises_whole_matrices():
    dup, block = steps_of(scenario(tensor=2)), steps_of(scenario(tensor=2, muon_tp_mode="blockwise"))
    assert dup["MUON_TP_AG"] > 0 and "MUON_TP_AG" not in block
    assert dup["NEWTON_SCHULZ"] > 1.5 * block["NEWTON_SCHULZ"]
    one = [steps_of(scenario(tensor=1, data=8, muon_tp_mode=mode)) for mode in ("duplicated", "blockwise")]
    assert one[0] == one[1]                              # without tensor parallelism they agree


def test_muon_step_lengthens_the_simulated_step():
    from pipesim.sim import simulate
    adam, muon = simulate(scenario("adam"), trace=False), simulate(scenario("muon"), trace=False)
    ns = steps_of(scenario("muon"))["NEWTON_SCHULZ"]
    assert muon.step_time_s - adam.step_time_s >= 0.9 * ns


def test_moe_experts_are_orthogonalised_one_by_one_over_expert_data_parallelism():
    def moe(zero):
        return load_scenario({"model": "qwen3-30b-a3b", "system": {"preset": "dgx-h100", "num_nodes": 2},
                              "parallel": {"data": 16, "expert": 8},
                              "training": {"global_batch_size": 64, "attention": "flash", "optimizer": "muon",
                                           "zero_stage": zero}})
    s = moe(1)
    layer = next(o for o in stage_costs(s)[0].step_ops if o[0] == "NEWTON_SCHULZ")
    assert layer[1] < steps_of(moe(0))["NEWTON_SCHULZ"] / 1.9     # expert-data 2, dense 16


@pytest.mark.parametrize("override,key", [
    ("training.zero_stage=3", "training.optimizer"),
    ("training.muon_ns_steps=0", "training"),
    ("training.muon_tp_mode=distributed", "training.muon_tp_mode"),
])
def test_bad_muon_settings_get_one_line_naming_the_key(override, key):
    base = {"model": "llama3-8b", "system": "dgx-h100", "parallel": {"data": 8},
            "training": {"global_batch_size": 64, "optimizer": "muon"}}
    with pytest.raises(PipesimError) as err:
        load_scenario(base, [override])
    msg = str(err.value)
    assert "\n" not in msg and key in msg


def test_cnn_with_muon_is_refused():
    with pytest.raises(PipesimError, match="training.optimizer"):
        load_scenario({"model": "resnet50", "system": "dgx-a100-80gb", "parallel": {"data": 8},
                       "training": {"global_batch_size": 64, "optimizer": "muon"}})
