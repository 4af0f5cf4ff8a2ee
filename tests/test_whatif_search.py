"""Search: the candidate space, screening, tie-breaking and the explanation (closed form as the
'simulator' so the test is fast and exact)."""
import pytest

from pipesim.cli import main
from pipesim.errors import ScenarioError
from pipesim.whatif.analytic import analytic_report
from pipesim.whatif.search import SearchSpace, candidates, prefer_simple, search, system_for

BASE = {"model": {"preset": "gpt2-medium"}, "system": {"preset": "dgx-a100-80gb"},
        "training": {"micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"}}


def test_system_resized():
    assert system_for("dgx-a100-80gb", 16) == {"preset": "dgx-a100-80gb", "num_nodes": 2}
    assert system_for({"preset": "dgx-a100-80gb"}, 4) == {"preset": "dgx-a100-80gb", "num_nodes": 1, "gpus_per_node": 4}
    with pytest.raises(ScenarioError, match="not a whole number of 8-GPU nodes"):
        system_for("dgx-a100-80gb", 12)


def test_candidates_respect_the_arithmetic():
    cands = candidates(BASE, 8)
    assert cands
    for c in cands:
        t, p, d, v = (c["parallel"][k] for k in ("tensor", "pipeline", "data", "virtual_stages"))
        assert t * p * d == 8
        lps = c["parallel"].get("layers_per_stage")      # gpt2-medium has 24 layers
        assert (lps is None) == (24 % (p * v) == 0)
        assert lps is None or (len(lps) == p * v and sum(lps) == 24)
        if p == 1:
            assert c["training"]["schedule"] == "1f1b" and c["training"]["activation_compression_bits"] == 16
        if d == 1:
            assert c["training"]["zero_stage"] == 0
        if c["training"]["schedule"] == "zb-v":
            assert v == 2
        if c["training"]["schedule"] == "interleaved":
            assert (64 // (c["training"]["micro_batch_size"] * d)) % p == 0      # M % P == 0


def test_fsdp_choices_of_the_base_apply_to_its_zero3_layouts_only():
    """A base scenario with FSDP settings still yields loadable ZeRO-0/1/2 layouts: the ZeRO-3-only
    keys are dropped there (the loader refuses them with another stage) and kept for ZeRO-3."""
    from pipesim.scenario.load import load_scenario
    fsdp = {**BASE, "training": dict(BASE["training"], zero_stage=3, reshard_after_forward=False,
                                     zero3_collectives="layer")}
    cands = [c for c in candidates(fsdp, 8) if c["parallel"]["data"] > 1]
    assert {c["training"]["zero_stage"] for c in cands} == {0, 1, 2, 3}
    seen = set()
    for c in cands[:40]:
        s = load_scenario(c)
        fsdp_layout = s.training.zero_stage == 3
        assert (s.training.zero3_collectives == "layer") == fsdp_layout
        assert s.training.reshard_after_forward != fsdp_layout
        seen.add(s.training.zero_stage)
    assert 3 in seen and len(seen) > 1       # both kinds of layout were loaded


def test_offload_axis_is_capped_at_a_chunks_layers_without_duplicates():
    """--offload 0,6,100 on gpt2-medium (24 layers): beyond a chunk's layers every value offloads
    them all, so it is one candidate, not several identical ones."""
    space = SearchSpace(tensor=(1,), pipeline=(4,), micro_batch=(1,), schedules=("1f1b", "interleaved"),
                        recompute=("none",), zero=(0,), compression=(16,),
                        extra={"training.offload_activation_layers": (0, 6, 100)})
    cands = candidates(BASE, 8, space)
    per_layout = {}
    for c in cands:
        v = c["parallel"]["virtual_stages"]
        per_layout.setdefault(v, []).append(c["training"]["offload_activation_layers"])
    assert per_layout[1] == [0, 6]                  # 6 layers per chunk: 6 and 100 are the same
    assert sorted(per_layout[2]) == [0, 3]          # 3 layers per chunk with two chunks
    assert sorted(per_layout[3]) == [0, 2]


def test_prefer_simple_breaks_ties_only():
    rows = [dict(throughput_samples_per_s=100.0, compression_bits=8, zero_stage=0, recompute="none", virtual_stages=1),
            dict(throughput_samples_per_s=99.8, compression_bits=16, zero_stage=0, recompute="none", virtual_stages=1),
            dict(throughput_samples_per_s=90.0, compression_bits=16, zero_stage=0, recompute="none", virtual_stages=1)]
    out = prefer_simple(rows)
    assert out[0]["compression_bits"] == 16 and out[0]["throughput_samples_per_s"] == 99.8
    assert out[2]["throughput_samples_per_s"] == 90.0


@pytest.fixture(scope="module")
def tight():
    """8 GPUs of 6 GiB: gpt2-medium without recomputation does not fit everywhere."""
    base = dict(BASE, system={"preset": "dgx-a100-80gb", "gpu": {"memory_GiB": 6}})
    space = SearchSpace(micro_batch=(1, 4), zero=(0, 1), compression=(16,))
    return search(base, 8, space, finalists=6, evaluator=analytic_report)


def test_search_winner_is_the_fastest_fitting(tight):
    assert tight.best is not None and tight.screened_oom > 0
    best = tight.best
    assert best["peak_memory_bytes"] <= 6 * 2**30
    assert all(best["throughput_samples_per_s"] >= r["throughput_samples_per_s"] * 0.995 for r in tight.finalists)
    assert tight.runner_up is not None
    core = lambda r: (r["tensor"], r["pipeline"], r["schedule"], r["virtual_stages"], r["micro_batch_size"])
    assert core(tight.runner_up) != core(best)


def test_explanation_names_winner_and_runner_up(tight):
    text = "\n".join(tight.explanation)
    assert text.startswith("winner: tensor")
    assert "runner-up:" in text and "% less throughput" in text
    assert "step breakdown" in text


def test_error_band_keeps_only_what_can_reach_the_top_k():
    from pipesim.whatif.search import ERROR_BAND, keep_for_simulation
    lo, hi = ERROR_BAND["zb-h1"]
    rows = [{"schedule": "zb-h1", "throughput_samples_per_s": x} for x in (100.0, 99.0, 90.0, 80.0)]
    top, rest = keep_for_simulation(rows, 1)
    assert [r["throughput_samples_per_s"] for r in top] == [100.0]
    # kept iff its best case x (1 + hi) reaches the best layout's worst case 100 (1 + lo)
    assert [r["throughput_samples_per_s"] for r in rest] == [x for x in (99.0, 90.0, 80.0) if x * (1 + hi) >= 100 * (1 + lo)]
    assert 0 < len(rest) < 3


def test_search_reports_each_stage_and_extra_axes_enter_the_space():
    space = SearchSpace(tensor=(1, 2), pipeline=(2,), micro_batch=(1,), zero=(0,), compression=(16,),
                        extra={"training.grad_bucket_MB": (25.0, 50.0)})
    cands = candidates(BASE, 8, space)
    assert sorted({c["training"]["grad_bucket_MB"] for c in cands}) == [25.0, 50.0]
    res = search(BASE, 8, space, finalists=2, evaluator=analytic_report)
    st = res.stages
    assert st["enumerated"] == len(cands) >= st["loadable"] >= st["fit memory (closed form)"]
    assert st["simulated"] == st["top-k (closed form)"] + st["within the error band"] == res.simulated


def test_selective_submodules_of_the_base_apply_to_its_selective_layouts_only():
    from pipesim.scenario.load import load_scenario
    base = {**BASE, "training": dict(BASE["training"], recompute="selective", recompute_modules=["mlp"])}
    cands = candidates(base, 8)
    assert {c["training"]["recompute"] for c in cands} >= {"none", "selective", "full"}
    for c in cands[:60]:
        s = load_scenario(c)
        assert s.training.recompute_modules == (("mlp",) if s.training.recompute == "selective" else ("core_attn",))


def test_context_modes_multiply_only_the_layouts_with_context_parallelism():
    """With CP the attention mode is a choice; without it, one candidate per layout."""
    from pipesim.whatif.search import CP_MODE
    base = {"model": {"preset": "llama2-7b", "seq_length": 32768, "num_layers": 4},
            "system": {"preset": "dgx-h100"}, "training": {"micro_batch_size": 1, "global_batch_size": 8}}
    plain = candidates(base, 8, SearchSpace(context=(1, 2)))
    both = candidates(base, 8, SearchSpace(context=(1, 2), extra={CP_MODE: ("ring", "a2a")}))
    one = [c for c in plain if c["parallel"]["context"] == 1]
    assert len([c for c in both if c["parallel"]["context"] == 1]) == len(one)
    two = [c for c in both if c["parallel"]["context"] == 2]
    assert {c["parallel"]["context_mode"] for c in two} == {"ring", "a2a"}
    assert len(two) == 2 * len([c for c in plain if c["parallel"]["context"] == 2])


def test_search_cli_refuses_an_unknown_context_mode(tmp_path, capsys):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["search", str(path), "--gpus", "8", "--context-modes", "ring,ulysses", "--no-files"]) != 0
    err = capsys.readouterr().err
    assert "--context-modes" in err and "'ulysses'" in err and "\n" == err[-1] and err.count("\n") == 1


