"""training.fp8_lm_head: the output layer in MXFP8 (Megatron-Core fp8_output_proj,
TELMHeadColumnParallelLinear), as Megatron-Bridge's 26.06 / 26.08 DeepSeek-V3 and GPT-OSS recipes
run it."""
import pytest

from pipesim import load_scenario
from pipesim.costs.layers import head_ops
from pipesim.costs.stage import stage_costs
from pipesim.errors import ScenarioError

BASE = {"model": {"preset": "llama3-8b", "num_layers": 4}, "system": {"preset": "dgx-b200"},
        "parallel": {"data": 8},
        "training": {"global_batch_size": 16, "precision": "fp8", "fp8_recipe": "mxfp8", "attention": "flash"}}


def test_the_output_layer_runs_mxfp8_with_its_cast_and_weight_copy():
    plain, fp8 = load_scenario(BASE), load_scenario(BASE, ["training.fp8_lm_head=true"])
    head = {o.name: o for o in head_ops(fp8)}["lm_head"]
    assert head.gemms_fwd[0][4] == "fp8" and {o.name: o for o in head_ops(plain)}["lm_head"].gemms_fwd[0][4] == "bf16"
    a, b = stage_costs(plain)[0], stage_costs(fp8)[0]
    assert b.fp8_params - a.fp8_params == pytest.approx(head.params)        # its MXFP8 weight copy
    assert b.forward < a.forward and b.backward < a.backward                 # the GEMMs at the FP8 curve


@pytest.mark.parametrize("sets", [["training.fp8_recipe=tensorwise"], ["training.precision=bf16"]])
def test_outside_mxfp8_it_is_a_one_line_error(sets):
    with pytest.raises(ScenarioError) as err:
        load_scenario(BASE, ["training.fp8_lm_head=true"] + sets)
    assert "training.fp8_lm_head" in str(err.value) and "\n" not in str(err.value)


def test_the_26x_recipes_that_set_fp8_output_proj_map_to_it():
    from pipesim.whatif.validation import case_scenario, load_cases
    cases = {c.id: c for c in load_cases()}
    for cid in ("bridge2608-gb300-deepseekv3-mxfp8", "bridge2606-gb200-gpt-oss-120b-mxfp8",
                "bridge2606-gb200-deepseekv3-mxfp8"):
        assert case_scenario(cases[cid])["training"]["fp8_lm_head"] is True, cid
    for cid in ("bridge2608-gb300-qwen3-30b-a3b-mxfp8", "bridge2604-gb300-deepseekv3-mxfp8",
                "bridge2606-b300-deepseekv3-mxfp8"):      # its v0.5.0 config: no MXFP8 output layer
        assert "fp8_lm_head" not in case_scenario(cases[cid])["training"], cid
