"""`training.fp8_attention`: Transformer Engine's FP8 fused attention, timed by cuDNN's measured FP8
tables (cudnn-frontend: GB200 / GB300 per-tensor and MXFP8, H200 per-tensor), with Q/K/V (and O
under delayed scaling) quantized and kept in FP8, and one-line errors where it cannot run."""
import pytest

import pipesim
from pipesim.costs.flash import attention_tflops
from pipesim.costs.fp8 import DEQUANT_BYTES
from pipesim.costs.stage import cost_model_for, costed_layer_ops
from pipesim.errors import ScenarioError
from pipesim.presets.gpus import KERNEL_CURVES
from pipesim.scenario.load import load_scenario


def raw(system="gb200-nvl72", nodes=2, seq=65536, context=8, **training):
    tr = {"micro_batch_size": 1, "global_batch_size": 8, "precision": "fp8", "attention": "flash",
          "fp8_recipe": "tensorwise", "fp8_attention": True}
    tr.update(training)
    return {"model": {"preset": "llama3-8b", "num_layers": 4, "seq_length": seq},
            "system": {"preset": system, "num_nodes": nodes},
            "parallel": {"tensor": 1, "pipeline": 1, "context": context}, "training": tr}


def keeper(s):
    return next(o for o in costed_layer_ops(s) if o.flash and o.attention_io)


def test_fp8_attention_rates_are_cudnns_measured_fp8_speed_ups():
    """FP8 attention is the FP8 / BF16 ratio of one run applied to the BF16 rate the scenario uses:
    on Blackwell the same run's tables (so the measured FP8 rates), on Hopper cuDNN 9.19's ratio on
    the 2024 default table (FP8 and BF16 compared at one software version)."""
    gb200, h100 = KERNEL_CURVES["gb200"], KERNEL_CURVES["h100"]
    assert attention_tflops(gb200, 8192, True, "fwd", dtype="fp8") == pytest.approx(2047)
    assert attention_tflops(gb200, 8192, True, "bwd", dtype="mxfp8") == pytest.approx(1287)
    assert attention_tflops(KERNEL_CURVES["gb300"], 16384, False, "fwd", dtype="fp8") == pytest.approx(3182)
    assert attention_tflops(KERNEL_CURVES["b200"], 8192, True, "fwd", dtype="fp8") == \
        pytest.approx(2047 * 1745.0 / 1822.0)
    bf16 = lambda phase: attention_tflops(h100, 16384, True, phase)
    assert attention_tflops(h100, 16384, True, "fwd", dtype="fp8") == pytest.approx(bf16("fwd") * 1010 / 673)
    # cuDNN 9.19's FP8 causal backward on Hopper is slower than its BF16 one from 8K on, as measured
    assert attention_tflops(h100, 16384, True, "bwd", dtype="fp8") == pytest.approx(bf16("bwd") * 374 / 579)
    assert attention_tflops(h100, 16384, True, "bwd", dtype="fp8") < bf16("bwd")
    # and with the 2026 BF16 table chosen, the FP8 rates are the run's own
    assert attention_tflops(h100, 16384, True, "fwd", "cudnn-9.19", dtype="fp8") == pytest.approx(1010)


def test_mla_takes_its_own_measured_fp8_speed_up():
    """cudnn-frontend results/dsv3 (DeepSeek-V3's MLA shape, cuDNN 9.22): FP8 gains more on MLA than at
    head dim 128, and an MLA op takes those panels' FP8 / BF16 ratio (at 4K causal on GB200: forward
    1406 -> 2095 per-tensor, backward 1057 -> 1364 MXFP8; head dim 128 keeps 1805 and 1054)."""
    c = KERNEL_CURVES["gb200"]
    assert attention_tflops(c, 4096, True, "fwd", head_dim=("mla", 192), dtype="fp8") == pytest.approx(2095)
    assert attention_tflops(c, 4096, True, "bwd", head_dim=("mla", 192), dtype="mxfp8") == pytest.approx(1364)
    assert attention_tflops(c, 4096, True, "fwd", dtype="fp8") == pytest.approx(1805)
    assert attention_tflops(c, 4096, True, "bwd", dtype="mxfp8") == pytest.approx(1054)
    assert attention_tflops(KERNEL_CURVES["gb300"], 8192, True, "bwd", head_dim=("mla", 192),
                            dtype="fp8") == pytest.approx(2310)


@pytest.mark.parametrize("recipe, qkv_bytes, o_bytes", [("delayed", 1.0, 1.0), ("tensorwise", 1.0, 2.0),
                                                         ("mxfp8", 1 + 1 / 32, 2.0)])
def test_kept_tensors_and_quantize_passes_follow_transformer_engines_fp8_attention(recipe, qkv_bytes, o_bytes):
    """TE FusedAttnFunc keeps Q, K, V in FP8 and O in FP8 only under delayed scaling (current
    scaling and MXFP8 keep O in 16 bits); quantize Q, K, V and a pass over O forward, quantize dO
    and dequantize dQ, dK, dV backward."""
    bf16, fp8 = (load_scenario(raw(fp8_recipe=recipe, fp8_attention=on)) for on in (False, True))
    a, b = keeper(bf16), keeper(fp8)
    qkv, o = a.attention_io
    assert b.flash[4] == ("mxfp8" if recipe == "mxfp8" else "fp8") and len(a.flash) == 4
    assert a.saved_bytes - b.saved_bytes == pytest.approx((qkv + o) * 2 - qkv * qkv_bytes - o * o_bytes)
    q_pass = {"delayed": 3.0, "tensorwise": 5.0, "mxfp8": 3 + 1 / 32}[recipe]
    assert b.serial_bytes_fwd == pytest.approx(qkv * q_pass + o * DEQUANT_BYTES)
    assert b.serial_bytes_bwd == pytest.approx(o * q_pass + qkv * DEQUANT_BYTES)
    # one keeper per layer: the other context-parallel blocks run in FP8 without the passes
    others = [x for x in costed_layer_ops(fp8) if x.flash and not x.attention_io]
    assert others and all(x.flash[4] == b.flash[4] and x.serial_bytes_fwd == 0 for x in others)