def test_tensor_parallel_layouts_run_with_sequence_parallelism_unless_the_base_says_otherwise():
    """Megatron runs TP with sequence parallelism and requires it for MoE layers: a base that does
    not set the key gets it with every TP > 1 layout (none pruned for it); an explicit choice stays."""
    moe = {"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096, "num_layers": 4},
           "system": {"preset": "dgx-h100"}, "parallel": {"expert": 8},
           "training": {"micro_batch_size": 1, "global_batch_size": 16}}
    space = SearchSpace(tensor=(1, 2), pipeline=(1,), micro_batch=(1,), recompute=("none",), zero=(1,),
                        compression=(16,))
    cands = candidates(moe, 8, space)
    assert {(c["parallel"]["tensor"], c["parallel"]["sequence_parallel"]) for c in cands} == {(1, False), (2, True)}
    res = search(moe, 8, space, finalists=2, evaluator=analytic_report)
    assert not res.pruned and {r["tensor"] for r in res.finalists} == {1, 2}
    off = {**moe, "parallel": {"expert": 8, "sequence_parallel": False}}
    assert all(c["parallel"]["sequence_parallel"] is False for c in candidates(off, 8, space))
    assert any("sequence_parallel" in reason for reason in search(off, 8, space, finalists=2,
                                                                  evaluator=analytic_report).pruned)


