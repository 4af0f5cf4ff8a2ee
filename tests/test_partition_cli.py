"""`pipesim partition` end to end: the seeds' report, JSON, and one-line errors (exit 2)."""
import json
from pathlib import Path

import pytest

from pipesim.cli import main

GPT2 = "scenarios/partition/gpt2_small_gtx1070.yaml"
SEED_LINES = ("number of cutting edges:", "sequential forward {", "sequential backward {", "parallel forward {",
              "parallel backward {", "theoretical sequential imbalance:", "theoretical parallel imbalance:",
              "topology aware imbalance is worst imbalance between 2 connected partitions",
              "communication volumes size of activations of each partition", "input size:", "receive time:",
              "send time:", "ideal theoretical latencies ms")


def test_scenario_report_and_json(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["partition", GPT2, "--stages", "4", "--recompute", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for line in SEED_LINES:
        assert line in text
    assert "backward times include recomputation" in text
    r = json.loads(out.read_text())
    assert r["stages"] == 4 and len(r["communication"]) == 4
    assert sum(r["layers_per_stage"]) == 12
    assert f"parallel.layers_per_stage: [{', '.join(map(str, r['layers_per_stage']))}]" in text
    # the split balances F + B; the head's cross-entropy is forward-heavy (costs/layers.py)
    assert r["imbalance"]["sequential"]["forward"] >= 0.75 and r["imbalance"]["stage_total"] >= 0.85


def test_cnn_preset_with_real_timing(capsys):
    assert main(["partition", "amoebanet-d", "--input", "cifar10", "--num-layers", "1", "--num-filters", "16",
                 "--batch", "2", "--stages", "2", "--real", "--runs", "1", "--classes", "10"]) == 0
    text = capsys.readouterr().out
    for line in SEED_LINES + ("real times are based on real measurements", "variance of real execution times",
                              "avg deviation from the mean of real execution times ms",
                              "real imbalance:", "real topology aware imbalance:", "ideal real latencies ms"):
        assert line in text


def test_module_source(capsys):
    assert main(["partition", "module:pipesim.partition.examples:skip_mlp", "--stages", "2"]) == 0
    assert "number of cutting edges: " in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["resnet18", "--stages", "2"], "expected a scenario .yaml, a CNN preset"),
    (["resnet50", "--stages", "0"], "--stages must be at least 1"),
    (["resnet50", "--stages", "8"], "8 stages need 8 GPUs"),
    (["resnet50", "--stages", "2", "--input", "mnist"], "--input mnist"),
    (["resnet50", "--stages", "2", "--system", "tpu"], "unknown system preset"),
    (["resnet50", "--stages", "2", "--memory-cap-GiB", "0.01"], "fits the memory cap"),
    (["module:no.such.module:f", "--stages", "2"], "cannot import no.such.module"),
    (["module:pipesim.partition.examples:nope", "--stages", "2"], "has no attribute 'nope'"),
    (["missing.yaml", "--stages", "2"], "file not found"),
    ([GPT2, "--stages", "2", "--granularity", "op"], "expected layer or block"),
    (["module:pipesim.partition.examples:broken", "--stages", "2"], "the factory raised RuntimeError"),
    (["resnet50", "--stages", "2", "--memory-cap-GiB", "-1"], "--memory-cap-GiB must be positive"),
    (["resnet50", "--stages", "2", "--microbatches", "0"], "--microbatches must be at least 1"),
    (["resnet50", "--stages", "2", "--gpu-speed", "1=0"], "speed factors must be positive"),
    (["resnet50", "--stages", "2", "--real", "--device", "tpu"], "expected cpu or cuda"),
    # the relaxed one-stage reload divided by the file's tensor size (ZeroDivisionError before)
    ([GPT2, "--stages", "2", "--set", "parallel.tensor=0"], "parallel.tensor: 0 is out of range"),
])
def test_errors_are_one_line(argv, needle, capsys):
    assert main(["partition", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_topology_aware_placement_across_nodes(tmp_path, capsys):
    # Two GTX 1070 boxes joined by 10 GbE: 8 stages must cross the slow link somewhere; the
    # placement search may only improve on keeping stage k on GPU k.
    aware, naive = tmp_path / "aware.json", tmp_path / "naive.json"
    common = ["partition", "resnet101", "--batch", "8", "--stages", "8", "--nodes", "2"]
    assert main(common + ["--json", str(aware)]) == 0
    assert main(common + ["--no-topology", "--json", str(naive)]) == 0
    a, n = json.loads(aware.read_text()), json.loads(naive.read_text())
    assert a["objective_s"] <= n["objective_s"] + 1e-12
    nodes = [p["node"] for p in a["placement"]]
    assert sorted(nodes) == [0] * 4 + [1] * 4
    assert max(a["theoretical"]["stage_total_s"]) == pytest.approx(a["objective_s"])
    capsys.readouterr()


def test_scenario_out_feeds_the_simulator(tmp_path, capsys):
    from pipesim import load_scenario
    from pipesim.costs import stage_costs
    out, js = tmp_path / "split.yaml", tmp_path / "r.json"
    assert main(["partition", GPT2, "--stages", "2", "--scenario-out", str(out), "--json", str(js)]) == 0
    r = json.loads(js.read_text())
    s = load_scenario(out)
    assert s.parallel.pipeline == 2 and s.parallel.data == 2
    assert list(s.layers_per_stage()) == r["layers_per_stage"]
    assert [c.forward for c in stage_costs(s)] == pytest.approx(r["theoretical"]["sequential"]["forward_s"])
    assert main(["partition", "resnet50", "--stages", "2", "--scenario-out", str(out)]) == 2
    assert "needs a scenario source" in capsys.readouterr().err


def test_scenario_out_elsewhere_keeps_the_sources_preset_files(tmp_path):
    """scenarios/gpt-13b-2-nodes.yaml names its model and system by files beside it: the scenario
    written into another folder points at them from there (it used to name them relative to the
    source, and did not load)."""
    from pipesim import load_scenario
    source = Path(GPT2).resolve().parent.parent / "gpt-13b-2-nodes.yaml"
    out = tmp_path / "elsewhere" / "split.yaml"
    assert main(["partition", str(source), "--stages", "2", "--scenario-out", str(out)]) == 0
    s = load_scenario(out)
    assert s.parallel.pipeline == 2 and s.model.num_layers == load_scenario(source).model.num_layers
