"""The `other` validation family: a case whose id names no family, mapped from what it states."""
import dataclasses

import pytest

from pipesim import load_scenario
from pipesim.errors import ScenarioError
from pipesim.whatif.validation import case_scenario, load_cases, run_case, run_suite

LLAMA_ROW = """
- id: {id}
  kind: training_throughput
  source: {{ref: a test row}}
  model: {{name: {name}, family: Llama, layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn_hidden: 28672,
          vocab: 128256, seq_len: 8192}}
  parallel: {{tp: 4, pp: 4, vp: 5, cp: 2, micro_batch: 1, global_batch: 128}}
  hardware: {{gpu: {gpu}, num_gpus: 64}}
  training: {{precision: {precision}, recompute: none}}
  measured: {measured}
"""


def _cases(tmp_path, **kw):
    row = dict(id="myrun-llama3-70b", name="LLAMA3-70B", gpu="H100-SXM5-80GB", precision="BF16",
               measured="{iteration_time_s: 10.0}")
    row.update(kw)
    path = tmp_path / "runs.yaml"
    path.write_text(LLAMA_ROW.format(**row))
    return path


def test_an_unnamed_family_is_read_as_other_with_its_step_time_as_tokens(tmp_path):
    [case] = load_cases(_cases(tmp_path))
    assert case.suite == "other" and case.metric == "tokens"
    assert case.target == pytest.approx(128 * 8192 / 10.0 / 64)          # GBS x seq / step / GPUs
    s = load_scenario(case_scenario(case))
    assert s.model.num_layers == 80 and s.model.num_kv_heads == 8 and s.model.activation == "swiglu"
    assert (s.parallel.tensor, s.parallel.pipeline, s.parallel.context, s.parallel.data) == (4, 4, 2, 2)
    assert s.parallel.virtual_stages == 5 and s.training.schedule == "interleaved"
    assert s.training.zero_stage == 1 and s.training.precision == "bf16" and s.parallel.sequence_parallel


def test_a_preset_is_used_only_when_the_stated_shape_matches(tmp_path):
    [case] = load_cases(_cases(tmp_path))
    assert case_scenario(case)["model"]["preset"] == "llama3-70b"
    raw = dict(case.raw, model=dict(case.raw["model"], layers=40))
    model = case_scenario(dataclasses.replace(case, raw=raw))["model"]
    assert "preset" not in model and model["num_layers"] == 40 and model["norm"] == "rmsnorm"


@pytest.mark.parametrize("stated, gpu, recipe", [("FP8", "H100-SXM5-80GB", "tensorwise"), ("FP8", "B200", "tensorwise"),
                                                 ("FP8-MX", "B200", "mxfp8"), ("MXFP8", "GB300", "mxfp8"),
                                                 ("fp8 delayed", "H100", "delayed"), ("NVFP4", "B200", "nvfp4")])
def test_the_fp8_recipe_is_the_one_named(tmp_path, stated, gpu, recipe):
    """FP8 alone is per-tensor current scaling on every GPU (Megatron-Bridge's FP8-CS rows run it on
    Blackwell too); a block recipe only when the row names it."""
    sc = case_scenario(load_cases(_cases(tmp_path, precision=stated, gpu=gpu))[0])
    assert (sc["training"]["precision"], sc["training"]["fp8_recipe"]) == ("fp8", recipe)
    assert load_scenario(sc).training.fp8_recipe == recipe


def test_a_gb200_run_is_one_nvlink_domain_of_the_trays_it_fills(tmp_path):
    system = case_scenario(load_cases(_cases(tmp_path, gpu="GB200"))[0])["system"]
    assert system["preset"] == "gb200-nvl72" and system["num_nodes"] == 16 and 64 % system["nvlink_domain"] == 0


def test_a_published_family_row_read_as_other_keeps_what_it_states():
    """The Megatron-Core H100 32B row, renamed: its --tp-comm-overlap flag and the distributed
    optimizer are read from the row, so the generic mapping times it as its family does."""
    case = next(c for c in load_cases() if c.id == "mcore-h100-32B")
    other = dataclasses.replace(case, suite="other", own_metric="megatron", id="renamed-32B")
    sc = case_scenario(other)
    assert sc["training"]["overlap_tp_comm"] and sc["training"]["zero_stage"] == 1
    from pipesim.whatif.evaluate import detailed_report
    family, generic = run_case(case, detailed_report), run_case(other, detailed_report)
    assert generic.predicted == pytest.approx(family.predicted, rel=0.03)