def test_the_attention_kernel_runs_at_the_fp8_rate_and_the_step_shortens_on_blackwell():
    s = load_scenario(raw())
    op, cm = keeper(s), cost_model_for(s)
    t = cm.time(op, "fwd")
    rate = attention_tflops(KERNEL_CURVES["gb200"], op.flash[1], op.flash[3], "fwd", dtype="fp8") * 1e12
    assert t.compute == pytest.approx(op.flops_fwd / (rate * cm.curve_factor("fp8")))
    off = pipesim.simulate(raw(fp8_attention=False))
    on = pipesim.simulate(raw())
    assert on.step_time_s < off.step_time_s
    assert on.to_dict()["peak_memory_bytes"] < off.to_dict()["peak_memory_bytes"]


@pytest.mark.parametrize("over, words", [
    (dict(precision="bf16", fp8_recipe="delayed"), "needs precision: fp8"),
    (dict(fp8_recipe="blockwise"), "takes fp8_recipe delayed, tensorwise, mxfp8"),
    (dict(attention="eager"), "cuDNN's fused kernel"),
    (dict(attention_kernel="fa2"), "cuDNN's fused kernel"),
    (dict(kernel_fusion="eager"), "attention_kernel fa2"),
])
def test_fp8_attention_where_it_cannot_run_is_a_one_line_error_naming_the_key(over, words):
    with pytest.raises(ScenarioError) as err:
        pipesim.simulate(raw(**over))
    msg = str(err.value)
    assert "training.fp8_attention" in msg and words in msg and "\n" not in msg
    # MXFP8 off Blackwell: the recipe's own error
    with pytest.raises(ScenarioError, match="training.fp8_recipe: mxfp8 needs Blackwell"):
        pipesim.simulate(raw("dgx-h100", 1, fp8_recipe="mxfp8"))


@pytest.mark.parametrize("mode", ["ring", "allgather"])
def test_per_tensor_fp8_attention_sends_k_and_v_in_fp8_across_context_parallel_ranks(mode):
    """Transformer Engine's context-parallel paths move K and V as FP8 bytes under delayed / current
    scaling (uint8) and as 16 bits under MXFP8; dK and dV stay 16-bit."""
    from pipesim.costs.context import context_comm
    comm = {}
    for recipe, on in (("tensorwise", False), ("tensorwise", True), ("mxfp8", True)):
        s = load_scenario(raw(fp8_recipe=recipe, fp8_attention=on)) if mode == "ring" else \
            load_scenario({**raw(fp8_recipe=recipe, fp8_attention=on),
                           "parallel": {"tensor": 1, "pipeline": 1, "context": 8, "context_mode": "allgather"}})
        comm[recipe, on] = context_comm(s, cost_model_for(s), costed_layer_ops(s))
    bf16, fp8, mx = comm["tensorwise", False], comm["tensorwise", True], comm["mxfp8", True]
    assert fp8.bytes_fwd == pytest.approx(bf16.bytes_fwd / 2) and mx.bytes_fwd == pytest.approx(bf16.bytes_fwd)
    # backward: K/V again (FP8) with dK/dV (16-bit); the ring returns the last dK/dV alone
    cp = 8
    share = ((cp - 1) * 1.5 + 1) / (2 * (cp - 1) + 1) if mode == "ring" else 0.75
    assert fp8.bytes_bwd == pytest.approx(bf16.bytes_bwd * share)


def test_nvfp4_gemms_take_fp8_attention_with_its_own_recipe():
    """Transformer Engine runs FP8 attention beside NVFP4 GEMMs with its own recipe
    (NVTE_DPA_FP8_RECIPE; MLPerf v5.1's Llama 3.1 8B: delayed scaling): the attention is then
    timed and kept as under that recipe, the GEMMs stay NVFP4. Without the key it is an error
    that names it; the key alone, without fp8_attention, is one too."""
    nv = load_scenario(raw(fp8_recipe="nvfp4", fp8_attention_recipe="delayed"))
    ref = load_scenario(raw(fp8_recipe="delayed"))
    a, b = keeper(nv), keeper(ref)
    assert a.flash == b.flash and a.saved_bytes == pytest.approx(b.saved_bytes)
    assert a.serial_bytes_fwd == pytest.approx(b.serial_bytes_fwd)
    gemm = next(o for o in costed_layer_ops(nv) if o.gemms_fwd)
    assert gemm.gemms_fwd[0][4] == "fp4"
    for over, key in ((dict(fp8_recipe="nvfp4"), "fp8_attention_recipe"),
                      (dict(fp8_attention=False, fp8_attention_recipe="delayed"), "needs fp8_attention: true")):
        with pytest.raises(ScenarioError) as err:
            load_scenario(raw(**over))
        assert key in str(err.value) and "\n" not in str(err.value)
