"""LatentMoE (model.moe_latent_size) and a hybrid model's MTP block (mtp_hybrid_pattern,
mtp_repeated_layer): Nemotron 3 Super's checkpoint counts, the latent width in the routed path."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import layer_ops, shapes_of
from pipesim.costs.moe import a2a_costs
from pipesim.costs.stage import stage_costs
from pipesim.costs.summary import active_params, iteration_flops, total_params
from pipesim.errors import PipesimError


def super_(model=None, **parallel):
    par = {"data": 64, "expert": 64, **parallel}
    return load_scenario({"model": {"preset": "nemotron-3-super", **(model or {})},
                          "system": {"preset": "dgx-b200", "num_nodes": 8}, "parallel": par,
                          "training": {"global_batch_size": 64, "precision": "bf16"}})


MTP = {"mtp_layers": 1, "mtp_hybrid_pattern": "*E"}


def test_nemotron_3_super_counts_its_checkpoint_exactly():
    # nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16: 123,611,012,096 BF16 weights, the MTP block
    # ("*E" with its projection and norms) 2,942,324,736 of them
    assert total_params(super_()) == 123_611_012_096 - 2_942_324_736
    assert total_params(super_(MTP)) == 123_611_012_096
    # 22 of 512 latent experts active (with the embedding table, the MTP block left out)
    assert active_params(super_()) == 12_770_216_960


def test_the_routed_path_runs_at_the_latent_width():
    latent, full = super_(), super_({"moe_latent_size": None})
    ops = {o.name: o for o in layer_ops(latent, True)}
    wide = {o.name: o for o in layer_ops(full, True)}
    h, d, local, f = 4096, 1024, 512 // 64, 2688          # 8 of the 512 experts on each EP rank
    assert ops["moe_latent_down"].params == h * d and ops["moe_latent_up"].params == d * h
    assert ops["expert_fc1"].params == local * d * f and wide["expert_fc1"].params == local * h * f
    assert "moe_latent_down" not in wide and ops["shared_fc1"] == wide["shared_fc1"]    # shared experts see h
    # the dispatch / combine move latent-width tokens: a quarter of the bytes
    a2a_l, a2a_h = a2a_costs(latent, shapes_of(latent)), a2a_costs(full, shapes_of(full))
    assert a2a_l.bytes_fwd == pytest.approx(a2a_h.bytes_fwd * d / h)
    assert a2a_l.fwd < a2a_h.fwd


def test_repeated_mtp_depths_run_twice_on_one_set_of_weights():
    one, two = super_(MTP), super_({**MTP, "mtp_layers": 2})
    shared = super_({**MTP, "mtp_layers": 2, "mtp_repeated_layer": True})
    assert total_params(shared) == total_params(one) < total_params(two)
    assert iteration_flops(shared) == pytest.approx(iteration_flops(two))
    assert iteration_flops(two) > iteration_flops(one)
    last = {k: stage_costs(s)[-1] for k, s in (("one", one), ("two", two), ("shared", shared))}
    assert last["shared"].params == pytest.approx(last["one"].params)
    assert last["shared"].forward == pytest.approx(last["two"].forward)
    assert last["two"].forward > last["one"].forward


@pytest.mark.parametrize("model, key", [
    ({"mtp_layers": 1}, "model.mtp_hybrid_pattern"),
    ({**MTP, "mtp_hybrid_pattern": "*X"}, "mtp_hybrid_pattern"),
    ({"moe_latent_size": 8192}, "model.moe_latent_size"),
])
def test_bad_latent_and_mtp_settings_are_one_line(model, key):
    with pytest.raises(PipesimError) as err:
        super_(model)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_a_dense_model_cannot_take_an_mtp_pattern():
    with pytest.raises(PipesimError, match="mtp_hybrid_pattern"):
        load_scenario({"model": {"preset": "llama3-8b", "num_layers": 2, **MTP},
                       "system": {"preset": "dgx-h100"}, "parallel": {"data": 8}, "training": {"global_batch_size": 8}})
