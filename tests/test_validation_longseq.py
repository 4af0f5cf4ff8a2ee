"""The nemolongseq held-out family: NeMo's long-sequence tables with context parallelism
(pipesim/whatif/validation_longseq.py)."""
import dataclasses

import pytest

from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.evaluate import simulate_report
from pipesim.whatif.validation import case_scenario, format_results, load_cases, run_case
from pipesim.whatif.validation_longseq import nemo_llama_flops


def _cases(suite="nemolongseq"):
    return {c.id: c for c in load_cases() if c.suite == suite}


def test_nemos_formula_gives_its_published_tflops_from_its_published_tokens():
    # NeMo 24.07's summary publishes both figures per row: the formula that counts the whole
    # attention matrix turns one into the other, the causal half would not
    for cid in ("nemo2407-LLAMA2-7B-8gpu", "nemo2407-LLAMA3-8B-8gpu"):
        case = _cases("nemo2407")[cid]
        s = load_scenario(case_scenario(case))
        tokens = s.training.global_batch_size * s.model.seq_length
        per_token = nemo_llama_flops(s) / tokens
        tflops = case.target * per_token / 1e12
        assert tflops == pytest.approx(case.raw["measured"]["model_tflops_per_gpu"], rel=0.005)
        attention = 6 * s.model.num_layers * s.model.hidden_size * s.model.seq_length
        causal = case.target * (per_token - attention) / 1e12
        assert abs(causal / case.raw["measured"]["model_tflops_per_gpu"] - 1) > 0.02


def test_every_row_runs_on_its_configuration_columns():
    cases = _cases()
    assert len(cases) == 17
    for case in cases.values():
        par, n = case.raw["parallel"], case.raw["hardware"]["num_gpus"]
        assert n == par["tp"] * par["pp"] * par["dp"] * par["cp"]
        assert par["global_batch"] * case.raw["model"]["seq_len"] == 4 * 2 ** 20      # 4 Mi tokens a step
    s = load_scenario(case_scenario(cases["nemolongseq-llama2-7b-h100-1024k"]))
    assert (s.parallel.tensor, s.parallel.context, s.parallel.data, s.num_gpus) == (8, 32, 4, 1024)
    assert s.parallel.context_mode == "ring" and s.parallel.sequence_parallel and s.model.seq_length == 2 ** 20
    assert s.system.gpu.name.startswith("H100") and s.training.precision == "fp8" and s.training.recompute == "none"
    b200 = load_scenario(case_scenario(cases["nemolongseq-llama3-8b-b200-8k"]))
    assert b200.system.gpu.name.startswith("B200") and b200.num_gpus == 2 and b200.parallel.context == 1


def test_an_unknown_gpu_is_a_one_line_error_naming_the_key():
    case = _cases()["nemolongseq-llama3-8b-b200-8k"]
    raw = dict(case.raw, hardware=dict(case.raw["hardware"], gpu="MI300X"))
    with pytest.raises(ScenarioError, match="hardware.gpu") as e:
        case_scenario(dataclasses.replace(case, raw=raw))
    assert "\n" not in str(e.value) and case.id in str(e.value)


def test_a_row_is_compared_by_nemos_count():
    case = _cases()["nemolongseq-llama2-7b-h100-32k"]
    r = run_case(case, simulate_report)
    s = load_scenario(case_scenario(case))
    assert r.predicted == pytest.approx(nemo_llama_flops(s) / r.step_time_s / s.num_gpus / 1e12)
    assert r.error_pct == pytest.approx(100 * (r.predicted - 610) / 610)
    assert "as NeMo counts them" in format_results({"nemolongseq": [r]})
