"""`pipesim search --systems`: one scenario searched on several system presets, compared by days,
GPU-hours, cost and energy, and the reproduce line of each system's winner."""
import re
from pathlib import Path

import pytest
import yaml

from pipesim.cli import main
from pipesim.errors import ScenarioError
from pipesim.whatif.hardware import on_system, parse_systems

BASE = {"model": {"preset": "llama3-8b", "num_layers": 4},
        "system": {"preset": "dgx-h100", "pod_gpus": 4096, "inter_node": {"bandwidth_GBps": 25}},
        "training": {"micro_batch_size": 1, "global_batch_size": 16}, "run": {"tokens": 1e11}}
ARGS = ["--no-progress", "--no-files", "--engine", "analytic", "--pipeline", "1", "--micro-batch", "1", "--gpus", "8"]


def test_systems_parse_with_optional_prices():
    assert parse_systems("dgx-h100=2.5, dgx-b200") == {"dgx-h100": 2.5, "dgx-b200": None}
    for bad, word in (("dgx-h900", "unknown system preset 'dgx-h900'"), ("dgx-h100,dgx-h100", "named twice"),
                      ("dgx-h100=-1", "positive price"), ("dgx-h100=abc", "positive price"), (" , ", "expected")):
        with pytest.raises(ScenarioError, match=re.escape(word)) as err:
            parse_systems(bad)
        assert "--systems" in str(err.value) and "\n" not in str(err.value)


def test_a_system_keeps_the_clusters_pods_and_drops_its_hardware_keys():
    raw, dropped = on_system(BASE, "dgx-b200", 4.0)
    assert raw["system"] == {"preset": "dgx-b200", "pod_gpus": 4096}
    assert dropped == ["inter_node"]
    assert raw["run"] == {"tokens": 1e11, "gpu_hour_usd": 4.0} and "gpu_hour_usd" not in BASE["run"]
    with pytest.raises(ScenarioError, match="run.tokens"):
        on_system(dict(BASE, run={}), "dgx-b200", 4.0)


def _table(out: str, names, priced: bool = True) -> dict:
    """The comparison table's rows by system name (the lines after it, e.g. the deadline, skipped)."""
    lines = out[out.index("best layout per system and cluster size"):].splitlines()
    assert lines[1].split()[:2] == ["system", "GPUs"] and ("cost $" in lines[1]) == priced and "MWh" in lines[1]
    return {line.split()[0]: line.split() for line in lines[2:] if line.split() and line.split()[0] in names}


def test_search_compares_systems_and_reproduces_each_winner(tmp_path, capsys):
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["search", str(path), *ARGS, "--systems", "dgx-h100=2,dgx-b200=4"]) == 0
    out = capsys.readouterr().out
    assert "system keys inter_node describe its own hardware" in out
    assert out.count("(to reproduce: the scenario with its system section reduced to the preset") == 2
    rows = _table(out, ("dgx-h100", "dgx-b200"))
    assert set(rows) == {"dgx-h100", "dgx-b200"}
    # each system's measured error on the published runs of its GPU generation, after the table
    assert "  accuracy on dgx-h100: Hopper, dense: on " in out and "  accuracy on dgx-b200: Blackwell, dense: on " in out
    step = {name: float(r[2]) for name, r in rows.items()}
    assert step["dgx-b200"] < step["dgx-h100"]               # the same model on 2.3x the tensor rate
    for name, r in rows.items():                               # cost = GPU-hours x the system's price
        price = {"dgx-h100": 2, "dgx-b200": 4}[name]             # (GPU-hours printed to the hour)
        assert float(r[9].replace(",", "")) == pytest.approx(float(r[8].replace(",", "")) * price, rel=1e-3,
                                                             abs=0.5 * price + 0.5)


