"""foundry held-out family: MosaicML's MPT throughput tables map row by row onto Composer's FSDP stack,
with the MPT shapes its configs give (checked against every row's published parameter count)."""
import pytest

from pipesim.costs.summary import total_params
from pipesim.errors import ScenarioError
from pipesim.scenario.load import load_scenario
from pipesim.whatif.validation import case_scenario, load_cases


def _cases():
    return {c.id: c for c in load_cases() if c.suite == "foundry"}


def test_every_row_loads_with_the_mpt_the_table_counts():
    cases = _cases()
    assert len(cases) == 216            # the five tables of the README, one case per line
    for case in cases.values():
        s = load_scenario(case_scenario(case))
        published = case.raw["model"]["num_params"]
        assert total_params(s) == pytest.approx(published, rel=1e-3), case.id
        assert s.num_gpus == case.raw["hardware"]["num_gpus"] == s.parallel.data


def test_the_table_columns_map_to_fsdp_settings():
    cases = _cases()
    grad_op = load_scenario(case_scenario(cases["foundry-h100l-mpt-1b-2048-512gpu"]))
    assert grad_op.training.zero_stage == 3 and not grad_op.training.reshard_after_forward
    assert grad_op.training.grad_reduce_in_fp32 and grad_op.training.recompute == "none"
    assert grad_op.training.kernel_fusion == "eager" and grad_op.training.zero3_collectives == "layer"
    pure = load_scenario(case_scenario(cases["foundry-a100-40gb-mpt-70b-2048-128gpu"]))
    assert pure.training.reshard_after_forward and not pure.training.grad_reduce_in_fp32
    assert pure.training.recompute == "full" and pure.system.gpu.memory == pytest.approx(40 * 2**30, rel=0.03)
    # attn_impl: flash is FlashAttention-2, triton MPT's Triton port of FlashAttention
    assert grad_op.training.attention_kernel == "fa2" and pure.training.attention_kernel == "fa-triton"
    fp8 = load_scenario(case_scenario(cases["foundry-h100fp8-mpt-3b-2048-8gpu"]))
    assert fp8.training.precision == "fp8" and fp8.training.fp8_recipe == "delayed"
    # micro-batch 14 x 3 accumulations x 32 GPUs; the figure is the table's T/s over its GPUs
    acc = cases["foundry-h100-mpt-30b-2048-32gpu"]
    s = load_scenario(case_scenario(acc))
    assert s.num_microbatches == 3 and s.training.micro_batch_size == 14
    assert acc.target == pytest.approx(73860 / 32, abs=0.1)


@pytest.mark.parametrize("section,value,words", [
    ("parallel", {"sharding": "HYBRID_SHARD"}, "parallel.sharding"),
    ("hardware", {"gpu": "mi300x"}, "hardware.gpu"),
    ("training", {"fsdp_mixed_precision": "FULL"}, "training.fsdp_mixed_precision"),
    ("training", {"attn_impl": "torch"}, "training.attn_impl"),
    ("training", {"activation_cpu_offload": True}, "activation_cpu_offload"),
    ("parallel", {"global_batch": 97}, "parallel.global_batch 97"),
])
def test_unmapped_values_are_one_line_errors(section, value, words):
    case = _cases()["foundry-a100-mpt-7b-2048-8gpu"]
    raw = dict(case.raw, **{section: dict(case.raw[section], **value)})
    with pytest.raises(ScenarioError) as exc:
        case_scenario(type(case)(**{**case.__dict__, "raw": raw}))
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_composers_train_metrics_read_the_logits_twice_after_each_backward():
    from pipesim.costs.layers import head_ops, logits_per_gpu, shapes_of
    d = case_scenario(_cases()["foundry-a100-mpt-125m-512-8gpu"])
    s = load_scenario(d)
    metrics = next(o for o in head_ops(s) if o.name == "logit_metrics")
    logits = logits_per_gpu(shapes_of(s))
    assert logits == 128 * 512 * 50368                  # micro-batch 128 of 512 tokens, MPT's vocabulary
    assert (metrics.bytes_fwd, metrics.bytes_bwd) == (2 * 22 * logits, 0.0)   # two F.cross_entropy forwards
    bare = load_scenario({**d, "training": dict(d["training"], logit_metric_passes=0)})
    assert not any(o.name == "logit_metrics" for o in head_ops(bare))
    with pytest.raises(ScenarioError, match="logit_metric_passes must not be negative"):
        load_scenario({**d, "training": dict(d["training"], logit_metric_passes=-1)})