def test_an_moe_search_names_the_expert_parallel_size_and_gives_each_memory_reason_once():
    from pipesim.whatif.search import describe
    moe = {"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096},
           "system": {"preset": "dgx-h100"}, "training": {"micro_batch_size": 1, "global_batch_size": 16}}
    space = SearchSpace(tensor=(1,), pipeline=(1,), micro_batch=(2,), zero=(0, 1, 2, 3), compression=(16,),
                        extra={"parallel.expert": (1, 2, 4, 8)})
    res = search(moe, 8, space, finalists=4, evaluator=analytic_report)
    ep = [r for r in res.finalists if r["expert"] > 1][0]
    assert f"data 8 (expert {ep['expert']})" in describe(ep) and "(expert" not in describe(dict(ep, expert=1))
    # 30B on 8 H100s needs full recompute and at least ZeRO-1 (EP 8; ZeRO-3 without EP, whose gathers
    # slow the compute beside them on Hopper: sim/interference.py): each simpler setting's reason
    # once, not once per EP
    reasons = [line for line in res.explanation if " because " in line]
    assert len(reasons) >= 3 and len({line.split(" needs ")[0] for line in reasons}) == len(reasons)


@pytest.mark.parametrize("overlap", ["moe_shared_expert_overlap", "moe_a2a_overlap"])
def test_a_base_with_an_moe_overlap_is_searched_not_refused(overlap):
    """The search probes model and system on a pure data-parallel layout; an overlap that needs
    expert parallelism must not make that probe (and with it the whole search) fail."""
    moe = {"model": {"preset": "nemotron-3-nano", "seq_length": 4096}, "system": {"preset": "dgx-h100"},
           "parallel": {"expert": 8},
           "training": {"micro_batch_size": 1, "global_batch_size": 32, overlap: True}}
    space = SearchSpace(tensor=(1,), pipeline=(1,), micro_batch=(1,), zero=(2,), compression=(16,),
                        recompute=("selective",))
    res = search(moe, 16, space, finalists=2, evaluator=analytic_report)
    assert len(res.finalists) == 1 and res.finalists[0]["expert"] == 8 and not res.pruned


