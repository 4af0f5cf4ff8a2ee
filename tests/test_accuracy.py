"""Accuracy beside a prediction: pipesim's measured error on the published runs of a scenario's
class (pipesim/report/accuracy.py), from a snapshot the validation writes and this test keeps fresh."""
import json

import pytest

from pipesim import load_scenario
from pipesim.report.accuracy import SNAPSHOT, accuracy_of, accuracy_text, class_of


def _s(preset, system="dgx-h100", **parallel):
    nodes = 4 if system.startswith("gb") else 2                  # 16 GPUs either way
    return load_scenario({"model": {"preset": preset, "seq_length": 4096}, "system": {"preset": system, "num_nodes": nodes},
                          "parallel": {"data": 16, **parallel},
                          "training": {"micro_batch_size": 1, "global_batch_size": 64}})


def test_a_scenario_is_classed_by_gpu_generation_and_model_kind():
    assert class_of(_s("llama3-8b")) == ("Hopper", "dense")
    assert class_of(_s("llama3-8b", "gb200-nvl72")) == ("Blackwell", "dense")
    assert class_of(_s("llama3-8b", "dgx-a100-80gb")) == ("Ampere", "dense")
    assert class_of(_s("qwen3-30b-a3b", expert=8)) == ("Hopper", "fine-grained MoE")     # 128 experts
    assert class_of(_s("mixtral-8x7b", expert=8)) == ("Hopper", "MoE")                    # 8 experts
    assert class_of(load_scenario("scenarios/gpt2-small-4gpu.yaml")) is None                # no kernel curve


def _row(i, family, generation, error, gpus=16, size=2.0, tensor=1, pipeline=1, kind="dense"):
    return {"id": i, "family": family, "generation": generation, "kind": kind, "error_pct": error, "gpus": gpus,
            "size": size, "tensor": tensor, "pipeline": pipeline}


def test_the_class_sums_up_its_runs_and_names_the_most_alike(tmp_path):
    path = tmp_path / "a.json"
    s = _s("llama3-8b")                                   # 32 layers x 4096^2 = 0.537 "size", 16 GPUs
    path.write_text(json.dumps({"cases": [
        _row("far", "f1", "Hopper", -4.0, gpus=1024, size=50.0),
        _row("near", "f2", "Hopper", 10.0, gpus=16, size=0.5),
        _row("near-but-tp8", "f2", "Hopper", 2.0, gpus=16, size=0.5, tensor=8),
        _row("other-gpu", "f2", "Ampere", 50.0),
        {"id": "broken", "family": "f3", "generation": "Hopper", "kind": "dense"}]}))   # no figures: ignored
    a = accuracy_of(s, path)
    assert a == {"class": "Hopper, dense", "runs": 3, "families": "f1, f2", "min_pct": -4.0, "max_pct": 10.0,
                 "mape_pct": pytest.approx(16 / 3), "nearest": "near", "nearest_gpus": 16, "nearest_pct": 10.0}
    text = accuracy_text(a)
    assert "on 3 published runs (f1, f2) pipesim was -4 .. +10 % (MAPE 5.3 %" in text
    assert text.endswith("the most alike, near on 16 GPUs: +10.0 %")       # MAPE 5.3 %: no hint
    wide = accuracy_text(dict(a, mape_pct=29.7))
    assert wide.startswith(text[:40]) and wide.endswith("pipesim fit (docs/FIT.md)")
    none = accuracy_of(_s("mixtral-8x7b", expert=8), path)
    assert none["runs"] == 0 and accuracy_text(none).startswith("no published run of this class (Hopper, MoE)")
    assert "pipesim fit" in accuracy_text(none)


def test_the_most_alike_run_has_the_scenarios_sequence_length(tmp_path):
    """Attention's share of a step grows with the sequence: of two runs alike but for it, the one at
    the scenario's length is named; a row of an older snapshot (no length) is not compared on it."""
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"cases": [dict(_row("short", "f", "Hopper", 2.0, size=0.5), seq=4096),
                                          dict(_row("long", "f", "Hopper", 40.0, size=0.5), seq=1048576)]}))
    assert accuracy_of(_s("llama3-8b"), path)["nearest"] == "short"                 # _s runs 4096 tokens
    long = load_scenario({"model": {"preset": "llama3-8b", "seq_length": 1048576},
                          "system": {"preset": "dgx-h100", "num_nodes": 2}, "parallel": {"data": 1, "context": 16},
                          "training": {"micro_batch_size": 1, "global_batch_size": 1}})
    assert accuracy_of(long, path)["nearest"] == "long"
    older = tmp_path / "q_old.json"                             # (rows are cached per path)
    older.write_text(json.dumps({"cases": [_row("old", "f", "Hopper", 2.0, size=0.5),
                                           dict(_row("long", "f", "Hopper", 40.0, size=0.5, gpus=64), seq=1048576)]}))
    assert accuracy_of(long, older)["nearest"] == "old"         # no length: GPUs alone decide


