"""sdpa2025 held-out family: NVIDIA's single-GPU Llama 3.2 1B runs map as the script runs them, and
the torch-native SDPA kernels they name are the measured ones (FA2 and SDPA's cuDNN path)."""
import pytest

import pipesim
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.validation import case_scenario, load_cases


def _cases():
    return {c.id: c for c in load_cases() if c.suite == "sdpa2025"}


def test_rows_map_one_gpu_bf16_sgd_eager_and_the_sdpa_backend():
    cases = _cases()
    assert len(cases) == 24                     # 2 GPUs x 6 shapes x (cuDNN, flash)
    s = load_scenario(case_scenario(cases["sdpa2025-b200-cudnn-bs3-sl4096"]))
    assert s.num_gpus == 1 and s.training.micro_batch_size == 3 and s.model.seq_length == 4096
    assert s.training.attention_kernel == "sdpa-cudnn" and s.training.kernel_fusion == "eager"
    assert s.training.optimizer == "sgd" and s.training.cross_entropy == "torch" and s.model.tied_embeddings
    f = load_scenario(case_scenario(cases["sdpa2025-h200-flash-bs24-sl768"]))
    assert f.system.gpu.name.startswith("H200") and f.training.attention_kernel == "fa2"
    assert cases["sdpa2025-b200-cudnn-bs3-sl4096"].target == pytest.approx(3 * 4096 / 0.15531, rel=1e-4)


def test_the_pytorch_cudnn_path_is_slower_than_transformer_engines_on_blackwell_only():
    d = case_scenario(_cases()["sdpa2025-b200-cudnn-bs2-sl8192"])
    sdpa = pipesim.simulate(d).step_time_s
    te = pipesim.simulate({**d, "training": dict(d["training"], attention_kernel="cudnn")}).step_time_s
    assert sdpa > 1.05 * te
    h = case_scenario(_cases()["sdpa2025-h200-cudnn-bs2-sl8192"])       # no separate Hopper measurement:
    assert pipesim.simulate(h).step_time_s == pytest.approx(            # the 2024 cuDNN table stands in
        pipesim.simulate({**h, "training": dict(h["training"], attention_kernel="cudnn-2024")}).step_time_s)


def test_unknown_backends_and_gpus_are_one_line_errors():
    case = _cases()["sdpa2025-b200-flash-bs1-sl16384"]
    for key, value, words in (("training", {"sdpa_backend": "EFFICIENT_ATTENTION"}, "EFFICIENT_ATTENTION"),
                              ("hardware", {"gpu": "MI300X", "num_gpus": 1}, "MI300X")):
        bad = type(case)(case.id, case.suite, case.target, case.source, dict(case.raw, **{key: value}))
        with pytest.raises(ScenarioError, match=words) as e:
            case_scenario(bad)
        assert "\n" not in str(e.value)