def test_pipelines_that_do_not_divide_the_layers_get_megatrons_uneven_split():
    """DeepSeek-V3-like 61-layer models train with PP 8 or 16: the search offers the powers of two
    with the layers + embedding + loss dealt out evenly (Megatron's account-for-embedding/loss
    split), and every such candidate loads."""
    from pipesim.scenario.load import load_scenario
    from pipesim.scenario.stage_split import embedding_loss_split
    from pipesim.whatif.search import pipeline_sizes
    assert pipeline_sizes(61) == [1, 2, 4, 8, 16, 32, 61]
    assert embedding_loss_split(61, 16) == [3] + [4] * 14 + [2]
    assert embedding_loss_split(126, 128) == [0] + [1] * 126 + [0]     # Llama 3 405B's layout
    base = {"model": {"preset": "gpt2-medium", "num_layers": 13}, "system": {"preset": "dgx-a100-80gb"},
            "training": {"micro_batch_size": 1, "global_batch_size": 64}}
    space = SearchSpace(tensor=(1,), pipeline=(4,), micro_batch=(1,), recompute=("none",), zero=(0,),
                        compression=(16,))
    cands = candidates(base, 8, space)
    assert {(c["training"]["schedule"], c["parallel"]["virtual_stages"]) for c in cands} >= {("1f1b", 1), ("zb-v", 2)}
    for c in cands:
        s = load_scenario(c)
        assert sum(s.parallel.layers_per_stage) == 13
        assert s.parallel.layers_per_stage == tuple(embedding_loss_split(13, 4 * s.parallel.virtual_stages))


def test_on_nvl72_the_search_fits_the_nvlink_domain_and_runs_tensor_parallelism_across_trays():
    """256 GB200s are not a multiple of 72: the domain shrinks to racks of 16 trays (64 GPUs), said
    in one line; tensor sizes go up to the NVLink domain, not the 4-GPU tray."""
    from pipesim.whatif.search import nvlink_domain_note
    assert system_for("gb200-nvl72", 256) == {"preset": "gb200-nvl72", "num_nodes": 64, "nvlink_domain": 64}
    assert system_for({"preset": "gb200-nvl72", "nvlink_domain": 32}, 256)["nvlink_domain"] == 32
    assert system_for("gb200-nvl72", 288) == {"preset": "gb200-nvl72", "num_nodes": 72}
    assert "NVLink domains of 64 (racks with 16 trays in use)" in nvlink_domain_note("gb200-nvl72", 256)
    assert nvlink_domain_note("gb200-nvl72", 288) == "" and nvlink_domain_note("dgx-h100", 256) == ""
    base = {"model": {"preset": "llama3-8b", "num_layers": 8}, "system": {"preset": "gb200-nvl72"},
            "training": {"micro_batch_size": 1, "global_batch_size": 64}}
    space = SearchSpace(pipeline=(1,), micro_batch=(1,), recompute=("none",), zero=(1,), compression=(16,))
    assert {c["parallel"]["tensor"] for c in candidates(base, 64, space)} == {1, 2, 4, 8, 16}


