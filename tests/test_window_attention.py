"""Sliding-window attention (model.window_size, window_attn_skip_freq): a causal band of w keys."""
import pytest

from pipesim import load_scenario, simulate
from pipesim.costs.layers import layer_ops
from pipesim.errors import ScenarioError


def scenario(window=0, skip=0, seq=8192, **extra):
    model = {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "num_kv_heads": 2, "seq_length": seq,
             "vocab_size": 4096, "norm": "rmsnorm", "activation": "swiglu", "position": "rotary", "bias": False,
             "dropout": False, "window_size": window, "window_attn_skip_freq": skip, **extra.pop("model", {})}
    par = {"tensor": 1, "pipeline": 1, "data": 8, **extra.pop("parallel", {})}
    return load_scenario({"model": model, "system": {"preset": "dgx-h100", "num_nodes": 1}, "parallel": par,
                          "training": {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16",
                                       "attention": "flash"}})


def test_megatron_windows_every_layer_but_each_kth():
    assert scenario(128, 2).model.windowed_share == 0.5      # layers 1 and 3 of 4 (1-based)
    assert scenario(128, 0).model.windowed_share == 1.0
    assert scenario(128, 4).model.windowed_share == 0.75
    assert scenario(0, 0).model.windowed_share == 0.0


def test_band_pairs_and_the_layer_average():
    full = {o.name: o for o in layer_ops(scenario())}["attention"]
    ops = {o.name: o for o in layer_ops(scenario(512, 2))}
    s, w = 8192, 512
    band_flops = full.flops_fwd / (s * s / 2) * (s * w - w * w / 2)       # causal pairs s²/2
    assert ops["attention_window"].flops_fwd == pytest.approx(0.5 * band_flops)
    assert ops["attention"].flops_fwd == pytest.approx(0.5 * full.flops_fwd)
    assert ops["attention_window"].flash[1] == w
    # the layer keeps Q, K, V, O and the log-sum-exp once
    assert ops["attention"].saved_bytes + ops["attention_window"].saved_bytes == pytest.approx(full.saved_bytes)
    every = {o.name: o for o in layer_ops(scenario(512, 0))}
    assert "attention" not in every and every["attention_window"].saved_bytes == pytest.approx(full.saved_bytes)


def test_windowed_layers_shorten_long_sequences_most():
    short = simulate(scenario(seq=2048), trace=False).step_time_s / simulate(scenario(256, 2, seq=2048), trace=False).step_time_s
    long = simulate(scenario(seq=32768), trace=False).step_time_s / simulate(scenario(256, 2, seq=32768), trace=False).step_time_s
    assert 1.0 < short < long


def test_unmodelled_combinations_are_one_line_errors():
    for kwargs, key in (({"window": 0, "skip": 2}, "model.window_attn_skip_freq"),
                        ({"window": 128, "parallel": {"context": 2, "data": 4}}, "model.window_size"),
                        ({"window": 128, "model": {"causal": False}}, "model.window_size")):
        with pytest.raises(ScenarioError, match=key) as e:
            scenario(**kwargs)
        assert "\n" not in str(e.value)


def test_chunked_local_attention_is_block_diagonal():
    full = {o.name: o for o in layer_ops(scenario(seq=8192))}["attention"]
    ops = {o.name: o for o in layer_ops(scenario(2048, 4, seq=8192, model={"window_kind": "chunked"}))}
    per_pair = full.flops_fwd / (8192 * 8192 / 2)
    assert ops["attention_window"].flops_fwd == pytest.approx(0.75 * per_pair * 4 * 2048 * 2048 / 2)
    # a sequence shorter than the chunk attends in full
    short = {o.name: o for o in layer_ops(scenario(8192, 4, seq=4096, model={"window_kind": "chunked"}))}
    whole = {o.name: o for o in layer_ops(scenario(seq=4096))}["attention"]
    assert short["attention_window"].flops_fwd + short["attention"].flops_fwd == pytest.approx(whole.flops_fwd)


def test_llama4_presets_chunk_three_layers_in_four():
    s = load_scenario({"model": {"preset": "llama4-maverick"}, "system": {"preset": "dgx-h100", "num_nodes": 2},
                       "parallel": {"data": 16, "expert": 16},
                       "training": {"micro_batch_size": 1, "global_batch_size": 16}})
    assert s.model.windowed_share == 0.75 and s.model.window_kind == "chunked"
    assert s.model.num_moe_layers == 24 and s.model.is_moe_layer(1) and not s.model.is_moe_layer(0)


def test_the_emulator_refuses_windows_in_one_line():
    from pipesim.emulator.model import check_supported
    with pytest.raises(ScenarioError, match="model.window_size") as e:
        check_supported(scenario(128, 2))
    assert "\n" not in str(e.value)
