"""Multi-token prediction (model.mtp_layers): D more blocks of the last layer's kind, each with its
projection and a pass through the shared output head, on the last pipeline stage."""
from dataclasses import replace

import pytest

from pipesim import load_scenario
from pipesim.costs import stage_costs
from pipesim.costs.layers import layer_ops, shapes_of
from pipesim.costs.summary import iteration_flops, total_params
from pipesim.errors import ScenarioError


def scenario(mtp=0, pipeline=2, tensor=1, preset=None, **model):
    spec = {"preset": preset} if preset else {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                                              "seq_length": 32, "vocab_size": 256, "tied_embeddings": False,
                                              "norm": "rmsnorm", "activation": "swiglu", "bias": False}
    spec.update(model, mtp_layers=mtp)
    return load_scenario({
        "model": spec,
        "system": {"preset": "dgx-h100", "num_nodes": 1},
        "parallel": {"tensor": tensor, "pipeline": pipeline, "data": 8 // (tensor * pipeline),
                     "sequence_parallel": tensor > 1},
        "training": {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16"}})


def test_mtp_adds_a_block_its_projection_and_norms_to_the_parameters():
    s0, s1 = scenario(0), scenario(1)
    h = s1.model.hidden_size
    one = replace(s1, parallel=replace(s1.parallel, pipeline=1, data=1))
    block = sum(o.params for o in layer_ops(one))
    # enorm, hnorm and the MTP head's final norm (RMSNorm: h each), eh_proj 2h x h; the embedding
    # and output weights are the main model's
    assert total_params(s1) - total_params(s0) == pytest.approx(block + 3 * h + 2 * h * h)


def test_mtp_block_sits_on_the_last_stage_with_a_second_head():
    c0, c1 = stage_costs(scenario(0)), stage_costs(scenario(1))
    assert [c.layers for c in c0] == [2, 2] and [c.layers for c in c1] == [2, 3]
    assert c1[0].forward == pytest.approx(c0[0].forward)
    # the last stage does more than one more layer: also the projection and the head again
    per_layer = c0[1].forward / 2
    assert c1[1].forward > c0[1].forward + per_layer
    assert c1[1].flops > c0[1].flops
    # an untied model shares its embedding with the MTP head across the pipeline: all-reduced
    assert "EMBED_GRAD_AR" not in dict(c0[1].step_ops)
    assert "EMBED_GRAD_AR" in dict(c1[1].step_ops) and "EMBED_GRAD_AR" in dict(c1[0].step_ops)
    # the last stage holds its own copy of the embedding table
    sh = shapes_of(scenario(1))
    assert c1[1].params - c0[1].params > sh.v * sh.h


def test_mtp_flops_count_in_the_model_flops():
    s0, s1 = scenario(0), scenario(1)
    assert iteration_flops(s1) > iteration_flops(s0) * (5 / 4)


def test_mtp_projection_gathers_its_output_over_the_tensor_group():
    from pipesim.costs.layers import mtp_ops
    proj = next(o for o in mtp_ops(scenario(1, pipeline=1, tensor=2)) if o.name == "mtp_eh_proj")
    assert [c.kind for c in proj.comm_fwd].count("all_gather") == 2     # SP input, gathered output
    alone = next(o for o in mtp_ops(scenario(1, pipeline=1, tensor=1)) if o.name == "mtp_eh_proj")
    assert alone.comm_fwd == () and alone.params == 2 * 64 * 64


def test_moe_model_mtp_block_is_an_moe_layer():
    c0 = stage_costs(scenario(0, preset="qwen3-30b-a3b", num_layers=4, pipeline=1))
    c1 = stage_costs(scenario(1, preset="qwen3-30b-a3b", num_layers=4, pipeline=1))
    assert c1[0].moe_layers == c0[0].moe_layers + 1


@pytest.mark.parametrize("depth,words", [(-1, "must not be negative"), (5, "must not exceed num_layers(4)")])
def test_impossible_mtp_depth_is_a_one_line_error(depth, words):
    with pytest.raises(ScenarioError, match="mtp_layers") as e:
        scenario(depth)
    assert "\n" not in str(e.value) and words in str(e.value)


def test_the_moe_emulator_refuses_mtp_in_one_line():
    from pipesim.emulator.moe_crosscheck import config_of
    s = load_scenario({"model": {"preset": "qwen3-30b-a3b", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                 "num_kv_heads": 2, "kv_channels": 16, "num_experts": 4, "moe_top_k": 2,
                                 "moe_ffn_hidden_size": 32, "vocab_size": 128, "seq_length": 16, "mtp_layers": 1},
                       "system": {"preset": "dgx-h100", "num_nodes": 1, "gpus_per_node": 2},
                       "parallel": {"pipeline": 1, "data": 2, "expert": 2},
                       "training": {"micro_batch_size": 1, "global_batch_size": 2, "schedule": "gpipe"}})
    with pytest.raises(ScenarioError, match="no multi-token prediction") as e:
        config_of(s)
    assert "\n" not in str(e.value)
