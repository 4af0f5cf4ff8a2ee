"""model.hf_config: the config.json of 2025-26 models loads as the model the preset describes (MoE,
MLA, sliding windows, head_dim), and what pipesim cannot express is refused in one line.
The configs in tests/data/hf_configs hold the fields pipesim reads of the models' published
config.json (Hugging Face repos named in each test id)."""
import json
from pathlib import Path

import pytest

from pipesim.costs.layers import layer_ops
from pipesim.costs.summary import total_params
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario

DATA = Path(__file__).parent / "data" / "hf_configs"
SYSTEM, TRAINING = {"preset": "dgx-h100", "num_nodes": 1}, {"micro_batch_size": 1, "global_batch_size": 8}


def load(model: dict):
    return load_scenario({"model": dict(model, seq_length=4096), "system": SYSTEM, "training": TRAINING})


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "kimi-k2", "mixtral-8x7b",
                                  "gpt-oss-120b", "qwen3-32b"])
def test_a_published_config_loads_as_the_preset_model(name):
    hf = load({"hf_config": str(DATA / f"{name}.json")})
    preset = load({"preset": name, "mtp_layers": hf.model.mtp_layers})
    # before: Qwen3-30B-A3B loaded as a dense 2.9B, DeepSeek-V3 as a dense GQA 38.6B, Qwen3-32B
    # without its head_dim (30.5B)
    assert total_params(hf) == pytest.approx(total_params(preset), rel=1e-9)
    for kind in {preset.model.layer_kind(i) for i in range(preset.model.num_layers)}:
        ops = lambda s: [(o.name, o.flops_fwd, o.params) for o in layer_ops(s, kind)]
        assert ops(hf) == ops(preset)
    assert hf.model.windowed_share == preset.model.windowed_share


def test_deepseek_v3_config_brings_its_mtp_depth():
    s = load({"hf_config": str(DATA / "deepseek-v3.json")})
    assert s.model.mtp_layers == 1 and s.model.attention_variant == "mla" and s.model.moe_first_dense_layers == 3


@pytest.mark.parametrize("key,value,words", [
    ("mlp_only_layers", [3, 7], "mlp_only_layers [3, 7]: a list of dense layers is not expressible"),
    ("layer_types", ["full_attention"] + ["sliding_attention"] * 35, "layer_types"),
])
def test_what_pipesim_cannot_express_is_refused_in_one_line(tmp_path, key, value, words):
    base = "qwen3-30b-a3b" if key == "mlp_only_layers" else "gpt-oss-120b"
    cfg = dict(json.loads((DATA / f"{base}.json").read_text()), **{key: value})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ScenarioError) as err:
        load({"hf_config": str(path)})
    msg = str(err.value)
    assert "model.hf_config" in msg and words in msg and "\n" not in msg


HOSTILE = [None, "x", -3, 0, 1.5, [], {}, True, 10 ** 30]


def test_garbled_fields_give_one_line_errors_never_a_traceback(tmp_path):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    configs = {n: json.loads((DATA / f"{n}.json").read_text()) for n in ("deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b")}
    path = tmp_path / "config.json"

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.sampled_from(sorted(configs)), st.data())
    def check(name, data):
        cfg = dict(configs[name])
        for key in data.draw(st.lists(st.sampled_from(sorted(cfg)), min_size=1, max_size=3)):
            cfg[key] = data.draw(st.sampled_from(HOSTILE))
        path.write_text(json.dumps(cfg))
        try:
            load({"hf_config": str(path)})
        except ScenarioError as err:
            assert "\n" not in str(err)
    check()


def test_an_unmapped_model_type_is_refused_not_loaded_as_something_else(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gemma2", "hidden_act": "gelu_pytorch_tanh", "hidden_size": 2304,
                                "num_hidden_layers": 26, "num_attention_heads": 8, "vocab_size": 256000,
                                "max_position_embeddings": 8192, "sliding_window": 4096}))
    with pytest.raises(ScenarioError) as err:
        load({"hf_config": str(path)})
    assert "model_type 'gemma2' is not mapped" in str(err.value) and "\n" not in str(err.value)
