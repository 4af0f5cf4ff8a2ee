"""Scenario loading: presets, overrides, SI units, Hugging Face configs, round trip."""
import json

import pytest

from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario, scenario_to_dict

BASE = {"model": "llama2-7b", "system": {"preset": "dgx-h100", "num_nodes": 2},
        "parallel": {"tensor": 8, "pipeline": 2}, "training": {"global_batch_size": 64}}


def test_presets_units_and_derived_data():
    s = load_scenario(BASE)
    assert s.parallel.data == 1 and s.num_gpus == 16
    assert s.system.gpu.memory == 80 * 2**30
    assert s.system.gpu.hbm_bandwidth == 3350e9
    assert s.system.inter_node.latency == pytest.approx(5e-6)
    assert s.system.gpu.matrix_peak("bf16") == 989e12
    assert s.model.ffn == 11008 and s.model.activation == "swiglu"
    assert s.num_microbatches == 64


def test_overrides_change_fields_and_types():
    s = load_scenario(BASE, ["parallel.tensor=4", "parallel.pipeline=4", "model.num_layers=16",
                             "system.gpu.memory_GiB=40", "training.recompute=full"])
    assert (s.parallel.tensor, s.parallel.pipeline, s.model.num_layers) == (4, 4, 16)
    assert s.system.gpu.memory == 40 * 2**30 and s.training.recompute == "full"


def test_frozen_and_keyword_only():
    s = load_scenario(BASE)
    with pytest.raises(Exception):
        s.parallel.tensor = 2
    from pipesim.scenario.system_config import LinkSpec
    with pytest.raises(TypeError):
        LinkSpec(1e9)


def test_round_trip_through_file_keys():
    s = load_scenario(BASE)
    again = load_scenario(scenario_to_dict(s))
    assert again.model == s.model and again.system == s.system and again.parallel == s.parallel


