"""Fused attention on Blackwell from NVIDIA's measured cuDNN tables (cudnn-frontend benchmarks)
instead of the H100 table scaled by the matmul ratio; FlashAttention-2 (PyTorch SDPA's flash
backend) measured on B200 for torch-native stacks; the cuDNN of 2026 on Hopper as a named table."""
import pytest

import pipesim
from pipesim.costs.flash import attention_tflops
from pipesim.errors import ScenarioError
from pipesim.presets.gpus import KERNEL_CURVES
from pipesim.scenario.load import load_scenario


def rate(gpu, seq, causal, phase, kernel="auto"):
    return attention_tflops(KERNEL_CURVES[gpu], seq, causal, phase, kernel)


def test_blackwell_cudnn_rates_are_nvidias_measurements():
    # cudnn-frontend results/llama3.1/{gb200,gb300}/*.csv, cuDNN 9.22, BF16, batch 2, 64/8 heads
    assert rate("gb200", 8192, True, "fwd") == pytest.approx(1574)
    assert rate("gb200", 8192, False, "fwd") == pytest.approx(1771)
    assert rate("gb300", 16384, True, "fwd") == pytest.approx(1915)
    # the causal backward is the measured one (1332), not the non-causal backward times the
    # forward's causal ratio (1404 x 1574 / 1771 = 1248)
    assert rate("gb200", 8192, True, "bwd") == pytest.approx(1332)
    assert rate("gb300", 4096, True, "bwd") == pytest.approx(1248)
    # B200: GB200's table (same die) at the BF16 MAMF ratio; B300: GB300's
    assert rate("b200", 8192, True, "fwd") == pytest.approx(1574 * 1745.0 / 1822.0)
    assert rate("b300", 8192, True, "bwd") == pytest.approx(1435 * 1769.0 / 1822.0)


def test_blackwell_ultra_attention_outpaces_blackwell_as_measured():
    """GB300's doubled exponential rate shows in the softmax-bound kernel: 1.08-1.25x GB200 at
    2K-32K in the same run (a matmul-ratio scaling of one table gave both the same rate)."""
    for seq in (2048, 4096, 8192, 16384, 32768):
        for phase in ("fwd", "bwd"):
            assert 1.05 < rate("gb300", seq, True, phase) / rate("gb200", seq, True, phase) < 1.3


def test_flash_attention_2_on_b200_is_the_measured_kernel():
    # pyt_flash_attention on B200 (cudnn-frontend bb37575): 373.4 / 298.9 TFLOP/s at 8K causal
    assert rate("b200", 8192, True, "fwd", "fa2") == pytest.approx(373.4)
    assert rate("b200", 8192, True, "bwd", "fa2") == pytest.approx(298.9)
    # non-causal from the H100 FA2 table's non-causal / causal ratio (370 / 333 at 8K)
    assert rate("b200", 8192, False, "fwd", "fa2") == pytest.approx(373.4 * 370 / 333)
    assert rate("gb200", 8192, True, "fwd", "fa2") == pytest.approx(373.4 * 1822.0 / 1745.0)