def test_layers_that_do_not_divide_split_counting_the_embedding_and_the_loss(tmp_path):
    case = next(c for c in load_cases() if c.id == "llama3-405b-8192gpu-cp1-8k")
    other = dataclasses.replace(case, suite="other", own_metric="model")
    par = case_scenario(other)["parallel"]
    assert len(par["layers_per_stage"]) == 16 and sum(par["layers_per_stage"]) == 126
    assert par["layers_per_stage"][0] < par["layers_per_stage"][1]


def test_megatron_count_is_eq3_for_a_gpt_and_the_core_count_otherwise(tmp_path):
    from pipesim.costs.summary import megatron_core_flops, megatron_flops
    from pipesim.whatif.validation_generic import megatron_counted_flops
    gpt = load_scenario(case_scenario(next(c for c in load_cases() if c.id == "sc21-t1-1.7B")))
    assert megatron_counted_flops(gpt) == megatron_flops(gpt, recompute=True)
    llama = load_scenario(case_scenario(load_cases(_cases(tmp_path))[0]))
    assert megatron_counted_flops(llama) == megatron_core_flops(llama)


def test_the_default_files_have_no_other_case_and_moezoo_is_not_swallowed():
    assert not [c for c in load_cases() if c.suite == "other"]
    assert run_suite(["other"]) == {"other": []}


@pytest.mark.parametrize("kw, needle", [
    (dict(gpu="H100-PCIe"), "hardware.gpu 'H100-PCIe' has no system preset"),
    (dict(gpu="MI300X"), "hardware.gpu 'MI300X' has no system preset"),
    (dict(precision="int4"), "training.precision 'int4'"),
    (dict(name="custom"), None),
])
def test_bad_rows_are_one_line_errors_naming_the_key(tmp_path, kw, needle):
    [case] = load_cases(_cases(tmp_path, **kw))
    if needle is None:                                        # an unknown name with every dimension: built
        assert case_scenario(case)["model"]["ffn_hidden_size"] == 28672
        return
    with pytest.raises(ScenarioError, match=needle) as e:
        case_scenario(case)
    assert "\n" not in str(e.value)


def test_missing_shape_gpu_count_and_metric_are_named(tmp_path):
    [case] = load_cases(_cases(tmp_path))
    for section, change, needle in (("model", {"ffn_hidden": None, "name": "x"}, "model.ffn_hidden: missing"),
                                    ("parallel", {"dp": 3}, r"tp\(4\) x pp\(4\) x cp\(2\) x dp\(3\) = 96"),
                                    ("parallel", {"global_batch": None}, "parallel.global_batch: missing")):
        block = {k: v for k, v in dict(case.raw[section], **change).items() if v is not None}
        with pytest.raises(ScenarioError, match=needle):
            case_scenario(dataclasses.replace(case, raw=dict(case.raw, **{section: block})))
    # a figure the other family cannot read is that row's note, not the file's error
    [case] = load_cases(_cases(tmp_path, measured="{loss: 2.1}"))
    assert case.target is None and "measured: expected one of" in run_case(case, lambda s, mode: {}).note


@pytest.mark.parametrize("stated, keys", [
    ("norm, act", {"recompute": "selective", "recompute_modules": ["layernorm", "moe_act"]}),
    ("full (--activations-checkpoint-method uniform)", {"recompute": "full"}),
    ("not stated", {"recompute": "none"}),
    (None, {"recompute": "none"}),
    ("selective", {"recompute": "selective"}),
])
def test_recompute_as_stated_or_as_megatron_modules(stated, keys):
    from pipesim.whatif.validation_generic import _recompute
    assert _recompute({"recompute": stated}, "x", None) == keys


def test_an_unknown_recompute_is_named():
    from pipesim.whatif.validation_generic import _recompute
    with pytest.raises(ScenarioError, match="training.recompute 'sometimes'"):
        _recompute({"recompute": "sometimes"}, "x", None)


VALUES = [None, 0, -1, 3, 7, "x", "not stated", [], {}, True, 2.5, "16 (derived)", "FP8", "full", "B200", 10**9]


