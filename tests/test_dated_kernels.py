"""Published runs read at the cuDNN their software had: the container (or MLPerf round, or report)
a row's source names dates its software, and the newest cuDNN table measured by then times its
fused attention (published_stack.dated_cudnn; validation.with_dated_attention)."""
from datetime import date

from pipesim.whatif.published_stack import dated_cudnn, software_date
from pipesim.whatif.published_stack import with_dated_attention


def source(**fields):
    return {"source": fields}


def test_the_software_date_is_the_containers_month_else_the_round_else_the_report():
    assert software_date(source(where="25.11 NeMo Container, Pre-Training Performance")) == date(2025, 11, 30)
    assert software_date(source(ref="NVIDIA NeMo long-sequence performance (NeMo24.03.01 container)")) \
        == date(2024, 3, 31)
    assert software_date(source(ref="NVIDIA NeMo performance summary (NeMo 24.07 container)")) == date(2024, 7, 31)
    assert software_date(source(where="26.04.01 NeMo Container, Model LLAMA3_70B")) == date(2026, 4, 30)
    assert software_date(source(ref="mlcommons/training_results_v5.1 @ 441d65f NVIDIA/results/"
                                    "tyche_ngpu512_ngc25.09_nemo/llama31_8b/result_*.txt")) == date(2025, 9, 30)
    assert software_date(source(ref="mlcommons/training_results_v4.1 @ x NVIDIA/results/dgxb200_n8/")) \
        == date(2024, 11, 13)
    assert software_date(source(ref="Megatron-LM README @ f2e5db402c (2024-07-15)")) == date(2024, 7, 15)
    assert software_date(source(ref="a blog post")) is None


def test_the_newest_cudnn_measured_by_then_else_the_oldest():
    assert dated_cudnn("gb200", date(2025, 11, 30)) == "cudnn-9.13"
    assert dated_cudnn("b300", date(2026, 1, 31)) == "cudnn-9.17"
    assert dated_cudnn("gb300", date(2026, 6, 30)) == "cudnn"             # April 2026's, the default
    assert dated_cudnn("b200", date(2025, 4, 30)) == "cudnn-9.13"         # before every run: the oldest
    assert dated_cudnn("h100", date(2024, 7, 31)) == "cudnn-2024"
    assert dated_cudnn("h100", date(2026, 4, 30)) == "cudnn"             # 9.19 (February 2026), the default
    assert dated_cudnn("a100", date(2026, 4, 30)) is None                 # no dated cuDNN tables
    assert dated_cudnn("gb200", None) is None


def scenario(system: dict, training: dict) -> dict:
    return {"system": system, "training": training}


def test_a_row_that_leaves_the_kernel_to_the_stack_runs_its_dated_cudnn():
    nov_2025, jun_2026 = date(2025, 11, 30), date(2026, 6, 30)
    s = scenario({"preset": "gb200-nvl72", "num_nodes": 2}, {"precision": "fp8"})
    assert with_dated_attention(s, nov_2025)["training"]["attention_kernel"] == "cudnn-9.13"
    s = scenario({"preset": "dgx-h100", "num_nodes": 1}, {})
    assert with_dated_attention(s, nov_2025)["training"]["attention_kernel"] == "cudnn-2024"
    for when in (jun_2026, None):              # the newest, the default: nothing to name
        assert "attention_kernel" not in with_dated_attention(scenario({"preset": "dgx-b200"}, {}), when)["training"]
    # a row that names its kernel, or runs PyTorch's own attention, keeps it
    for training in ({"attention_kernel": "sdpa-cudnn"}, {"kernel_fusion": "eager"}, {"attention": "eager"}):
        s = scenario({"preset": "dgx-b200", "num_nodes": 1}, dict(training))
        assert with_dated_attention(s, nov_2025) == s


def test_every_published_family_runs_the_cudnn_of_its_date():
    """The shared Hopper families (2024) keep the FlashAttention-3 paper's cuDNN they were read with;
    a 2025 Blackwell row runs October 2025's; the model zoo's rows (README of 2025-11-04) 2024's."""
    from pipesim.whatif.validation import case_scenario, load_cases
    from pipesim.whatif.validation_moe import load_moe_cases, moe_case_scenario
    kernels = {}
    for c in load_cases() + load_cases("scenarios/validation/heldout.yaml"):
        if c.suite in ("mcore-h100", "nemo2407", "llama3-405b", "bridge2511", "mlperf"):
            kernels[c.id] = case_scenario(c)["training"].get("attention_kernel", "auto")
    assert {kernels[k] for k in kernels if k.startswith(("mcore-h100", "nemo2407", "llama3-405b"))} == {"cudnn-2024"}
    assert kernels["bridge2511-gb200-llama3-70b"] == "cudnn-9.13" and kernels["bridge2511-h100-llama3-70b"] == "cudnn-2024"
    assert kernels["mlperf-v51-llama8b-512xgb200"] == "cudnn-9.13"
    assert {moe_case_scenario(c)["training"]["attention_kernel"] for c in load_moe_cases()} == {"cudnn-2024"}