def test_fsdp2_runs_are_summed_apart_from_the_other_stacks(tmp_path):
    """The same MoE models measure far apart on Megatron-Core and on PyTorch FSDP2: a scenario gets
    the runs of its own stack, or, when none was published on it, the others' - said so."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"cases": [
        dict(_row("mega", "bridge", "Hopper", 120.0), stack=""),
        dict(_row("old-row", "zoo", "Hopper", 40.0)),                          # written before stacks
        dict(_row("fsdp", "automodel", "Hopper", -8.0), stack="PyTorch FSDP2")]}))
    fsdp2 = {"zero_stage": 3, "zero3_collectives": "fsdp2"}
    s = load_scenario({"model": {"preset": "llama3-8b", "seq_length": 4096}, "system": {"preset": "dgx-h100", "num_nodes": 2},
                       "parallel": {"data": 16}, "training": {"micro_batch_size": 1, "global_batch_size": 64, **fsdp2}})
    a = accuracy_of(s, path)
    assert (a["class"], a["runs"], a["max_pct"]) == ("Hopper, dense, PyTorch FSDP2", 1, -8.0)
    b = accuracy_of(_s("llama3-8b"), path)
    assert (b["class"], b["runs"], b["families"]) == ("Hopper, dense", 2, "bridge, zoo")
    only = tmp_path / "only.json"
    only.write_text(json.dumps({"cases": [dict(_row("mega", "bridge", "Hopper", 120.0), stack="")]}))
    c = accuracy_of(s, only)
    assert c["runs"] == 1 and c["class"] == "Hopper, dense (other stacks: none published on this one)"


def test_full_iteration_cuda_graph_runs_are_a_stack_of_their_own(tmp_path):
    """Megatron-Bridge's 26.06 / 26.08 MoE rows replayed as one CUDA graph sit within about +20 %;
    the same models with the host launching kernels at +50 % and more: a scenario that states its
    graphs gets the graphed runs, one that does not the others."""
    from pipesim.report.accuracy import STACK_GRAPHS, stack_of
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"cases": [
        dict(_row("eager-host", "bridge2604", "Hopper", 70.0, kind="fine-grained MoE"), stack=""),
        dict(_row("graphed", "bridge2606", "Hopper", 19.0, kind="fine-grained MoE"), stack=STACK_GRAPHS)]}))
    plain = _s("qwen3-30b-a3b", expert=8)
    graphed = load_scenario({"model": {"preset": "qwen3-30b-a3b", "seq_length": 4096},
                             "system": {"preset": "dgx-h100", "num_nodes": 2}, "parallel": {"data": 16, "expert": 8},
                             "training": {"micro_batch_size": 1, "global_batch_size": 64,
                                          "cuda_graphs": "full_iteration"}})
    assert (stack_of(plain), stack_of(graphed)) == ("", STACK_GRAPHS)
    assert accuracy_of(plain, path)["nearest"] == "eager-host"
    a = accuracy_of(graphed, path)
    assert (a["runs"], a["nearest"], a["class"]) == (1, "graphed", "Hopper, fine-grained MoE, " + STACK_GRAPHS)
    from pipesim.whatif.validation import case_scenario, load_cases
    cases = {c.id: c for c in load_cases()}
    assert case_scenario(cases["bridge2608-gb300-qwen3-30b-a3b-mxfp8"])["training"]["cuda_graphs"] == "full_iteration"
    assert "cuda_graphs" not in case_scenario(cases["bridge2608-gb300-nemotron-3-nano-mxfp8"])["training"]


def test_an_unreadable_snapshot_leaves_the_report_without_accuracy(tmp_path):
    for i, text in enumerate(("not json", "[]", '{"cases": 3}', '{"cases": [{"id": 1}]}')):
        path = tmp_path / f"bad{i}.json"          # (rows are cached per path)
        path.write_text(text)
        assert accuracy_of(_s("llama3-8b"), path)["runs"] == 0
    assert accuracy_of(_s("llama3-8b"), tmp_path / "missing.json")["runs"] == 0


def test_the_snapshot_is_what_the_validation_measures_now():
    """Every published run pipesim validates against, with the error it has today: a change to
    the model that moves a case must rewrite the snapshot (`pipesim validate --snapshot`)."""
    from pipesim.whatif.validation_snapshot import run_all
    fresh = {r["id"]: r for r in run_all(jobs=2)}
    kept = {r["id"]: r for r in json.loads(SNAPSHOT.read_text())["cases"]}
    assert set(fresh) == set(kept), "stale scenarios/validation/accuracy.json: run `pipesim validate --snapshot`"
    moved = {k: (kept[k]["error_pct"], fresh[k]["error_pct"]) for k in fresh
             if abs(kept[k]["error_pct"] - fresh[k]["error_pct"]) > 0.05 or kept[k]["kind"] != fresh[k]["kind"]}
    assert not moved, f"stale scenarios/validation/accuracy.json (run `pipesim validate --snapshot`): {moved}"
    assert {r["generation"] for r in fresh.values()} >= {"Ampere", "Hopper", "Blackwell"}


def test_simulate_shows_the_accuracy_of_its_class(tmp_path, capsys):
    from pipesim.cli import main
    assert main(["simulate", "scenarios/gpt3-175b-1024xa100.yaml", "--no-files", "--no-why",
                 "--json", str(tmp_path / "r.json")]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("accuracy ")]
    report = json.loads((tmp_path / "r.json").read_text())
    # Megatron-style A100 runs: SC'21 Tables 1-2, Korthikanti et al., the 2020 README's A100 rows
    assert len(line) == 1 and report["accuracy"]["class"] == "Ampere, dense" and report["accuracy"]["runs"] >= 35
    assert f"on {report['accuracy']['runs']} published runs" in line[0]
