"""automodel held-out family: NeMo AutoModel's FSDP2 rows map as published (no simulation)."""
import pytest

from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.validation import case_scenario, load_cases


def _cases():
    return {c.id: c for c in load_cases() if c.suite == "automodel"}


def test_rows_map_the_table_and_the_config_settings():
    cases = _cases()
    assert len(cases) == 9
    q = load_scenario(case_scenario(cases["automodel-qwen3-30b-a3b-8"]))
    assert (q.num_gpus, q.parallel.data, q.parallel.expert, q.training.micro_batch_size) == (8, 8, 8, 4)
    assert q.num_microbatches == 16                         # GA 16 of a local batch of 4
    assert q.training.recompute == "full" and not q.training.reshard_after_forward
    assert q.training.zero3_collectives == "fsdp2" and q.training.moe_dispatcher == "deepep"
    assert q.training.grad_reduce_in_fp32 and q.training.moe_routing == "balanced"
    oss = load_scenario(case_scenario(cases["automodel-gpt-oss-120b-64"]))
    assert oss.training.recompute == "none" and oss.training.reshard_after_forward
    llama = load_scenario(case_scenario(cases["automodel-llama3-70b-64-cp2"]))
    assert (llama.parallel.context, llama.parallel.context_mode, llama.parallel.data) == (2, "allgather", 32)
    assert not llama.training.grad_reduce_in_fp32 and llama.parallel.expert == 1
    # attention: TE's choice for the te backend, FlashAttention-2 under PyTorch SDPA
    assert q.training.attention_kernel == "auto" and llama.training.attention_kernel == "fa2"
    assert cases["automodel-qwen3-30b-a3b-8"].target == 12040.0
    # MaskedCrossEntropy: the MoE configs set fp32_upcast false, the Llama one keeps the default upcast
    assert q.training.cross_entropy == "torch_16bit" and llama.training.cross_entropy == "torch"


def test_a_pipelined_row_simulates_one_schedule_run_per_accumulation_step():
    d = case_scenario(_cases()["automodel-deepseek-v3-1024"])      # GA 4 of a local batch of 8
    s = load_scenario(d)
    assert (s.parallel.pipeline, s.parallel.virtual_stages, s.parallel.data) == (4, 8, 256)
    assert s.training.global_batch_size == 256 * 8 and s.num_microbatches == 8
    assert sum(s.parallel.layers_per_stage) == 61 and len(s.parallel.layers_per_stage) == 32


def test_unknown_settings_and_inconsistent_batches_are_one_line_errors():
    case = _cases()["automodel-qwen3-30b-a3b-8"]
    raw = case.raw
    case.raw = dict(raw, settings={"cuda_graphs": True})
    with pytest.raises(ScenarioError, match="settings.cuda_graphs") as e:
        case_scenario(case)
    assert "\n" not in str(e.value)
    case.raw = dict(raw, settings={"attention": "eager"})
    with pytest.raises(ScenarioError, match="settings.attention 'eager'") as e:
        case_scenario(case)
    assert "\n" not in str(e.value)
    case.raw = dict(raw, parallel=dict(raw["parallel"], global_batch=500))
    with pytest.raises(ScenarioError, match="global_batch") as e:
        case_scenario(case)
    assert "\n" not in str(e.value)
