"""An output path a command cannot write gets one line naming it, exit 2 - never a traceback, and for
the long commands before the work starts (report/folder.py check_output; cli.py's OSError line)."""
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