def test_mutated_rows_load_or_fail_in_one_line(tmp_path):
    """Any value in any key of a row: a scenario that loads, or one line naming the case."""
    from hypothesis import given, settings, strategies as st
    from pipesim.errors import PipesimError

    base = load_cases(_cases(tmp_path))[0].raw

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(st.lists(st.tuples(st.sampled_from(["model", "parallel", "hardware", "training"]), st.integers(0, 20),
                              st.sampled_from(VALUES + ["<drop>"])), min_size=1, max_size=3))
    def check(changes):
        import copy
        raw = copy.deepcopy(base)
        for section, index, value in changes:
            block = raw[section]
            key = sorted(block)[index % len(block)]
            if value == "<drop>":
                block.pop(key)
            else:
                block[key] = value
        case = dataclasses.replace(load_cases(_cases(tmp_path))[0], raw=raw)
        try:
            load_scenario(case_scenario(case))
        except PipesimError as err:
            assert "\n" not in str(err)
    check()


def test_the_bundled_example_runs_as_the_other_family_alone(capsys):
    """`pipesim validate --cases scenarios/validation/own-runs-example.yaml`: its three rows, and no
    empty table of the suites the file has no rows for."""
    from pathlib import Path
    from pipesim.cli import main
    path = Path(__file__).resolve().parents[1] / "scenarios" / "validation" / "own-runs-example.yaml"
    assert main(["validate", "--cases", str(path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("example-") == 3 + 1 and "(3 of 3 cases)" in out      # the rows and the error budget
    assert "moezoo" not in out and "nccl" not in out and "nan" not in out
    # each row says what its stack was read as
    assert "stack: nemo of 2024-09" in out and "stack: megatron of 2024-07" in out and "stack: megatron, undated" in out


def test_a_row_without_parallel_or_hardware_prints_its_reason(tmp_path, capsys):
    """The table printed `raw["parallel"]` of a row that did not load: a KeyError traceback."""
    from pipesim.cli import main
    path = tmp_path / "runs.yaml"
    path.write_text("- id: bare\n  kind: training_throughput\n  measured: {tokens_per_s_per_gpu: 5}\n")
    assert main(["validate", "--cases", str(path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "bare: hardware.num_gpus: expected a positive integer, got None" in out


def test_a_section_that_is_not_a_mapping_is_named(tmp_path, capsys):
    """`parallel: 5` with a step time: a TypeError traceback while converting the time."""
    from pipesim.cli import main
    path = tmp_path / "runs.yaml"
    path.write_text("- id: odd\n  kind: training_throughput\n  parallel: 5\n  measured: {iteration_time_ms: 900}\n")
    assert main(["validate", "--cases", str(path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "odd: parallel: expected a mapping of keys, got 5" in out         # the row's note, on one line


def test_written_scenarios_name_each_cases_own_metric(tmp_path):
    from pathlib import Path
    from pipesim.whatif.validation import write_scenarios
    path = Path(__file__).resolve().parents[1] / "scenarios" / "validation" / "own-runs-example.yaml"
    files = write_scenarios(tmp_path, path, "preset", ["other"])
    heads = {Path(f).stem: Path(f).read_text().splitlines()[1] for f in files}
    assert heads["example-llama3-70b-fp8-64xh100"] == "# published: 1524 (tokens/s per GPU)"
    assert "as Megatron counts them" in heads["example-gpt-16b-192xh100"]
    assert load_scenario(str(Path(tmp_path) / "example-gpt-16b-192xh100.yaml")).num_gpus == 192


def test_a_row_may_name_the_scenario_it_ran(tmp_path):
    """`scenario` (relative to the cases file) with `set` overrides is the row's whole mapping."""
    from pathlib import Path
    from pipesim.whatif.evaluate import detailed_report
    import os
    bundled = Path(__file__).resolve().parents[1] / "scenarios" / "gpt-13b-2-nodes.yaml"   # its presets are files
    (tmp_path / "runs").mkdir()
    path = tmp_path / "runs" / "mine.yaml"
    relative = os.path.relpath(bundled, path.parent)
    path.write_text(f"- id: mine-tp4\n  kind: training_throughput\n  scenario: {relative}\n"
                    "  set: {parallel.tensor: 4, parallel.pipeline: 1, parallel.data: 4}\n"
                    "  measured: {tokens_per_s_per_gpu: 2000}\n")
    [case] = load_cases(path)
    sc = case_scenario(case)
    assert (sc["parallel"]["tensor"], sc["parallel"]["data"]) == (4, 4) and "run" not in sc
    r = run_case(case, detailed_report)
    assert r.predicted > 0 and r.layout[0] == 4
    for raw, needle in ((dict(case.raw, scenario="../missing.yaml"), "scenario: expected a scenario file"),
                        (dict(case.raw, set={"tensor": 2}), "set: 'tensor': expected section.key"),
                        (dict(case.raw, set=[1]), "set: expected a mapping of dotted keys")):
        with pytest.raises(ScenarioError, match=needle):
            case_scenario(dataclasses.replace(case, raw=raw))


GPT_ROW = """
- id: oldrun-gpt
  kind: training_throughput
  source: {{ref: "{ref}"}}
  model: {{family: GPT, layers: 24, hidden: 2048, heads: 16, vocab: 51200, seq_len: 2048}}
  parallel: {{tp: 2, pp: 1, global_batch: 64, micro_batch: 4}}
  hardware: {{gpu: A100-SXM4, num_gpus: 16}}
  training: {{precision: fp16 mixed, recompute: not stated}}
  measured: {{tflops_per_gpu: 100}}
"""


def _gpt_scenario(tmp_path, ref: str) -> dict:
    path = tmp_path / "gpt.yaml"
    path.write_text(GPT_ROW.format(ref=ref))
    [case] = load_cases(path)
    return case_scenario(case)


def test_a_row_reported_before_megatrons_2022_features_runs_the_stack_of_its_time(tmp_path):
    old = _gpt_scenario(tmp_path, "Some paper (arXiv:2104.04473)")
    new = _gpt_scenario(tmp_path, "A 2024 table, commit abc (2024-07-15)")
    for scenario, flash, sp, zero, overlap, recompute in ((old, "eager", False, 0, False, "full"),
                                                          (new, "flash", True, 1, True, "none")):
        tr = scenario["training"]
        assert (tr["attention"], scenario["parallel"]["sequence_parallel"], tr["zero_stage"],
                tr["overlap_grad_reduce"], tr["recompute"]) == (flash, sp, zero, overlap, recompute)
        assert tr["grad_reduce_in_fp32"] is False             # fp16: Megatron reduces fp32 with --bf16 only
    # an A100 of unstated size reported before November 2020 is the 40 GB part
    assert old["system"]["preset"] == "dgx-a100-80gb"
    assert _gpt_scenario(tmp_path, "README (2020-09)")["system"]["preset"] == "dgx-a100-40gb"
    assert old["training"]["p2p_sync"] and not old["training"]["tp_grad_overlap"]
    assert new["training"]["tp_grad_overlap"]


def test_a_deepspeed_zero3_row_of_early_2021_gathers_without_overlap(tmp_path):
    path = tmp_path / "z3.yaml"
    row = GPT_ROW.format(ref="SC'21 (arXiv:2104.04473)")
    path.write_text(row.replace("tp: 2, pp: 1", "tp: 1, pp: 1, zero_stage: 3"))
    [case] = load_cases(path)
    tr = case_scenario(case)["training"]
    assert tr["zero_stage"] == 3 and tr["zero3_prefetch"] is False and tr["grad_bucket_MB"] == 1000.0


@pytest.mark.parametrize("text, expected", [
    ("Narayanan et al., SC'21 (arXiv:2104.04473)", "2021-04-30"),
    ("README.md (2020-09) + images", "2020-09-30"),
    ("images/model_table.png @ commit f2e5db402c (2024-07-15)", "2024-07-15"),
    ("Llama 3 Herd of Models (arXiv 2407.21783)", "2024-07-31"),
    ("DeepSeek-V3 report, 2024", "2024-12-31"),
    ("settings @ 2013a4dd6", None),                           # a commit hash is not a year
    ("a table of runs", None),
])
def test_the_date_a_source_states_is_the_latest_its_run_can_have(text, expected):
    from pipesim.whatif.published_stack import reported_by
    found = reported_by({"source": {"ref": text}})
    assert (found.isoformat() if found else None) == expected


def test_rows_in_other_shapes_are_read(tmp_path):
    """A per-rank batch, the GPU named by the system, "n/a", precision beside the sections, FP8-DS,
    a parenthesised remark in the name, and a pipesim key with a value pipesim has no setting for."""
    path = tmp_path / "shapes.yaml"
    path.write_text("""
- id: shapes-llama
  kind: training_throughput
  source: {ref: a table}
  model: {name: "Llama 3.1 70B (pre-training)", seq_len: 8192}
  hardware: {system: DGX-H100, num_gpus: 64}
  precision: FP8-DS
  parallel: {tp: 4, pp: 1, cp: 1, vp: n/a, ep: n/a, local_batch: 2}
  training: {cuda_graphs: per_layer, fp8_attention: true}
  measured: {step_time_s: 5.0}
""")
    [case] = load_cases(path)
    assert case.target == pytest.approx(2 * 16 * 8192 / 5.0 / 64)       # local batch x dp(16) x seq / step / GPUs
    scenario = case_scenario(case)
    s = load_scenario(scenario)
    assert scenario["model"]["preset"] == "llama3-70b" and scenario["system"]["preset"] == "dgx-h100"
    assert (s.training.precision, s.training.fp8_recipe) == ("fp8", "delayed")
    assert (s.training.global_batch_size, s.training.micro_batch_size) == (32, 2)
    assert s.training.fp8_attention and s.training.cuda_graphs == "none"


def test_a_converted_scenario_error_names_the_case_not_a_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(LLAMA_ROW.format(id="myrun-bad", name="LLAMA3-70B", gpu="H100-SXM5-80GB", precision="BF16",
                                     measured="{iteration_time_s: 10.0}").replace("recompute: none",
                                                                                  "recompute: none, fp8_attention: 3"))
    [case] = load_cases(path)
    result = run_case(case, lambda s, mode: {})
    assert result.note.startswith("myrun-bad: training.fp8_attention") and "<dict>" not in result.note


def _row_scenario(tmp_path, text: str):
    path = tmp_path / "row.yaml"
    path.write_text(text)
    [case] = load_cases(path)
    return case, case_scenario(case)


def test_a_torchtitan_row_runs_torchtitans_stack(tmp_path):
    case, scenario = _row_scenario(tmp_path, """
- id: t-llama
  kind: training_throughput
  source: {ref: "pytorch/torchtitan benchmarks (2025-06)"}
  model: {name: llama3-8b, seq_len: 8192}
  hardware: {gpu: H200-SXM, num_gpus: 32}
  parallel: {fsdp: 32, local_batch: 2}
  training: {activation_checkpointing: selective op, compile: true, float8: tensorwise, fsdp_float8_all_gather: true}
  measured: {tokens_per_s_per_gpu: 10000}
""")
    tr = scenario["training"]
    assert (tr["zero_stage"], tr["zero3_collectives"], tr["kernel_fusion"], tr["cross_entropy"]) == \
        (3, "fsdp2", "fused", "torch_compiled")
    assert tr["recompute"] == "selective_op" and tr["fsdp2_ends_in_root"] is True
    assert (tr["precision"], tr["fp8_recipe"], tr["fp8_param_gather"]) == ("fp8", "tensorwise", True)
    assert (tr["global_batch_size"], tr["micro_batch_size"]) == (64, 2)


def test_a_nemo_row_runs_nemos_recipes_and_is_counted_as_nemo_counts(tmp_path):
    case, scenario = _row_scenario(tmp_path, """
- id: n-llama
  kind: training_throughput
  source: {ref: NVIDIA NeMo performance summary (NeMo 24.09 container)}
  model: {name: LLAMA2-7B, seq_len: 4096}
  hardware: {gpu: H100-SXM5-80GB, num_gpus: 16}
  parallel: {tp: 2, pp: 1, global_batch: 128, micro_batch: 1}
  training: {precision: FP8}
  measured: {tflops_per_gpu: 600}
""")
    assert case.metric == "nemo"
    tr = scenario["training"]
    assert (tr["fp8_recipe"], tr["overlap_tp_comm"]) == ("delayed", True)


def test_a_lora_row_trains_adapters(tmp_path):
    _, scenario = _row_scenario(tmp_path, LLAMA_ROW.format(
        id="lora-run", name="LLAMA3-70B", gpu="H100-SXM5-80GB", precision="BF16", measured="{iteration_time_s: 10.0}"
    ).replace("recompute: none", "recompute: none, lora: {rank: 16, targets: [qkv, proj], dropout: 0.1}"))
    tr = scenario["training"]
    assert (tr["lora_rank"], tr["lora_targets"], tr["lora_dropout"]) == (16, ["qkv", "proj"], 0.1)
    with pytest.raises(ScenarioError, match="training.lora: expected a mapping with rank"):
        _row_scenario(tmp_path, LLAMA_ROW.format(
            id="lora-bad", name="LLAMA3-70B", gpu="H100-SXM5-80GB", precision="BF16",
            measured="{iteration_time_s: 10.0}").replace("recompute: none", "recompute: none, lora: 16"))


@pytest.mark.parametrize("text, per_gpu", [
    ("8x 200 Gb/s HDR InfiniBand per node (fat tree)", 25.0),      # the node's NICs over its 8 GPUs
    ("8x 400 Gb/s IB (50 GB/s per GPU)", 50.0),                    # bytes stated per GPU win
    ("RoCE 400 Gb/s per GPU", 50.0),
    ("4x 100 Gbps Omni-Path per node", 6.25),
    ("NVSwitch", None),
])
def test_the_network_a_row_states_is_read_per_gpu(text, per_gpu):
    from pipesim.whatif.validation_generic import _nic_GBps
    assert _nic_GBps({"inter_node": text}, 8) == per_gpu


def test_a_2022_model_is_named_and_its_network_taken(tmp_path):
    _, scenario = _row_scenario(tmp_path, """
- id: b-176b
  kind: training_throughput
  source: {ref: "BLOOM (arXiv:2211.05100)"}
  model: {name: BLOOM-176B, seq_len: 2048}
  parallel: {tp: 4, pp: 12, dp: 8, global_batch: 2048, micro_batch: 2}
  hardware: {gpu: A100-SXM4-80GB, num_gpus: 384, inter_node: "4x 100 Gb/s Omni-Path per node"}
  training: {precision: bf16, recompute: full}
  measured: {tflops_per_gpu: 150}
""")
    assert scenario["model"]["preset"] == "bloom-176b"
    assert scenario["system"]["inter_node"] == {"bandwidth_GBps": 6.25}
    assert scenario["training"]["attention"] == "eager"          # November 2022: before Megatron's FlashAttention


@pytest.mark.parametrize("attention,kernel", [("triton", "fa-triton"), ("xformers", "xformers"), ("fa1", "fa1"),
                                              ("flash", "auto")])
def test_an_attention_named_by_its_kernel_runs_on_that_kernels_table(tmp_path, attention, kernel):
    _, scenario = _row_scenario(tmp_path, f"""
- id: mpt-like
  kind: training_throughput
  source: {{ref: my run, 2023-07}}
  model: {{name: Llama-2-7B, seq_len: 4096}}
  parallel: {{tp: 1, pp: 1, dp: 8, global_batch: 64, micro_batch: 8}}
  hardware: {{gpu: A100-SXM4-80GB, num_gpus: 8}}
  training: {{precision: bf16, attention: {attention}}}
  measured: {{tokens_per_s_per_gpu: 3000}}
""")
    assert scenario["training"]["attention"] == "flash"
    assert scenario["training"].get("attention_kernel", "auto") == kernel
    if attention == "triton":          # it runs, at the kernel's slower rate than FA2's
        import pipesim
        from pipesim.scenario.load import load_scenario
        fa2 = dict(scenario, training=dict(scenario["training"], attention_kernel="fa2"))
        step = {k: pipesim.simulate(load_scenario(d)).data["step_time_s"] for k, d in (("triton", scenario), ("fa2", fa2))}
        assert step["triton"] > step["fa2"]


def test_moe_shapes_a_row_states_are_built(tmp_path):
    _, scenario = _row_scenario(tmp_path, """
- id: my-moe
  kind: training_throughput
  source: {ref: my run, 2026-03}
  model: {family: DeepSeek, layers: 8, hidden: 2048, heads: 16, head_dim: 128, ffn_hidden: 8192, vocab: 32000,
          seq_len: 4096, num_experts: 64, moe_top_k: 6, moe_ffn_hidden: 1024, num_shared_experts: 2,
          first_dense_layers: 1}
  parallel: {tp: 1, pp: 1, ep: 8, global_batch: 64}
  hardware: {gpu: H100, num_gpus: 8}
  training: {precision: bf16}
  measured: {tokens_per_s_per_gpu: 20000}
""")
    m = load_scenario(scenario).model
    assert (m.kv_channels, m.num_shared_experts, m.moe_first_dense_layers, m.moe_ffn_hidden_size) == (128, 2, 1, 1024)
    with pytest.raises(ScenarioError, match="model.num_shared_experts: expected a count"):
        _row_scenario(tmp_path, """
- id: my-moe
  kind: training_throughput
  model: {family: DeepSeek, layers: 8, hidden: 2048, heads: 16, ffn_hidden: 8192, vocab: 32000, seq_len: 4096,
          num_experts: 64, num_shared_experts: -1}
  parallel: {global_batch: 64}
  hardware: {gpu: H100, num_gpus: 8}
  measured: {tokens_per_s_per_gpu: 20000}
""")


@pytest.mark.parametrize("measured, metric, value", [
    ("{mfu_pct: 40}", "model", 0.40 * 989),                 # over the H100's dense BF16 peak
    ("{tokens_per_s: 64000}", "tokens", 1000.0),            # the run's, over 64 GPUs
    ("{samples_per_s: 8}", "tokens", 8 * 8192 / 64),
    ("{step_time_ms: 10000}", "tokens", 128 * 8192 / 10.0 / 64),
])
def test_other_measured_figures_are_converted(tmp_path, measured, metric, value):
    [case] = load_cases(_cases(tmp_path, measured=measured))
    assert case.metric == metric and case.target == pytest.approx(value)


def test_a_part_with_its_own_memory_size_keeps_it():
    from pipesim.whatif.validation_generic import _system
    assert _system({"gpu": "H100-SXM-96GB-HBM2e (500 W)"}, "x", 8, None)["gpu"] == {"memory_GiB": 96}
    for same in ("A100-SXM4-80GB", "H200 141GB", "B200 180GB"):      # the preset's, in GiB or GB
        assert "gpu" not in _system({"gpu": same}, "x", 8, None)


def test_an_automodel_row_runs_its_fsdp2_stack_with_its_settings(tmp_path):
    _, scenario = _row_scenario(tmp_path, """
- id: a-llama
  kind: training_throughput
  source: {ref: NVIDIA-NeMo/Automodel docs/performance-summary.md}
  model: {name: Llama3 70B, seq_len: 8192}
  hardware: {system: DGX-H100, num_gpus: 64}
  precision: BF16
  parallel: {global_batch: 64, local_batch: 1, tp: 1, pp: 1, cp: 2, fsdp: 32}
  settings: {activation_checkpointing: true, reshard_after_forward: false, attention: flex}
  measured: {tokens_per_s_per_gpu: 300}
""")
    tr = scenario["training"]
    assert (tr["zero_stage"], tr["zero3_collectives"], tr["recompute"]) == (3, "fsdp2", "full")
    assert tr["reshard_after_forward"] is False and tr["attention_kernel"] == "fa2"
    assert scenario["parallel"]["context_mode"] == "allgather"


def test_a_hugging_face_row_runs_eager_ops_and_its_sdpa_backend(tmp_path):
    _, scenario = _row_scenario(tmp_path, """
- id: h-1b
  kind: training_throughput
  source: {ref: a benchmark}
  model: {name: llama3.2-1b, seq_len: 2048}
  hardware: {gpu: H200, num_gpus: 1}
  parallel: {batch: 8}
  training: {sdpa_backend: CUDNN_ATTENTION, optimizer: sgd, stack: hf-transformers-eager}
  measured: {tokens_per_s_per_gpu: 50000}
""")
    tr = scenario["training"]
    assert (tr["kernel_fusion"], tr["attention_kernel"], tr["cross_entropy"], tr["zero_stage"], tr["optimizer"]) == \
        ("eager", "sdpa-cudnn", "torch", 0, "sgd")


def test_a_row_whose_figure_cannot_be_read_does_not_stop_the_others(tmp_path, capsys):
    """`pipesim validate --cases`: one new row without a readable figure (or whose MFU names a GPU
    pipesim has no preset for) is listed with its reason; the file's other rows still run."""
    from pipesim.cli import main
    path = tmp_path / "runs.yaml"
    path.write_text(LLAMA_ROW.format(id="good-run", name="LLAMA3-70B", gpu="H100-SXM5-80GB", precision="BF16",
                                     measured="{iteration_time_s: 10.0}")
                    + "- id: no-figure\n  kind: training_throughput\n"
                    + LLAMA_ROW.format(id="mfu-run", name="LLAMA3-70B", gpu="MI300X", precision="BF16",
                                       measured="{mfu_pct: 40}"))
    assert main(["validate", "--cases", str(path), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "no-figure: measured: expected one of" in out and "mfu-run: hardware.gpu 'MI300X'" in out
    assert "(1 of 3 cases)" in out


@pytest.mark.parametrize("name, preset", [("Qwen3 MoE 30B", "qwen3-30b-a3b"),
                                          ("Nemotron V3 Super 120B (26.02)", "nemotron-3-super"),
                                          ("Meta-Llama-3.1-70B", "llama3-70b"), ("DeepSeekV3 (w/o MTP)", "deepseek-v3"),
                                          ("GPT3-20B", None)])
def test_model_names_tables_use_resolve(name, preset):
    from pipesim.whatif.validation_generic import _model
    model = _model({"name": name, "seq_len": 4096}, "x")
    assert model.get("preset") == preset and (preset or model["num_layers"] == 44)     # GPT3-20B: NeMo's shape


def test_a_nemo_family_row_of_a_model_it_has_no_shape_for_is_read_as_a_new_row(tmp_path):
    """A NeMo 24.07 row naming a model outside the family's table (Mixtral) is mapped by the generic
    reading - its preset by name and NeMo's recipes - instead of failing."""
    path = tmp_path / "nemo.yaml"
    path.write_text("""
- id: nemo2407-Mixtral-8x7B-64gpu
  kind: training_throughput
  source: {ref: NVIDIA NeMo performance summary (NeMo 24.07 container), repo_path: "NVIDIA/NeMo (2024-09-09)"}
  model: {name: Mixtral-8x7B, seq_len: 4096}
  parallel: {tp: 1, pp: 4, cp: 1, vp: 8, dp: 16, ep: 8, global_batch: 256, micro_batch: 1}
  hardware: {gpu: H100-SXM5-80GB, num_gpus: 64}
  training: {precision: FP8}
  measured: {tokens_per_s_per_gpu: 8000}
""")
    [case] = load_cases(path)
    assert case.suite == "nemo2407"
    scenario = case_scenario(case)
    assert scenario["model"]["preset"] == "mixtral-8x7b" and scenario["training"]["fp8_recipe"] == "delayed"
    assert load_scenario(scenario).parallel.expert == 8


def test_a_family_row_naming_a_model_outside_its_table_is_read_as_a_new_row(tmp_path):
    """The torchtitan family knows five Llama models; a row of the same shape naming another is read
    by the generic mapping (torchtitan's stack, as its source names it) rather than refused."""
    path = tmp_path / "titan.yaml"
    path.write_text("""
- id: titan2024-qwen3-8b-64
  kind: training_throughput
  source: {ref: pytorch/torchtitan docs/performance.md (2024)}
  model: {name: qwen3-8b, seq_len: 8192}
  hardware: {gpu: A100-SXM4-80GB, num_gpus: 64}
  parallel: {fsdp: 64, local_batch: 1}
  training: {activation_checkpointing: full}
  measured: {tokens_per_s_per_gpu: 2000}
""")
    [case] = load_cases(path)
    scenario = case_scenario(case)
    assert case.suite == "titan2024" and scenario["model"]["preset"] == "qwen3-8b"
    assert (scenario["training"]["zero3_collectives"], scenario["training"]["recompute"]) == ("fsdp2", "full")


def test_the_gb200_deepseek_rows_name_their_scenario_and_score_megatrons_count():
    """mcoregb200: NVIDIA's final DeepSeek-V3 GB200 run as its reproduce guide states it, and the
    baseline through the row's `set` overrides; both in Megatron-Core's TFLOP/s (MLA counted)."""
    from pipesim.costs.summary import megatron_core_flops
    cases = {c.id: c for c in load_cases() if c.suite == "mcoregb200"}
    final, base = cases["mcoregb200-dsv3-final"], cases["mcoregb200-dsv3-baseline"]
    assert final.metric == base.metric == "megatron" and (final.target, base.target) == (970.01, 494.46)
    f, b = (load_scenario(case_scenario(c)) for c in (final, base))
    assert (f.training.moe_dispatcher, f.training.moe_dispatcher_sms, f.system.nvlink_domain) == ("hybridep", 32, 32)
    split = f.layers_per_stage()
    assert f.parallel.virtual_stages == 4 and len(split) == 32 and (split[0], split[-1]) == (1, 0)
    assert b.training.moe_dispatcher == "alltoall" and list(b.training.recompute_modules) == ["mlp", "mla_up_proj"]
    r = run_case(final, lambda s, mode: {"step_time_s": 10.0})
    assert r.predicted == pytest.approx(megatron_core_flops(f) / 10.0 / 256 / 1e12)