def scenario(system="dgx-b200", **training):
    tr = {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16", "attention": "flash"}
    tr.update(training)
    return load_scenario({"model": {"preset": "llama3-8b", "num_layers": 2, "seq_length": 8192},
                          "system": {"preset": system, "num_nodes": 2 if system.endswith("nvl72") else 1},
                          "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
                          "training": tr})


def attention_fwd_seconds(s):
    from pipesim.costs.layers import layer_ops
    from pipesim.costs.stage import cost_model_for
    attn = next(o for o in layer_ops(s) if o.name == "attention")
    return cost_model_for(s).time(attn, "fwd").compute


def test_a_torch_native_stack_on_blackwell_runs_sdpa_flash_attention_2():
    """`attention_kernel: auto` with kernel_fusion eager is PyTorch SDPA's flash backend: on
    Blackwell FlashAttention-2 at ~1/4 of cuDNN's rate, not cuDNN (which Blackwell alone had)."""
    fused, eager = attention_fwd_seconds(scenario()), attention_fwd_seconds(scenario(kernel_fusion="eager"))
    want = rate("b200", 8192, True, "fwd") / rate("b200", 8192, True, "fwd", "fa2")
    assert eager / fused == pytest.approx(want, rel=1e-6) and want > 3.5
    assert attention_fwd_seconds(scenario(attention_kernel="fa2")) == pytest.approx(eager)


def test_hopper_cudnn_of_2026_is_the_default_and_2024s_a_named_table():
    assert rate("h100", 8192, True, "fwd") == pytest.approx(644)          # cuDNN 9.19, H200, Feb 2026
    assert rate("h100", 8192, True, "bwd") == pytest.approx(541)
    assert rate("h100", 8192, True, "fwd", "cudnn-9.19") == pytest.approx(644)
    assert rate("h100", 8192, True, "fwd", "cudnn-2024") == pytest.approx(529)     # FA3 paper Fig. 5 cuDNN
    # the run starts at 2K: below it the 2024 table's fall from its own 2K rate (315 / 484 at 512)
    assert rate("h100", 512, True, "fwd") == pytest.approx(484 * 315 / 484)
    assert rate("h100", 512, False, "fwd") == pytest.approx(633 * 497 / 617)
    s = scenario("dgx-h100")
    assert attention_fwd_seconds(scenario("dgx-h100", attention_kernel="cudnn-2024")) / attention_fwd_seconds(s) \
        == pytest.approx(644 / 529, rel=1e-6)
    with pytest.raises(ScenarioError) as err:           # no such table off Hopper: one line, the key
        pipesim.simulate(scenario("dgx-b200", attention_kernel="cudnn-2024"))
    assert "attention_kernel" in str(err.value) and "\n" not in str(err.value)


def test_blackwell_head_dim_panels_are_nvidias_mla_and_d256_runs():
    """On Blackwell a larger head dim runs faster per FLOP (Hopper's FA3-paper panels run the other
    way): Qwen3.5's d256 measured by NVIDIA on GB200, and for MLA attention only its own run
    (DeepSeek-V3: q/k 192, v 128, 160 as pipesim counts it); below 128 the Hopper panel's factor is
    borrowed."""
    gb200 = KERNEL_CURVES["gb200"]
    mla = lambda phase, causal=True: attention_tflops(gb200, 8192, causal, phase, head_dim=("mla", 160))
    assert mla("fwd") == pytest.approx(1585) and mla("bwd") == pytest.approx(1193)
    assert mla("bwd", causal=False) == pytest.approx(1125)
    # a dense head dim of 160 interpolates the dims instead (128 and 256)
    assert attention_tflops(gb200, 8192, True, "bwd", head_dim=160) > mla("bwd")
    assert attention_tflops(gb200, 8192, True, "fwd", head_dim=256) == pytest.approx(1708)
    assert attention_tflops(gb200, 8192, True, "fwd", head_dim=256) > rate("gb200", 8192, True, "fwd")
    h100 = KERNEL_CURVES["h100"]
    assert attention_tflops(h100, 8192, True, "fwd", head_dim=256) < rate("h100", 8192, True, "fwd")
    d64 = attention_tflops(h100, 8192, True, "fwd", head_dim=64) / rate("h100", 8192, True, "fwd")
    assert attention_tflops(gb200, 8192, True, "fwd", head_dim=64) == pytest.approx(1574 * d64)
    # below the panels' shortest length the factor is the one at it, not a panel held against a
    # shorter base point
    assert attention_tflops(gb200, 1024, True, "fwd", head_dim=("mla", 160)) == pytest.approx(733 * 1072 / 1097)


def test_mla_on_hopper_reads_nvidias_deepseek_v3_run_and_dense_dims_do_not():
    """NVIDIA's H200 run of DeepSeek-V3's attention (cuDNN 9.19): causal backward 442 against the
    same run's 541 at head dim 128 (0.817); the 2024 default table borrows that factor for MLA ops,
    while a dense head dim of 160 or 192 keeps the FA3 paper's 128 / 256 interpolation."""
    from pipesim.costs.layers import layer_ops
    h100 = KERNEL_CURVES["h100"]
    assert attention_tflops(h100, 8192, True, "bwd", head_dim=("mla", 160)) == \
        pytest.approx(attention_tflops(h100, 8192, True, "bwd") * 442 / 541)
    assert attention_tflops(h100, 8192, True, "fwd", head_dim=("mla", 160)) == \
        pytest.approx(attention_tflops(h100, 8192, True, "fwd") * 643 / 644)
    dense = attention_tflops(h100, 8192, True, "bwd", head_dim=192) / attention_tflops(h100, 8192, True, "bwd")
    assert 0.97 < dense < 1.0
    s = load_scenario({"model": {"preset": "deepseek-v3", "num_layers": 4, "seq_length": 4096},
                       "system": {"preset": "dgx-h100", "num_nodes": 1},
                       "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
                       "training": {"micro_batch_size": 1, "global_batch_size": 8, "attention": "flash"}})
    att = next(o for o in layer_ops(s) if o.flash)
    assert att.flash[2] == ("mla", (192 + 128) / 2)


def test_the_head_dim_64_backward_is_the_fa3_papers_backward_panel():
    """FA3 paper Fig. 6, head dim 64, H100, non-causal backward: cuDNN 432, FA2 287, FA3 472 TFLOP/s
    at 8K (the forward's head-dim factor would give 356 / 277 / 429); a causal backward takes the
    non-causal backward's factor."""
    h100 = KERNEL_CURVES["h100"]
    for kernel, want in (("cudnn-2024", 432), ("fa2", 287), ("fa3", 472)):
        assert attention_tflops(h100, 8192, False, "bwd", kernel, head_dim=64) == pytest.approx(want)
    causal128 = attention_tflops(h100, 8192, True, "bwd", "cudnn-2024")
    assert attention_tflops(h100, 8192, True, "bwd", "cudnn-2024", head_dim=64) == pytest.approx(causal128 * 432 / 518)
    # the 2026 default borrows that panel as a factor (9.19's backward at 8K: 594 non-causal)
    assert attention_tflops(h100, 8192, False, "bwd", head_dim=64) == pytest.approx(594 * 432 / 518)


def test_the_report_names_the_attention_table_it_used():
    """Beside a prediction the report says which measurement the fused-attention rates are, and
    the scale a GPU without its own table applies (issue 13: every cost says where it came from)."""
    def table(system="dgx-b200", **training):
        d = pipesim.simulate(scenario(system, **training)).to_dict()
        return d["tensor_core_rate"]["attention_table"]
    assert table() == ("cuDNN 9.22, NVIDIA cudnn-frontend benchmark (GB200, 2026-04), x 0.958 "
                       "(this GPU's matmul rate over the table GPU's)")
    assert table("gb200-nvl72") == "cuDNN 9.22, NVIDIA cudnn-frontend benchmark (GB200, 2026-04)"
    assert "FlashAttention-2 via PyTorch SDPA" in table(kernel_fusion="eager")
    assert "cuDNN 9.13 via PyTorch SDPA" in table(attention_kernel="sdpa-cudnn")
    assert table("dgx-h100") == "cuDNN 9.19, NVIDIA cudnn-frontend benchmark (H200, 2026-02)"
    assert table("dgx-h100", attention_kernel="cudnn-2024") == "cuDNN, FlashAttention-3 paper Fig. 5 (H100, 2024)"
    assert "cuDNN 9.19 FP8" in table("dgx-h100", precision="fp8", fp8_attention=True)
    from pipesim.commands.simulate import summary
    s = scenario("gb200-nvl72")
    assert "attention table     cuDNN 9.22" in summary(pipesim.simulate(s), s)


def test_sliding_window_attention_is_nvidias_gpt_oss_run_on_blackwell():
    """cudnn-frontend results/gpt_oss/{gb200,gb300} (cuDNN 9.22): a 128-key causal band at head dim 64
    runs at 150-200 TFLOP/s in BF16, and in FP8 / MXFP8 its backward skips nothing outside the band
    (its time grows as s²). Other windows and head dims keep the full table's rate."""
    from pipesim.costs.flash import window_tflops
    gb200, gb300, b200 = (KERNEL_CURVES[g] for g in ("gb200", "gb300", "b200"))
    assert window_tflops(gb200, 128, 64, 4096, "fwd") == pytest.approx(161)
    assert window_tflops(gb300, 128, 64, 8192, "bwd", dtype="mxfp8") == pytest.approx(26)
    assert window_tflops(b200, 128, 64, 4096, "bwd") == pytest.approx(182 * 1745.0 / 1822.0)
    assert window_tflops(gb200, 1024, 64, 4096, "fwd") is None           # not the measured window
    assert window_tflops(gb200, 128, 128, 4096, "fwd") is None           # nor head dim
    assert window_tflops(gb200, 128, 64, 4096, "fwd", kernel="fa2") is None
    assert window_tflops(KERNEL_CURVES["h100"], 128, 64, 4096, "fwd") is None

    from pipesim.costs import stage_costs

    def band_bwd(seq, **training):
        s = load_scenario({"model": {"preset": "gpt-oss-120b", "seq_length": seq},
                           "system": {"preset": "gb200-nvl72", "num_nodes": 16, "nvlink_domain": 64},
                           "parallel": {"data": 64, "expert": 64},
                           "training": {"micro_batch_size": 4, "global_batch_size": 256, "precision": "fp8",
                                        "fp8_recipe": "mxfp8", **training}})
        from pipesim.costs.fp8 import low_precision
        from pipesim.costs.layers import layer_ops
        from pipesim.costs.stage import cost_model_for
        band = next(o for o in low_precision(s, layer_ops(s)) if o.name == "attention_window")
        assert stage_costs(s)           # the scenario costs end to end
        return cost_model_for(s).time(band, "bwd").seconds
    # measured MXFP8 / BF16 backward: 2.080 / 0.465 ms at 4K, 7.427 / 0.911 ms at 8K (GB200)
    r4 = band_bwd(4096, fp8_attention=True) / band_bwd(4096)
    r8 = band_bwd(8192, fp8_attention=True) / band_bwd(8192)
    assert r4 == pytest.approx(2.080 / 0.465, rel=0.05) and r8 == pytest.approx(7.427 / 0.911, rel=0.05)


def test_blackwell_cudnn_of_late_2025_is_a_named_table_of_its_own_runs():
    """cuDNN 9.13.1 (Oct 2025, B200 / GB300) and 9.17.0 (Dec 2025, GB200 / GB300), Transformer
    Engine's graph-API path: the measured causal rates, other parts at the BF16 MAMF ratio."""
    assert rate("b200", 8192, True, "fwd", "cudnn-9.13") == pytest.approx(1384.2)
    assert rate("b200", 2048, True, "bwd", "cudnn-9.13") == pytest.approx(545.1)
    assert rate("gb200", 2048, True, "bwd", "cudnn-9.13") == pytest.approx(545.1 * 1822.0 / 1745.0)
    assert rate("gb200", 4096, True, "bwd", "cudnn-9.17") == pytest.approx(1054)
    assert rate("gb300", 131072, True, "fwd", "cudnn-9.13") == pytest.approx(1739.7)
    assert rate("b300", 8192, True, "bwd", "cudnn-9.17") == pytest.approx(1292 * 1769.0 / 1822.0)
    # the releases got faster in that order where the short backward is: 9.13 < 9.17 < 9.22 (GB300)
    assert rate("gb300", 2048, True, "bwd", "cudnn-9.13") < rate("gb300", 2048, True, "bwd", "cudnn-9.17") \
        < rate("gb300", 2048, True, "bwd")
    # causal-only runs: non-causal at the GPU's 9.22 non-causal / causal ratio (GB200 8K: 1771 / 1574)
    assert rate("gb200", 8192, False, "fwd", "cudnn-9.17") == pytest.approx(1584 * 1771 / 1574)
    with pytest.raises(ScenarioError) as err:           # Blackwell only: one line naming the key
        pipesim.simulate(scenario("dgx-h100", attention_kernel="cudnn-9.13"))
    assert "attention_kernel" in str(err.value) and "\n" not in str(err.value)


def test_fp8_attention_of_a_dated_cudnn_is_that_runs_fp8_speed_up():
    """Per-tensor FP8 attention on a dated cuDNN table runs at the FP8 rate measured in the same run
    (cudnn-frontend bb37575: B200 8K causal 1502.1 / 1254.7 beside BF16's 1384.2 / 994.9)."""
    curve = KERNEL_CURVES["b200"]
    assert attention_tflops(curve, 8192, True, "fwd", "cudnn-9.13", dtype="fp8") == pytest.approx(1502.1)
    assert attention_tflops(curve, 8192, True, "bwd", "cudnn-9.13", dtype="fp8") == pytest.approx(1254.7)
    s = scenario(precision="fp8", fp8_attention=True, attention_kernel="cudnn-9.13")
    assert "cuDNN 9.13 FP8" in pipesim.simulate(s).to_dict()["tensor_core_rate"]["attention_table"]