def test_an_moe_search_without_expert_sizes_says_how_to_search_them(tmp_path, capsys):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump({"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096, "num_layers": 4},
                                    "system": {"preset": "dgx-h100"}, "parallel": {"expert": 8},
                                    "training": {"micro_batch_size": 1, "global_batch_size": 16}}))
    args = ["search", str(path), "--gpus", "8", "--no-files", "--no-progress", "--engine", "analytic",
            "--pipeline", "1", "--micro-batch", "1"]
    assert main(args) == 0
    assert "kept the scenario's expert 8; --expert" in capsys.readouterr().out
    assert main(args + ["--expert", "4,8"]) == 0
    assert "kept the scenario's expert" not in capsys.readouterr().out


def test_search_cli_takes_precisions_recompute_and_zero_axes(tmp_path, capsys):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump({"model": {"preset": "llama3-8b", "num_layers": 4}, "system": {"preset": "dgx-h100"},
                                    "training": {"micro_batch_size": 1, "global_batch_size": 16}}))
    args = ["search", str(path), "--gpus", "8", "--no-files", "--no-progress", "--engine", "analytic",
            "--pipeline", "1", "--micro-batch", "1"]
    assert main(args + ["--precisions", "bf16,fp8", "--recompute", "none", "--zero", "1"]) == 0
    out = capsys.readouterr().out
    assert " precision " in out.splitlines()[3] and "recompute none, ZeRO-1" in out
    assert {"bf16", "fp8"} <= {w for line in out.splitlines()[4:] for w in line.split()}
    for flag, value, words in (("--precisions", "bf16,int4", "'int4'"), ("--recompute", "some", "'some'"),
                               ("--zero", "5", "stages among 0, 1, 2, 3")):
        assert main(args + [flag, value]) != 0
        err = capsys.readouterr().err
        assert flag in err and words in err and err.count("\n") == 1


def test_the_winner_comes_with_the_set_arguments_that_reproduce_it(tmp_path):
    """`reproduce_args` lists only what differs from the base file (its values, its system preset's,
    the defaults); loading the base with them gives the winner's layout and step."""
    import pipesim
    from pipesim.scenario.load import load_scenario
    from pipesim.whatif.evaluate import simulate_report
    from pipesim.whatif.search import reproduce_args
    base = {"model": {"preset": "gpt2-medium", "num_layers": 13}, "system": {"preset": "dgx-h100", "num_nodes": 2},
            "parallel": {"tensor": 2, "pipeline": 1, "data": 8},
            "training": {"micro_batch_size": 1, "global_batch_size": 64, "recompute": "none"}}
    space = SearchSpace(tensor=(1,), pipeline=(4,), micro_batch=(2,), recompute=("none",), zero=(1,),
                        compression=(16,), schedules=("1f1b",))
    res = search(base, 16, space, finalists=2, evaluator=simulate_report)
    args = reproduce_args(res.best["scenario"], base)
    assert "--set parallel.layers_per_stage=auto" in args and "--set parallel.tensor=1" in args
    assert not any(a.startswith("--set system.") or "recompute" in a for a in args)     # unchanged keys left out
    again = load_scenario(base, [a.removeprefix("--set ") for a in args])
    assert pipesim.simulate(again, trace=False).step_time_s == pytest.approx(res.best["step_time_s"])
    # an FP8-only list a 16-bit candidate drops ([]) is the field's default (()): not an argument
    dropped = load_scenario(base, ["training.bf16_gemms=[]", "training.mxfp8_gemms=[]"])
    assert not [a for a in reproduce_args(dropped, base) if "gemms" in a]


