"""Validation suite: case transcription, Eq. 3 accounting, MAPE, the CLI."""
import pytest

from pipesim import load_scenario
from pipesim.whatif.validation import (EFFICIENCY_SETS, case_scenario, load_cases, mape, max_error,
                                       mean_signed, predicted_tflops, run_suite, summary_line, write_scenarios)


@pytest.fixture(scope="module")
def cases():
    return {c.id: c for c in load_cases()}


def test_suites_have_their_cases(cases):
    by_suite = {}
    for c in cases.values():
        by_suite[c.suite] = by_suite.get(c.suite, 0) + 1
    assert by_suite == {"sc21-table1": 10, "sc21-table2": 12, "megatron-v1": 12, "mcore-h100": 9, "nemo2407": 12,
                        "llama3-405b": 3, "korthikanti22": 9, "bridge2511": 23, "titan2024": 8, "bridge2604": 47,
                        "bridge2606": 31, "bridge2608": 18, "automodel": 9, "titan2025": 2, "sdpa2025": 24,
                        "mlperf": 33, "mlperflora": 21, "titan2412": 18, "bridgemem": 2,
                        "nemolongseq": 17, "titan2506": 8, "dsv3": 1, "megds": 3, "foundry": 216,
                        "mcoregb200": 2}
    assert all("Narayanan" in c.source for c in cases.values() if c.suite.startswith("sc21"))


def test_table1_case_transcribed(cases):
    s = load_scenario(case_scenario(cases["sc21-t1-145.6B"]))
    assert (s.parallel.tensor, s.parallel.pipeline, s.parallel.data, s.parallel.virtual_stages) == (8, 8, 24, 2)
    assert s.num_gpus == 1536 and s.system.num_nodes == 192
    assert s.training.schedule == "interleaved" and s.training.recompute == "full"
    assert s.num_microbatches == 48                          # as the paper's table states
    assert not s.training.overlap_grad_reduce                  # ddp_impl local
    assert (s.model.num_layers, s.model.hidden_size, s.model.ffn) == (80, 12288, 49152)


def test_small_gpu_counts_fit_one_node(cases):
    s = load_scenario(case_scenario(cases["megv1-mp-2B-DGX-2"]))
    assert s.system.gpus_per_node == 2 and s.system.num_nodes == 1 and "V100" in s.system.gpu.name
    s = load_scenario(case_scenario(cases["megv1-dp-1B"]))
    assert s.training.micro_batch_size == 16 and s.training.global_batch_size == 2048   # '16 (derived...)'


def test_eq3_reproduces_a_published_number(cases):
    """megv1-mp-1B-DGX-2: 1121 ms per iteration and 71.9 TFLOP/s in the README; Eq. 3 with
    recompute gives 8.06e13 FLOP per iteration, so 71.9 TF follows from the step time."""
    s = load_scenario(case_scenario(cases["megv1-mp-1B-DGX-2"]))
    assert predicted_tflops(s, 1.121) == pytest.approx(71.9, rel=0.005)
    s = load_scenario(case_scenario(cases["sc21-t1-1.7B"]))          # derived 3.53 s <-> 137 TF
    assert predicted_tflops(s, 3.53) == pytest.approx(137, rel=0.01)


def test_no_fitted_efficiency_set(cases):
    """The per-GPU matmul efficiencies once fitted on Table 1 are gone: cases use the presets'
    kernel curves and carry no GPU override beyond the published part's own memory size and
    bandwidth (titan2412's 96 GB HBM2e H100)."""
    from pipesim.whatif.validation_bridge import BRIDGE_NO_PRESET
    assert EFFICIENCY_SETS == {"preset": {}}
    for c in cases.values():
        if (c.id == "bridge2511-b200-deepseekv3-mtp-mx" or c.id.endswith("-ac-op") or "nemotron-3-super" in c.id
                or c.raw.get("model", {}).get("name") in BRIDGE_NO_PRESET):
            # refused with a note
            continue
        assert set(case_scenario(c)["system"].get("gpu", {})) <= {"memory_GiB", "hbm_bandwidth_GBps"}, c.id


