"""training.moe_shared_expert_overlap: the shared experts on a second stream hide under the layer's
own dispatch and combine, at the rate the dispatcher's SMs leave them."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import shapes_of
from pipesim.costs.moe import a2a_costs
from pipesim.costs.moe_interference import overlap_slowdown
from pipesim.costs.stage import cost_model_for, costed_layer_ops, stage_costs
from pipesim.errors import ScenarioError


def nano(**training):
    return load_scenario({"model": {"preset": "nemotron-3-nano", "seq_length": 4096},
                          "system": {"preset": "dgx-h100", "num_nodes": 1},
                          "parallel": {"data": 8, "expert": 8},
                          "training": {"micro_batch_size": 2, "global_batch_size": 16, "moe_routing": "balanced",
                                       **training}})


@pytest.mark.parametrize("dispatcher", ["deepep", "alltoall"])
def test_the_layer_shortens_by_the_shared_work_that_fits_under_the_all_to_all(dispatcher):
    off, on = nano(moe_dispatcher=dispatcher), nano(moe_dispatcher=dispatcher, moe_shared_expert_overlap=True)
    cm = cost_model_for(on)
    ops = [o for o in costed_layer_ops(on, moe=True) if o.name.startswith("shared_")]
    a2a = a2a_costs(on, shapes_of(on))
    cut = {}
    for phase, t in (("fwd", a2a.fwd), ("bwd", a2a.bwd)):
        x = sum(cm.time(o, phase).seconds for o in ops)
        slow = overlap_slowdown(on, cm, ops, phase)
        assert slow == 1.0 if dispatcher == "alltoall" else slow > 1.0     # DeepEP holds SMs
        cut[phase] = min(x, t / slow)
        assert 0 < cut[phase] <= t
    a, b = stage_costs(off)[0], stage_costs(on)[0]
    n = a.moe_layers
    assert a.forward - b.forward == pytest.approx(n * cut["fwd"], rel=1e-6)
    assert a.backward - b.backward == pytest.approx(n * cut["bwd"], rel=1e-6)
    assert a.ep_bytes_fwd == b.ep_bytes_fwd                     # the same bytes move


def test_full_recompute_hides_the_shared_experts_again():
    a = stage_costs(nano(moe_dispatcher="deepep", recompute="full"))[0]
    b = stage_costs(nano(moe_dispatcher="deepep", recompute="full", moe_shared_expert_overlap=True))[0]
    assert a.recompute - b.recompute == pytest.approx(a.forward - b.forward, rel=1e-6)


@pytest.mark.parametrize("model,training,parallel,match", [
    ({"preset": "llama3-8b"}, {}, {"data": 8}, "needs an MoE model"),
    ({"preset": "qwen3-30b-a3b"}, {}, {"data": 8, "expert": 8}, "needs shared experts"),
    ({"preset": "nemotron-3-nano"}, {}, {"data": 8}, "needs expert parallelism"),
    ({"preset": "nemotron-3-nano"}, {"moe_a2a_overlap": True}, {"data": 8, "expert": 8}, "moe_a2a_overlap"),
    ({"preset": "nemotron-3-nano"}, {"recompute": "selective", "recompute_modules": ["shared_experts"]},
     {"data": 8, "expert": 8}, "recompute_modules shared_experts"),
])
def test_where_megatron_cannot_run_it_is_one_line(model, training, parallel, match):
    with pytest.raises(ScenarioError, match="training.moe_shared_expert_overlap") as e:
        load_scenario({"model": model, "system": {"preset": "dgx-h100", "num_nodes": 1}, "parallel": parallel,
                       "training": {"micro_batch_size": 1, "global_batch_size": 8, "moe_shared_expert_overlap": True,
                                    **training}})
    assert match in str(e.value) and "\n" not in str(e.value)


def test_the_emulator_refuses_it():
    from pipesim.emulator.model import check_supported
    with pytest.raises(ScenarioError, match="moe_shared_expert_overlap"):
        check_supported(nano(moe_dispatcher="deepep", moe_shared_expert_overlap=True))
