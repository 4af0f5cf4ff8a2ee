"""kernel_fusion eager: torchtitan-style op-by-op PyTorch costs the memory passes its code makes."""
import pytest

from pipesim.costs.layers import head_ops, layer_ops, shapes_of
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario


def _scenario(model="llama3-8b", *sets):
    base = {"model": {"preset": model, "seq_length": 1024}, "system": {"preset": "dgx-a100-80gb"},
            "parallel": {"data": 8}, "training": {"micro_batch_size": 1, "global_batch_size": 8,
                                                  "precision": "bf16", "attention": "flash"}}
    return load_scenario(base, list(sets))


def _ops(s):
    return {o.name: o for o in layer_ops(s)}


def test_eager_rmsnorm_rotary_and_swiglu_pay_the_passes_of_torchtitans_code():
    fused, eager = _scenario(), _scenario("llama3-8b", "training.kernel_fusion=eager")
    f, e = _ops(fused), _ops(eager)
    sh = shapes_of(fused)
    n = sh.tokens * sh.h
    # RMSNorm: 36 bytes per element forward instead of the fused 4, 64 backward instead of 6
    assert e["ln1"].bytes_fwd - f["ln1"].bytes_fwd == pytest.approx(32 * n)
    assert e["ln2"].bytes_bwd - f["ln2"].bytes_bwd == pytest.approx(58 * n)
    assert e["ln1"].saved_bytes - f["ln1"].saved_bytes == pytest.approx(4 * n)
    rope = f["rope"].flops_fwd / 3
    assert e["rope"].bytes_fwd - f["rope"].bytes_fwd == pytest.approx(16 * rope)
    act = sh.tokens * sh.f
    assert e["act"].bytes_fwd - f["act"].bytes_fwd == pytest.approx(4 * act)
    # GQA (32 query heads on 8 kv heads): K and V copied to every query head; SDPA's flash output is
    # already laid out for wo, so transpose(1, 2).contiguous() copies nothing
    assert "kv_repeat" in e and "attn_transpose" not in e and "kv_repeat" not in f
    assert e["kv_repeat"].bytes_fwd == pytest.approx(2 * (sh.tokens * 8 * sh.d) * (2 + 2 * 4))
    # GEMMs and attention are the same kernels either way
    assert e["qkv"] == f["qkv"] and e["attention"] == f["attention"]
    assert {o.name: o for o in head_ops(eager)}["final_norm"].bytes_fwd > {o.name: o for o in head_ops(fused)}["final_norm"].bytes_fwd


def test_the_eager_attention_core_transposes_its_output_before_wo():
    e = _ops(_scenario("llama3-8b", "training.kernel_fusion=eager", "training.attention=eager"))
    sh = shapes_of(_scenario())
    assert e["attn_transpose"].bytes_fwd == pytest.approx(4 * sh.tokens * sh.h)
    assert e["proj"].saved_bytes == pytest.approx(2 * sh.tokens * sh.h)


def test_layernorm_models_keep_their_one_kernel_norm():
    f, e = _ops(_scenario("gpt3-1.3b")), _ops(_scenario("gpt3-1.3b", "training.kernel_fusion=eager"))
    assert e["ln1"] == f["ln1"] and "kv_repeat" not in e


def test_eager_in_fp32_is_refused_with_the_key():
    with pytest.raises(ScenarioError, match="training.kernel_fusion") as err:
        _scenario("llama3-8b", "training.kernel_fusion=eager", "training.precision=fp32")
    assert "\n" not in str(err.value)