def test_h100_families_state_their_assumptions(cases):
    s = load_scenario(case_scenario(cases["mcore-h100-177B"]))
    assert (s.parallel.tensor, s.parallel.pipeline, s.parallel.data) == (8, 6, 48)
    assert s.training.micro_batch_size == 1 and s.training.precision == "bf16"     # assumed, stated
    assert s.parallel.sequence_parallel and s.training.overlap_tp_comm and s.training.overlap_param_gather
    assert s.training.zero_stage == 1 and s.training.attention == "flash"
    # "pipeline-parallel communication" overlapped: the interleaved schedule, one layer a chunk
    assert (s.training.schedule, s.parallel.virtual_stages, s.training.p2p_sync) == ("interleaved", 16, False)
    s = load_scenario(case_scenario(cases["mcore-h100-32B"]))
    assert (s.training.schedule, s.parallel.virtual_stages) == ("1f1b", 1)
    s = load_scenario(case_scenario(cases["nemo2407-LLAMA2-70B-64gpu"]))
    assert s.training.precision == "fp8" and s.training.fp8_recipe == "delayed"
    assert (s.parallel.virtual_stages, s.training.schedule, s.model.num_kv_heads) == (20, "interleaved", 8)
def fixed_step(s, mode):
    return {"step_time_s": 2.0, "oom": False}


def test_mape_with_a_stub(cases):
    res = run_suite(["megatron-v1"], evaluator=fixed_step)["megatron-v1"]
    assert len(res) == 12
    r = next(r for r in res if r.case.id == "megv1-mp-1B-DGX-2")
    assert r.predicted == pytest.approx(71.9 * 1.121 / 2.0, rel=0.005)
    assert r.error_pct == pytest.approx(100 * (r.predicted / 71.9 - 1))
    assert mape(res) == pytest.approx(sum(abs(x.error_pct) for x in res) / 12)


def test_write_scenarios_keep_the_citation_and_the_metric(tmp_path):
    files = write_scenarios(tmp_path)
    # the dense cases, bridge2511, titan2024, MoE, bridge2604, bridge2606, bridge2608 (but its 5
    # rows without a preset), automodel, titan2025, sdpa2025, mlperf, mlperflora, titan2412, bridgemem,
    # nemolongseq, titan2506, dsv3, megds, foundry, mcoregb200
    assert len(files) == 67 + 23 + 8 + 9 + 47 + 31 + 13 + 9 + 2 + 24 + 33 + 21 + 18 + 2 + 17 + 8 + 1 + 3 + 216 + 2
    text = (tmp_path / "sc21-t1-1.7B.yaml").read_text()
    assert text.startswith("# sc21-t1-1.7B: Narayanan et al.") and "137 (TFLOP/s per GPU" in text
    s = load_scenario(tmp_path / "sc21-t1-1.7B.yaml")
    assert s.num_gpus == 32
    assert "# published: 16934 (tokens/s per GPU)" in (tmp_path / "nemo2407-LLAMA2-7B-8gpu.yaml").read_text()
    assert "# published: 536 (TFLOP/s per GPU as NeMo counts them" in \
        (tmp_path / "nemolongseq-llama2-7b-h100-1024k.yaml").read_text()
    moe = tmp_path / "moezoo-qwen3-235b-deepep-ep32-pp8.yaml"
    assert "step time 19.7 s" in moe.read_text() and load_scenario(moe).num_gpus == 256


def test_write_scenarios_only_the_suites_asked_for(tmp_path):
    files = write_scenarios(tmp_path, suites=["nemo2407"])
    assert len(files) == 12 and all(f.name.startswith("nemo2407-") for f in files)


def test_cli_unknown_suite_exits_2(capsys):
    from pipesim.cli import main
    assert main(["validate", "sc21-table9"]) == 2
    assert "unknown suite 'sc21-table9'" in capsys.readouterr().err


def test_tokens_metric_and_context_parallel_cases_with_a_stub(cases):
    res = run_suite(["nemo2407"], evaluator=fixed_step)["nemo2407"]
    r = next(r for r in res if r.case.id == "nemo2407-LLAMA2-7B-8gpu")
    assert r.predicted == pytest.approx(128 * 4096 / 2.0 / 8)          # tokens/s per GPU
    # the cp: 2 cases run with ring context parallelism (issue 15)
    cp = [r for r in res if r.case.raw["parallel"]["cp"] > 1]
    assert len(cp) == 2 and all(r.predicted is not None for r in cp)
    line = summary_line("nemo2407", res)
    assert f"max {max_error(res):.1f} %" in line and f"mean signed {mean_signed(res):+.1f} %" in line
    assert "12 of 12 cases" in line and ("met" in line or "MISSED" in line)


def test_zero3_latency_term_by_hand(cases):
    """96 layers x 12 tensors x 3 collectives x (N-1) hops x alpha, per micro-batch."""
    from pipesim.whatif.validation import zero3_per_tensor_report
    s = load_scenario(case_scenario(cases["sc21-t2-ZeRO-3-174.6B-1536gpu"]))
    rep = zero3_per_tensor_report(s, alpha=10e-6)
    assert rep["zero3_latency_s"] == pytest.approx(96 * 12 * 3 * 1535 * 10e-6)
    assert zero3_per_tensor_report(s)["zero3_latency_s"] == pytest.approx(96 * 12 * 3 * 1535 * s.system.inter_node.latency)


