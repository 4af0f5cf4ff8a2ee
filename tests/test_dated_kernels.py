"""A stack of a given date runs the cuDNN it had (`training.software_date`, costs/flash.py
dated_cudnn), and a published run is dated by its source: the container (or MLPerf round, or report)
it names (published_stack.software_date, with_software_date)."""
from datetime import date

import pytest

import pipesim
from pipesim.costs.flash import dated_cudnn
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.published_stack import software_date, with_software_date


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


def attention_table(system: str, **training) -> str:
    tr = {"micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16", "attention": "flash", **training}
    s = load_scenario({"model": {"preset": "llama3-8b", "num_layers": 2, "seq_length": 8192},
                       "system": {"preset": system, "num_nodes": 2 if system.endswith("nvl72") else 1},
                       "parallel": {"tensor": 1, "pipeline": 1, "data": 8}, "training": tr})
    return pipesim.simulate(s).to_dict()["tensor_core_rate"]["attention_table"]


def test_a_stack_of_a_given_date_runs_the_cudnn_it_had():
    nov_2025 = attention_table("gb200-nvl72", software_date="2025-11")
    assert "cuDNN 9.13" in nov_2025 and nov_2025 == attention_table("gb200-nvl72", attention_kernel="cudnn-9.13")
    assert "cuDNN 9.17" in attention_table("gb200-nvl72", software_date="2026-01-15")
    assert "cuDNN 9.22" in attention_table("gb200-nvl72", software_date="2026-06")
    assert "2024" in attention_table("dgx-h100", software_date="2025-09")
    assert "cuDNN 9.19" in attention_table("dgx-h100")                      # undated: the newest
    # a kernel the scenario names, or PyTorch's own attention, is not re-dated
    assert "cuDNN 9.22" in attention_table("gb200-nvl72", software_date="2025-09", attention_kernel="cudnn")
    assert "FlashAttention-2" in attention_table("dgx-b200", software_date="2025-09", kernel_fusion="eager")
    for bad in ("2025", "2025-13", "Sept 2025"):
        with pytest.raises(ScenarioError) as err:
            attention_table("dgx-b200", software_date=bad)
        assert "training.software_date" in str(err.value) and "\n" not in str(err.value)


def test_a_published_row_carries_its_date_unless_it_names_one():
    s = {"system": {"preset": "dgx-b200"}, "training": {"precision": "fp8"}}
    assert with_software_date(s, date(2025, 11, 30))["training"]["software_date"] == "2025-11-30"
    assert with_software_date(s, None) == s
    dated = {"system": {}, "training": {"software_date": "2024-01"}}
    assert with_software_date(dated, date(2025, 11, 30)) == dated


def test_every_published_family_runs_the_cudnn_of_its_date():
    """The shared Hopper families (2024) keep the FlashAttention-3 paper's cuDNN they were read with;
    a 2025 Blackwell row runs October 2025's; the model zoo's rows (README of 2025-11-04) 2024's."""
    from pipesim.costs.flash import attention_kernel_of
    from pipesim.whatif.validation import case_scenario, load_cases
    from pipesim.whatif.validation_moe import load_moe_cases, moe_case_scenario
    kernels = {}
    for c in load_cases() + load_cases("scenarios/validation/heldout.yaml"):
        if c.suite in ("mcore-h100", "nemo2407", "llama3-405b", "bridge2511", "mlperf"):
            kernels[c.id] = attention_kernel_of(load_scenario(case_scenario(c)))
    assert {kernels[k] for k in kernels if k.startswith(("mcore-h100", "nemo2407", "llama3-405b"))} == {"cudnn-2024"}
    assert kernels["bridge2511-gb200-llama3-70b"] == "cudnn-9.13" and kernels["bridge2511-h100-llama3-70b"] == "cudnn-2024"
    assert kernels["mlperf-v51-llama8b-512xgb200"] == "cudnn-9.13"
    assert {attention_kernel_of(load_scenario(moe_case_scenario(c))) for c in load_moe_cases()} == {"cudnn-2024"}


def test_a_date_in_yaml_stays_a_date_string(tmp_path):
    """YAML 1.2 has no timestamp type: `software_date: 2025-11-04` unquoted is the string, and a day
    that does not exist is the key's one-line error, not PyYAML's ValueError."""
    from pipesim.costs.flash import attention_kernel_of
    from pipesim.scenario.safe_yaml import load_text
    assert load_text("d: 2025-11-04\nbad: 2026-04-31\n", "x.yaml") == {"d": "2025-11-04", "bad": "2026-04-31"}
    path = tmp_path / "s.yaml"
    text = ("model: {preset: llama3-8b, num_layers: 2}\nsystem: {preset: dgx-b200, num_nodes: 1}\n"
            "parallel: {tensor: 1, pipeline: 1, data: 8}\n"
            "training: {micro_batch_size: 1, global_batch_size: 8, software_date: 2025-11-04}\n")
    path.write_text(text)
    assert attention_kernel_of(load_scenario(str(path))) == "cudnn-9.13"
    path.write_text(text.replace("2025-11-04", "2026-04-31"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(path))
    assert "training.software_date" in str(err.value) and "\n" not in str(err.value)


def test_the_validation_table_names_the_attention_each_family_ran():
    from pipesim.whatif.validation import Case, Result, attention_tables

    def result(label):
        case = Case(id="x", suite="bridge2511", target=1.0, source="", raw={})
        return Result(case, 1.0, 0.0, 1.0, report={"tensor_core_rate": {"attention_table": label}})
    rows = [result("cuDNN 9.13, NVIDIA cudnn-frontend benchmark (B200, 2025-10), x 1.044 (this GPU's ...)"),
            result("cuDNN 9.13, NVIDIA cudnn-frontend benchmark (B200, 2025-10)"),
            result("cuDNN, FlashAttention-3 paper Fig. 5 (H100, 2024)"), result(None)]
    assert attention_tables(rows) == [("cuDNN 9.13, NVIDIA cudnn-frontend benchmark (B200, 2025-10)", 2),
                                      ("cuDNN, FlashAttention-3 paper Fig. 5 (H100, 2024)", 1)]