@pytest.mark.parametrize("args,words", [
    (["--pipeline", "0"], "--pipeline 0: expected integers of at least 1"),
    (["--context", "0"], "--context 0: expected integers of at least 1"),
    (["--micro-batch", "2,x"], "--micro-batch 2,x: expected comma-separated integers"),
    (["--offload", "-2"], "--offload -2: expected integers of at least 0"),
])
def test_search_cli_size_lists_get_one_line_errors(tmp_path, capsys, args, words):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["search", str(path), "--gpus", "8", "--no-files", "--no-progress"] + args) != 0
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_search_says_whether_nothing_was_possible_or_nothing_fit(tmp_path, capsys):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    run = lambda *a: main(["search", str(path), "--no-files", "--no-progress", "--engine", "analytic", *a])
    assert run("--gpus", "8", "--tensor", "3") == 1
    assert "no layout to try: the sizes given do not divide 8 GPUs" in capsys.readouterr().out
    assert run("--gpus", "7") == 1                   # global batch 64 splits over no data size of 7
    assert "no layout is possible: every candidate was refused" in capsys.readouterr().out


def test_search_refuses_an_unknown_schedule_name_up_front(capsys):
    """`--schedules nope` was enumerated, refused per candidate and the search went on with what
    was left; a typo is now one line before any work, like --recompute's."""
    assert main(["search", "scenarios/gpt2-small-4gpu.yaml", "--gpus", "4", "--schedules", "1f1b,nope",
                 "--no-files"]) == 2
    captured = capsys.readouterr()
    assert "--schedules 1f1b,nope: unknown schedule 'nope'" in captured.err and captured.out == ""


def test_a_16_bit_candidate_of_an_fp8_base_drops_the_fp8_recipes_choices_and_reproduces():
    """--precisions bf16,fp8 on a base with FP8-only settings (FP8 attention and parameter gather,
    BF16 end layers): the bf16 candidates load without them instead of all being impossible, and
    the reproduce line of a bf16 layout turns them off."""
    import pipesim
    from pipesim.scenario.load import load_scenario
    from pipesim.whatif.search import FP8_ONLY, reproduce_args
    fp8 = {"model": {"preset": "llama3-8b", "num_layers": 4}, "system": {"preset": "dgx-h100"},
           "training": {"micro_batch_size": 1, "global_batch_size": 16, "precision": "fp8", "attention": "flash",
                        "fp8_attention": True, "fp8_param_gather": True, "bf16_layers_start": 1}}
    space = SearchSpace(tensor=(1,), pipeline=(1,), micro_batch=(1,), recompute=("none",), zero=(1,),
                        compression=(16,), extra={"training.precision": ("bf16", "fp8")})
    cands = candidates(fp8, 8, space)
    by = {c["training"]["precision"]: c for c in cands}
    assert set(by) == {"bf16", "fp8"}
    assert not set(FP8_ONLY) & set(by["bf16"]["training"]) and by["fp8"]["training"]["fp8_attention"]
    s16 = load_scenario(by["bf16"])
    args = [a.removeprefix("--set ") for a in reproduce_args(s16, fp8)]
    assert {"training.precision=bf16", "training.fp8_attention=false", "training.fp8_param_gather=false",
            "training.bf16_layers_start=0"} <= set(args)
    again = load_scenario(fp8, args)
    assert pipesim.simulate(again, trace=False).step_time_s == pytest.approx(pipesim.simulate(s16, trace=False).step_time_s)


def test_a_16_bit_candidate_drops_the_mxfp8_lm_head_too():
    from pipesim.scenario.load import load_scenario
    base = {"model": {"preset": "llama3-8b", "num_layers": 4}, "system": {"preset": "dgx-b200"},
            "training": {"micro_batch_size": 1, "global_batch_size": 16, "precision": "fp8", "fp8_recipe": "mxfp8",
                         "attention": "flash", "fp8_lm_head": True}}
    space = SearchSpace(tensor=(1,), pipeline=(1,), micro_batch=(1,), recompute=("none",), zero=(1,),
                        compression=(16,), extra={"training.precision": ("bf16", "fp8")})
    by = {c["training"]["precision"]: c for c in candidates(base, 8, space)}
    assert "fp8_lm_head" not in by["bf16"]["training"] and by["fp8"]["training"]["fp8_lm_head"]
    assert load_scenario(by["bf16"]).training.precision == "bf16"