def test_nccl_bus_bandwidth_is_the_effective_link():
    """A ring all-reduce's bus bandwidth at a large message is the per-GPU link bandwidth times
    its efficiency: A800 NVLink 200 GB/s per direction x 0.8 = 160 GB/s (the maintainer's figure)."""
    from pipesim.whatif.validation_nccl import collective_results
    rows = {r["id"]: r for r in collective_results()}
    a800 = rows["nccl-a800-guidance"]
    assert a800["pred_GBps"] == pytest.approx(160, rel=0.002) and a800["measured_GBps"] == 160
    assert "not converted" in rows["nccl-h100pcie-2gpu"]["note"]


def test_heldout_cases_convert_as_the_paper_states(cases):
    full = load_scenario(case_scenario(cases["rac22-175B-full"]))
    present = load_scenario(case_scenario(cases["rac22-175B-present"]))
    assert (full.parallel.tensor, full.parallel.pipeline, full.parallel.virtual_stages) == (8, 8, 3)
    assert full.num_gpus == 64 and full.num_microbatches == 64 and full.training.schedule == "interleaved"
    assert (full.training.recompute, full.parallel.sequence_parallel) == ("full", False)
    assert (present.training.recompute, present.parallel.sequence_parallel) == ("selective", True)
    # the published figure is the iteration time, compared as tokens/s per GPU
    assert cases["rac22-175B-present"].target == pytest.approx(64 * 2048 / 13.75 / 64, rel=1e-3)
    res = run_suite(["korthikanti22"], evaluator=fixed_step)["korthikanti22"]
    r = next(r for r in res if r.case.id == "rac22-22B-full")
    assert r.predicted == pytest.approx(4 * 2048 / 2.0 / 8)


def test_error_budget_counts_only_the_first_ranks_step_ops():
    from pipesim.whatif.validation import Case, Result, error_budget
    case = Case("x", "korthikanti22", 100.0, "", {})
    rep = {"ranks": [{"compute_busy_s": 1.0, "stages": [0, 2]}], "cost_sources": {"gemm-curve": 1.0},
           "exposed_comm_s": {}, "stage_costs": [{"stage": k, "step_ops": {"OPTIMIZER": 0.1}} for k in range(4)]}
    lines = error_budget(Result(case, 110.0, 10.0, 1.0, report=rep))
    opt = next(line for line in lines if "OPTIMIZER" in line)
    assert "0.200 s" in opt                     # stages 0 and 2, not all four


def test_cli_analytic_engine_prints_the_table_without_an_error_budget(capsys):
    from pipesim.cli import main
    assert main(["validate", "sc21-table2", "--engine", "analytic"]) == 0
    out = capsys.readouterr().out
    assert "sc21-t2-ZeRO-3-174.6B-384gpu" in out and "MAPE" in out and "error budget" not in out


def test_accuracy_does_not_regress_on_the_families_that_meet_or_near_their_bars():
    """A guard, not a fit: nothing in pipesim is set from these cases (docs/COSTS.md). The bounds
    are the issue-13 bar where it is met (NeMo 24.07) and a margin above the session-7 figures
    (Korthikanti 2.7 %, SC'21 Table 1 5.5 %, Megatron-Core 7.7 %), so a change that makes the cost
    model worse across a family fails here instead of only in `pipesim validate`. Megatron-Core's
    bound moved from 10.0 to 10.5 % in session 38, when its pipelined rows took the interleaved
    schedule its README implies (families.py) and their signed error went from -4.9 to +4.8 %."""
    by = run_suite(["nemo2407", "korthikanti22", "sc21-table1", "mcore-h100"])
    assert mape(by["nemo2407"]) <= 8.0 and abs(mean_signed(by["nemo2407"])) <= 4.0
    assert mape(by["korthikanti22"]) <= 5.0
    assert mape(by["sc21-table1"]) <= 7.5
    assert mape(by["mcore-h100"]) <= 10.5


def test_table_prints_the_layout_as_simulated():
    """A converter may add what the source leaves out (Llama 3's 8 chunks per rank, micro-batch 1):
    the table shows the simulated layout, not the source's columns."""
    from pipesim.whatif.validation import format_results
    res = run_suite(["llama3-405b"], evaluator=fixed_step)
    row = next(x for x in format_results(res).splitlines() if "16384gpu-cp1-8k" in x)
    assert row.split()[1:8] == ["16384", "8", "1", "16", "128", "8", "1"]
    row = next(x for x in format_results(res).splitlines() if "16384gpu-cp16-128k" in x)
    assert row.split()[1:8] == ["16384", "8", "16", "16", "8", "8", "1"]