def test_each_systems_winner_reruns_to_its_step_time(tmp_path, capsys):
    import json
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(dict(BASE, system={"preset": "dgx-a100-80gb"})))
    args = [a if a != "analytic" else "sim" for a in ARGS]
    assert main(["search", str(path), *args, "--systems", "dgx-h100,gb200-nvl72"]) == 0
    out = capsys.readouterr().out
    assert "(to reproduce" not in out
    rows = _table(out, ("dgx-h100", "gb200-nvl72"), priced=False)
    lines = [x.strip() for x in out.splitlines() if x.strip().startswith("pipesim simulate")]
    assert [re.search(r"--set system.preset=(\S+)", x).group(1) for x in lines] == ["dgx-h100", "gb200-nvl72"]
    for line, name in zip(lines, ("dgx-h100", "gb200-nvl72")):
        argv = ["simulate", str(path), "--no-files", "--no-why", "--json", str(tmp_path / "r.json")]
        for s in line.split("--set ")[1:]:
            argv += ["--set", s.strip()]
        assert main(argv) == 0
        capsys.readouterr()
        report = json.loads((tmp_path / "r.json").read_text())
        assert report["step_time_s"] == pytest.approx(float(rows[name][2]), rel=2e-3)


def test_deadline_across_systems_ranks_by_cost_and_needs_prices(tmp_path, capsys):
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(dict(BASE, system={"preset": "dgx-h100"})))
    assert main(["search", str(path), *ARGS, "--systems", "dgx-h100,dgx-b200", "--deadline-days", "99"]) != 0
    err = capsys.readouterr().err
    assert "give each a price" in err and err.count("\n") == 1
    assert main(["search", str(path), *ARGS, "--systems", "dgx-h100=2,dgx-b200=9", "--deadline-days", "1e6"]) == 0
    out = capsys.readouterr().out
    rows = _table(out, ("dgx-h100", "dgx-b200"))
    cost = {name: float(r[9].replace(",", "")) for name, r in rows.items()}
    cheapest = min(cost, key=cost.get)
    assert f"GPUs of {cheapest} (" in out.splitlines()[-1] and "the cheapest of the 2" in out.splitlines()[-1]


def test_a_single_search_names_its_winners_measured_accuracy(tmp_path, capsys):
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(dict(BASE, system={"preset": "dgx-a100-80gb"})))
    assert main(["search", str(path), *ARGS]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  accuracy: ")]
    assert len(line) == 1 and line[0].startswith("  accuracy: Ampere, dense: on ") and "the most alike" in line[0]


def test_search_sizes_a_system_preset_file_by_its_own_nodes(tmp_path, capsys):
    """A scenario whose system preset is a file (e.g. one `pipesim fit --out` wrote) over a 4-GPU-tray
    system: 16 GPUs are 4 trays, not 2 eight-GPU nodes (the search used to assume 8 per node)."""
    (tmp_path / "my-gb200.yaml").write_text("preset: gb200-nvl72\ngpu: {sustained_ratio: 0.75}\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: {preset: llama3-8b}\nsystem: {preset: my-gb200.yaml, num_nodes: 2}\n"
                        "training: {micro_batch_size: 1, global_batch_size: 64, precision: bf16}\n")
    assert main(["search", str(scenario), "--gpus", "16", "--engine", "analytic", "--tensor", "1",
                 "--pipeline", "1", "--no-files"]) == 0
    out = capsys.readouterr().out
    assert "--set system.num_nodes=4" in out and "no layout is possible" not in out


def test_search_loads_a_scenarios_preset_files_from_any_working_directory(tmp_path, monkeypatch, capsys):
    """scenarios/gpt-13b-2-nodes.yaml names its model and system by files next to it; a search run
    from another folder used to look for them there (every cluster size "not searched")."""
    monkeypatch.chdir(tmp_path)
    scenario = str(Path(__file__).resolve().parent.parent / "scenarios" / "gpt-13b-2-nodes.yaml")
    assert main(["search", scenario, "--gpus", "16,32", "--engine", "analytic", "--tensor", "1,8",
                 "--pipeline", "1", "--no-files"]) == 0
    out = capsys.readouterr().out
    assert "not searched" not in out and "no layout fits" not in out


def test_systems_take_a_system_preset_file_beside_the_presets(tmp_path, capsys):
    """`--systems my-h100.yaml,dgx-h100`: a team's fitted cluster (`pipesim fit --out`) against a
    preset; the file is named by its file name in the table, and a missing one in one line."""
    fitted = tmp_path / "my-h100.yaml"
    fitted.write_text("preset: dgx-h100\ngpu: {sustained_ratio: 0.7}\n")
    assert parse_systems(f"{fitted}=2.5,dgx-h100") == {str(fitted): 2.5, "dgx-h100": None}
    with pytest.raises(ScenarioError, match="system preset file not found"):
        parse_systems(str(tmp_path / "nope.yaml"))
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: {preset: llama3-8b}\nsystem: {preset: dgx-h100, num_nodes: 2}\n"
                        "training: {micro_batch_size: 1, global_batch_size: 64, precision: bf16}\n")
    assert main(["search", str(scenario), "--gpus", "16", "--systems", f"{fitted},dgx-h100", "--engine", "analytic",
                 "--tensor", "1", "--pipeline", "1", "--context", "1", "--no-files"]) == 0
    table = capsys.readouterr().out.split("best layout per system and cluster size")[1]
    rows = {line.split()[0]: float(line.split()[2]) for line in table.splitlines()[2:4]}
    assert set(rows) == {"my-h100.yaml", "dgx-h100"}
    assert rows["my-h100.yaml"] > rows["dgx-h100"]          # the slower sustained rate, the longer step


