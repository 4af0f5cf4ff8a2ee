"""mlperf held-out family: MLPerf Training's NeMo / Megatron-Core LLM submissions map as their
config scripts state them (no simulation)."""
import pytest

from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.validation import case_scenario, load_cases


def _cases():
    return {c.id: c for c in load_cases() if c.suite == "mlperf"}


def test_rows_map_the_submissions_configs():
    cases = _cases()
    assert len(cases) == 33
    g = load_scenario(case_scenario(cases["mlperf-v40-gpt3-11616"]))
    assert (g.num_gpus, g.parallel.tensor, g.parallel.pipeline, g.parallel.virtual_stages, g.parallel.data) == \
        (11616, 4, 6, 8, 484)
    assert g.training.global_batch_size == 2904 and g.num_microbatches == 6
    assert g.training.fp8_recipe == "delayed" and g.training.fp8_param_gather and g.training.overlap_tp_comm
    assert g.training.cuda_graphs == "none" and not g.training.grad_reduce_in_fp32    # per-layer graphs
    assert g.model.hidden_size == 12288 and g.model.tied_embeddings and not g.model.dropout
    l1 = load_scenario(case_scenario(cases["mlperf-v50-llama405b-512"]))
    assert (l1.parallel.context, l1.parallel.context_mode, l1.parallel.data) == (2, "ring", 4)
    assert l1.model.vocab_size == 32768                      # the benchmark's Mixtral tokenizer
    split = l1.parallel.layers_per_stage
    assert len(split) == 64 and sum(split) == 126 and split[0] == split[-1] == 1    # ASYM_PP_EMBED / LOSS
    nv = load_scenario(case_scenario(cases["mlperf-v51-llama405b-5120xgb200"]))
    assert nv.training.fp8_recipe == "nvfp4" and nv.training.cuda_graphs == "full_iteration"
    assert not nv.training.overlap_tp_comm and nv.system.nvlink_domain == 64
    e1 = load_scenario(case_scenario(cases["mlperf-v51-llama8b-8xgb200"]))
    assert e1.training.fp8_attention and e1.training.fp8_attention_recipe == "delayed"
    assert (e1.num_gpus, e1.system.island, e1.parallel.data, e1.model.vocab_size) == (8, 8, 8, 128256)
    # the 72-GPU runs fill one NVL72 domain (18 trays of 4); CP 2 x DP 36
    e3 = load_scenario(case_scenario(cases["mlperf-v51-llama8b-72xgb300"]))
    assert (e3.system.gpu.name, e3.system.island, e3.parallel.context, e3.parallel.data) == ("GB300", 72, 2, 36)
    assert e3.training.fp8_recipe == "tensorwise" and e3.training.fp8_param_gather
    h200 = load_scenario(case_scenario(cases["mlperf-v50-llama405b-512xh200"]))
    assert h200.system.gpu.name == "H200-SXM" and h200.parallel.tensor == 4
    assert cases["mlperf-v30-gpt3-512"].target == 676.8
    # NCCL CTA caps from v3.1 on (MEGATRON_CORE_*_MAX_CTAS, custom_communicator_cta.yaml); none in v3.0
    assert g.training.nccl_max_ctas == {"dp": 8, "dp_cp": 8, "tp": 8, "cp": 1, "pp": 2}
    assert load_scenario(case_scenario(cases["mlperf-v30-gpt3-512"])).training.nccl_max_ctas == {}
    # buckets as stated: Apex's 200 MiB of BF16 gradients; Megatron's bucket_size in parameters
    assert g.training.grad_bucket_MB == pytest.approx(200 * 2**20 / 1e6)
    assert nv.training.grad_bucket_MB == pytest.approx(134217728 * 2 / 1e6)
    assert l1.training.grad_bucket_MB == pytest.approx(40e6 * 2 / 1e6)     # Megatron's default, max(40M, 1M x dp)
    l2 = load_scenario(case_scenario(cases["mlperf-v50-llama405b-8192"]))  # dp 64 x cp 2: the gradient group
    assert l2.training.grad_bucket_MB == pytest.approx(128e6 * 2 / 1e6)
    # v5.1 exports NCCL_MAX_CTAS=32, which NCCL lets override every communicator's config
    assert set(nv.training.nccl_max_ctas.values()) == {32}


@pytest.mark.parametrize("section, key, value, words", [
    ("training", "recipe", "mxfp8", "training.recipe 'mxfp8' is not a fp8 recipe"),
    ("training", "precision", "int8", "training.precision 'int8'"),
    ("training", "cuda_graphs", "partial", "training.cuda_graphs 'partial'"),
    ("hardware", "system", "DGX-A100", "hardware.system 'DGX-A100'"),
    ("parallel", "global_batch", 2000, "global_batch 2000"),
])
def test_unknown_settings_and_inconsistent_batches_are_one_line_errors(section, key, value, words):
    case = _cases()["mlperf-v41-gpt3-512"]
    raw = case.raw
    case.raw = dict(raw, **{section: dict(raw[section], **{key: value})})
    try:
        with pytest.raises(ScenarioError) as err:
            case_scenario(case)
        assert words in str(err.value) and "mlperf-v41-gpt3-512" in str(err.value) and "\n" not in str(err.value)
    finally:
        case.raw = raw