def test_the_summary_gives_every_family_its_bar_and_status():
    """One line per family at the end, its status the same as the family's own summary line."""
    from pipesim.whatif.validation import format_results, summary_line
    res = run_suite(["sc21-table1", "mcore-h100", "titan2024"], evaluator=fixed_step)
    text = format_results(res).splitlines()
    table = text[text.index("summary") + 2:]
    assert [x.split()[0] for x in table] == ["sc21-table1", "mcore-h100", "titan2024"]
    for line, suite in zip(table, ("sc21-table1", "mcore-h100")):
        status = summary_line(suite, res[suite]).rsplit(": ", 1)[1].rstrip(")")
        assert line.endswith(status) and f"{len(res[suite])}/{len(res[suite])}" in line
    assert table[2].endswith("held out (tests only)")


def test_llama3_fsdp_reduces_and_gathers_once_per_layer(cases):
    """Llama 3's FSDP (Sec. 3.3.2) communicates per wrapped unit: the converter's bucket is one
    layer's fp32 gradient, so every one-layer model chunk is one reduce-scatter and one
    all-gather (not 25 MB DDP buckets: ~500 of them per rank, each paying a 127-hop ring)."""
    from pipesim.costs import stage_costs
    from pipesim.costs.zero3_reuse import gradient_buckets
    s = load_scenario(case_scenario(cases["llama3-405b-16384gpu-cp1-8k"]))
    layers = [c for c in stage_costs(s) if c.layers == 1]
    assert len(layers) == 126
    assert {gradient_buckets(s.training, c) for c in layers} == {1}


@pytest.mark.parametrize("text, needle", [
    ("foo: 1\n", "expected a list of cases"),
    ("- 3\n", "entry 1: expected a mapping"),
    ("- id: sc21-t1-x\n  kind: training_throughput\n", "sc21-t1-x: measured.tflops_per_gpu: expected a positive number"),
    ("- id: sc21-t1-x\n  kind: training_throughput\n  measured: {tflops_per_gpu: abc}\n", "got 'abc'"),
    ("- id: x\n  kind: hardware_spec\n", "no training_throughput case of a family asked for"),
    ("- [1, 2\n", "YAML syntax error at line 2"),
    ("- id: moezoo-qwen3-235b-x\n  kind: training_throughput\n  measured: 5\n", "moezoo-qwen3-235b-x: measured"),
])
def test_a_malformed_cases_file_is_a_one_line_error(tmp_path, capsys, text, needle):
    """`pipesim validate --cases FILE`: a bad entry used to be a KeyError traceback, an unknown
    family an all-nan summary."""
    from pipesim.cli import main
    path = tmp_path / "cases.yaml"
    path.write_text(text)
    assert main(["validate", "--cases", str(path), "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and str(path) in err


def test_a_case_missing_a_converter_key_is_a_one_line_error(cases):
    import dataclasses
    from pipesim.errors import ScenarioError
    case = cases["nemo2407-LLAMA2-7B-8gpu"]
    parallel = {k: v for k, v in case.raw["parallel"].items() if k != "tp"}
    for raw, words in ((dict(case.raw, parallel=parallel), "missing key 'tp'"),
                       (dict(case.raw, parallel=dict(case.raw["parallel"], dp="four")), "wrong kind")):
        with pytest.raises(ScenarioError, match=words) as e:
            case_scenario(dataclasses.replace(case, raw=raw))
        assert str(e.value).startswith(case.id + ": ") and "\n" not in str(e.value)


def test_the_dsv3_row_runs_its_bundled_scenario_without_the_run_section(cases):
    import dataclasses
    from pipesim.errors import ScenarioError
    case = cases["dsv3-pretrain-2048xh800"]
    sc = case_scenario(case)
    assert "run" not in sc and sc["training"]["schedule"] == "dualpipe-v" and sc["parallel"]["expert"] == 64
    assert load_scenario(sc).num_gpus == 2048
    with pytest.raises(ScenarioError, match="dsv3-pretrain-2048xh800: scenario: expected a scenario file"):
        case_scenario(dataclasses.replace(case, raw=dict(case.raw, scenario="nope.yaml")))


def test_mcore_layers_that_do_not_split_run_the_plain_1f1b():
    from pipesim.whatif.families import mcore_virtual_stages
    assert mcore_virtual_stages(112, 16) == 7 and mcore_virtual_stages(96, 8) == 12
    assert mcore_virtual_stages(48, 1) == 1 and mcore_virtual_stages(90, 4) == 1
