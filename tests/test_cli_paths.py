"""Paths on the command line. An output path a command cannot write gets one line naming it, exit 2 -
never a traceback, and for the long commands before the work starts (report/folder.py
check_output; cli.py's OSError line); a `--set` path means the working directory
(scenario/file_paths.py from_working_dir)."""
import pytest

from pipesim.cli import main

MISSING = "/nonexistent-pipesim-folder/out"
SWEEP = ["sweep", "scenarios/sweeps/gpt3-175b-1024.yaml", "--grid", "scenarios/sweeps/gpt3-175b-1024-grid.yaml"]


@pytest.mark.parametrize("argv", [
    SWEEP + ["--out", MISSING + ".csv"],
    SWEEP + ["--plot", MISSING + ".png"],
    ["validate", "korthikanti22", "--json", MISSING + ".json"],
    ["validate", "korthikanti22", "--plot", MISSING + ".png"],
    ["validate", "korthikanti22", "--write-scenarios", "/proc/pipesim-cannot-create"],
    ["estimate", "scenarios/gpt2-small-4gpu.yaml", "--csv", MISSING + ".csv"],
    ["estimate", "scenarios/gpt2-small-4gpu.yaml", "--json", MISSING + ".json"],
    ["fit", "scenarios/fit/runs-example.yaml", "--json", MISSING + ".json"],
    ["simulate", "scenarios/gpt2-small-4gpu.yaml", "--no-files", "--json", MISSING + ".json"],
])
def test_an_unwritable_output_is_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pipesim {argv[0]}: error:")
    assert "/nonexistent-pipesim-folder" in err[0] or "/proc/pipesim-cannot-create" in err[0]


def test_long_commands_refuse_it_before_working(capsys):
    """sweep and validate check their output folders first: nothing is printed but the error."""
    for argv in (SWEEP + ["--out", MISSING + ".csv"], ["validate", "korthikanti22", "--json", MISSING + ".json"]):
        assert main(argv) == 2
        assert capsys.readouterr().out == ""


def test_a_set_path_typed_on_the_command_line_is_from_the_working_directory(tmp_path, monkeypatch, capsys):
    """`--set system.preset=my-cluster.yaml` (the file `pipesim fit --out` wrote, here) names the
    shell's folder; a path not found there keeps its meaning inside the scenario (its folder)."""
    from pathlib import Path
    scenario = str(Path(__file__).resolve().parent.parent / "scenarios" / "gpt2-small-4gpu.yaml")
    (tmp_path / "my-cluster.yaml").write_text("preset: dgx-h100\ngpus_per_node: 4\ngpu: {sustained_ratio: 0.7}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", scenario, "--no-files", "--set", "system.preset=my-cluster.yaml"]) == 0
    assert "H100" in capsys.readouterr().out
    assert main(["simulate", scenario, "--no-files", "--set", "system.preset=nope.yaml"]) == 2
    assert "preset file not found: " + str(Path(scenario).parent / "nope.yaml") in capsys.readouterr().err