def test_hf_config(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 688, "max_position_embeddings": 512,
           "vocab_size": 1000, "hidden_act": "silu"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    s = load_scenario({"model": {"hf_config": str(tmp_path / "config.json")}, "system": "dgx-h100",
                       "parallel": {"tensor": 2}, "training": {"global_batch_size": 4}})
    assert (s.model.num_layers, s.model.kv_heads, s.model.ffn, s.model.norm) == (4, 2, 688, "rmsnorm")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_scenario({"model": {"hf_config": str(tmp_path / "bad.json")}, "system": "dgx-h100",
                       "training": {"global_batch_size": 8}})


@pytest.mark.parametrize("mode,t,extra", [("2d", 4, {}), ("2.5d", 8, {"tensor_depth": 2}), ("3d", 8, {})])
def test_higher_dimensional_tensor_parallel_shards_everything(mode, t, extra):
    from pipesim.costs.stage import stage_costs
    par = dict(tensor=t, tensor_mode=mode, **extra)
    one = load_scenario({"model": {"preset": "gpt3-1.3b", "bias": False}, "system": {"preset": "dgx-a100-80gb", "gpus_per_node": t},
                         "parallel": {"tensor": 1, "data": t}, "training": {"global_batch_size": t}})
    s = load_scenario({"model": {"preset": "gpt3-1.3b", "bias": False}, "system": {"preset": "dgx-a100-80gb", "gpus_per_node": t},
                       "parallel": par, "training": {"global_batch_size": 1}})
    base, split = stage_costs(one)[0], stage_costs(s)[0]
    # Optimus / Tesseract / 3D: every activation is sharded over the whole tensor group (t GPUs);
    # the model FLOPs per GPU shrink by t (to 1e-3: the embedding's scatter-add is not split).
    assert split.flops == pytest.approx(base.flops / t, rel=1e-3)
    # (biases are off: they split over one grid axis only)
    # backward moves at least the forward's volume (3D caches the gathered operands: equal)
    assert split.tp_bytes_fwd > 0 and split.tp_bytes_bwd >= split.tp_bytes_fwd * 0.999
    from pipesim.costs.layers import layer_ops
    weights = lambda sc: sum(o.params for o in layer_ops(sc) if o.kind == "matmul")
    div = t // extra.get("tensor_depth", 1)          # 2.5D replicates weights over its depth
    assert weights(s) == pytest.approx(weights(one) / div, rel=1e-9)


def test_sections_from_files():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    s = load_scenario(root / "scenarios/gpt-13b-2-nodes.yaml")
    assert s.model.name == "gpt-13b" and s.model.hidden_size == 5120
    assert s.system.num_nodes == 2 and s.system.gpu.memory == 80 * 2**30     # file says 16, scenario 2
    assert s.num_gpus == 16


def test_cnn_model_sections():
    from pipesim.model_stages import stage_costs_for as stage_costs
    base = {"model": {"preset": "resnet50", "image_input": "imagenet"}, "system": "gtx-1080ti",
            "parallel": {"pipeline": 2, "data": 2}, "training": {"global_batch_size": 64, "micro_batch_size": 8,
                                                                 "precision": "fp32"}}
    stages = stage_costs(load_scenario(base))
    assert len(stages) == 2 and all(st.forward > 0 and st.backward > st.forward * 0.5 for st in stages)
    assert sum(st.params for st in stages) == 25_557_032          # torchvision's ResNet-50
    with pytest.raises(ScenarioError, match="not tensor parallel"):
        load_scenario(base, ["parallel.tensor=2", "parallel.data=1"])
    with pytest.raises(ScenarioError, match="needs `cnn:`"):
        load_scenario(dict(base, model={"arch": "cnn"}))


def test_profile_from_another_device_is_refused(tmp_path):
    from pathlib import Path

    from pipesim.costs import stage_costs
    from pipesim.errors import ProfileError
    root = Path(__file__).resolve().parents[1]
    s = load_scenario(BASE, [f"costs.profile={root / 'traces/cpu-example.json'}"])
    with pytest.raises(ProfileError, match="measured on cpu"):
        stage_costs(s)


def test_layers_that_do_not_split_get_a_one_line_error_with_megatrons_split_to_paste():
    from pipesim.errors import ScenarioError
    raw = {"model": {"preset": "gpt2-medium", "num_layers": 13}, "system": {"preset": "dgx-a100-80gb"},
           "parallel": {"pipeline": 4, "data": 2}, "training": {"micro_batch_size": 1, "global_batch_size": 8}}
    with pytest.raises(ScenarioError) as err:
        load_scenario(raw)
    msg = str(err.value)
    assert "\n" not in msg and "parallel.layers_per_stage" in msg and "e.g. [3, 4, 4, 2]" in msg
    s = load_scenario(dict(raw, parallel=dict(raw["parallel"], layers_per_stage=[3, 4, 4, 2])))
    assert s.parallel.layers_per_stage == (3, 4, 4, 2)


def test_layers_per_stage_auto_is_megatrons_embedding_and_loss_aware_split():
    raw = {"model": {"preset": "gpt2-medium", "num_layers": 61}, "system": {"preset": "dgx-h100", "num_nodes": 2},
           "parallel": {"pipeline": 8, "virtual_stages": 2, "layers_per_stage": "auto"},
           "training": {"micro_batch_size": 1, "global_batch_size": 16, "schedule": "interleaved"}}
    s = load_scenario(raw)
    assert s.parallel.layers_per_stage == (3,) + (4,) * 14 + (2,)
    # it follows the layout it is given, --set included
    assert load_scenario(raw, ["parallel.pipeline=4", "parallel.virtual_stages=1"]).parallel.layers_per_stage == \
        (15, 16, 16, 14)
    with pytest.raises(ScenarioError, match=r"parallel\.layers_per_stage: auto: .* 64 chunks"):
        load_scenario(raw, ["parallel.virtual_stages=8"])


def test_layers_per_stage_takes_megatrons_layout_string():
    """--pipeline-model-parallel-layout as Megatron-Core writes it (pipeline_parallel_layer_layout.py):
    Megatron-Bridge's DeepSeek-V3 layout on 16 chunks leaves one layer and the MTP block last."""
    from pipesim.scenario.stage_split import layout_split, unroll_layout
    assert unroll_layout("Ettt|(tt|)*2,m|L") == ["Ettt", "tt", "tt", "m", "L"]      # Megatron's docstring form
    assert layout_split("Et*8|(t*8|)*6t*5mL", 61, 1, 8) == [8] * 7 + [5]
    assert layout_split("Et*4|(t*4|)*14tL", 61, 0, 16) == [4] * 15 + [1]              # Kimi K2's, no MTP
    with pytest.raises(ValueError, match="MTP"):
        layout_split("Et*4|(t*4|)*14mtL", 61, 1, 16)                                 # MTP before a layer
    raw = {"model": {"preset": "gpt2-medium", "num_layers": 61, "mtp_layers": 1},
           "system": {"preset": "dgx-h100", "num_nodes": 2},
           "parallel": {"pipeline": 8, "virtual_stages": 2, "layers_per_stage": "Et*4|(t*4|)*14tmL"},
           "training": {"micro_batch_size": 1, "global_batch_size": 16, "schedule": "interleaved"}}
    assert load_scenario(raw).parallel.layers_per_stage == (4,) * 15 + (1,)
    for layout, says in [("Et*4|(t*4|)*14tL", "0 MTP blocks"), ("Et*4|(t*4|)*13tmL", "15 chunks"),
                         ("t*4|E(t*4|)*14tmL", "embedding"), ("Et*4|(t*4|)*14tm", "loss"),
                         ("Et*4|(t*4|)*14t|mL", "17 chunks"), ("Et*4|(t*5|)*14tmL", "75 layers"),
                         ("Ex*4|(t*4|)*14tmL", "not Megatron layout symbols"), ("E(t*9|)*99999999mL", "unrolls")]:
        with pytest.raises(ScenarioError) as err:
            load_scenario(dict(raw, parallel=dict(raw["parallel"], layers_per_stage=layout)))
        msg = str(err.value)
        assert "\n" not in msg and "parallel.layers_per_stage: layout" in msg and says in msg, msg


def test_a_layout_written_from_any_split_reads_back_as_that_split():
    """Round trip through Megatron's layout syntax, repeats included: any split of the layers over
    chunks, written with x*n runs and a (...)*n group for equal neighbours, parses back to itself."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pipesim.scenario.stage_split import layout_split

    def write(split: list[int], mtp: int) -> str:
        chunks = [("t*%d" % n if n > 1 else "t" * n) for n in split]
        chunks[0] = "E" + chunks[0]
        chunks[-1] += "m" * mtp + "L"
        body, i = [], 0
        while i < len(chunks):                      # runs of equal inner chunks as one (...)*n group
            j = i
            while 0 < i and j + 1 < len(chunks) - 1 and chunks[j + 1] == chunks[i]:
                j += 1
            body.append(f"({chunks[i]}|)*{j - i + 1}" if j > i else chunks[i] + "|")
            i = j + 1
        return "".join(body).rstrip("|")

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.integers(0, 9), min_size=1, max_size=24), st.integers(0, 2))
    def check(split, mtp):
        text = write(split, mtp)
        assert layout_split(text, sum(split), mtp, len(split)) == split, text
    check()