def test_search_and_sweep_take_set_overrides_and_refuse_a_malformed_base(tmp_path, capsys):
    """`--set` on search and sweep (as on simulate): the search runs on the overridden scenario and
    its reproduce line carries the override; a base whose section is malformed gets the loader's
    one-line error naming the file and the key (it was a TypeError / ValueError traceback)."""
    import csv
    import json
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    args = [a if a != "analytic" else "sim" for a in ARGS]
    assert main(["search", str(path), *args, "--set", "model.seq_length=2048"]) == 0
    out = capsys.readouterr().out
    line = next(x.strip() for x in out.splitlines() if x.strip().startswith("pipesim simulate"))
    assert line.split()[3:5] == ["--set", "model.seq_length=2048"]
    best = float(re.search(r"step ([\d.]+) s", out).group(1))
    argv = ["simulate", str(path), "--no-files", "--no-why", "--json", str(tmp_path / "r.json")]
    for s in line.split("--set ")[1:]:
        argv += ["--set", s.strip()]
    assert main(argv) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "r.json").read_text())["step_time_s"] == pytest.approx(best, abs=6e-4)   # printed to 1 ms
    grid = tmp_path / "grid.yaml"
    grid.write_text("training.micro_batch_size: [1]\n")
    rows = tmp_path / "rows.csv"
    steps = []
    for seq in (1024, 2048):
        assert main(["sweep", str(path), "--grid", str(grid), "--no-files", "--no-progress", "--jobs", "1",
                     "--out", str(rows), "--set", f"model.seq_length={seq}"]) == 0
        capsys.readouterr()
        steps.append(float(next(csv.DictReader(rows.open()))["step_time_s"]))
    assert steps[1] > 1.1 * steps[0]              # twice the tokens per step: the override is applied
    for section, value in (("training", "80GB"), ("system", float("nan"))):
        path.write_text(yaml.safe_dump(dict(BASE, **{section: value})))
        assert main(["search", str(path), *ARGS]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"pipesim search: error: {path}: {section}: expected") and "\n" not in err
        # a sweep merged its grid into the string, and every row read `training.preset: unknown key`
        assert main(["sweep", str(path), "--grid", str(grid), "--no-files", "--no-progress", "--jobs", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"pipesim sweep: error: {path}: {section}: expected a mapping") and "\n" not in err
