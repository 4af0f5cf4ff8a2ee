"""The commands end to end: pipesim emulate (JSON report + Perfetto trace), pipesim compare (tables,
PNG, JSON) and pipesim crosscheck with a given profile."""
import json
import os

import pytest

pytest.importorskip("torch")

from pipesim.cli import main  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")
TINY = os.path.join(ROOT, "scenarios", "emulator", "tiny_1f1b.yaml")
PROFILE = os.path.join(ROOT, "traces", "cpu-crosscheck.json")


def test_emulate_then_compare_with_the_simulator(tmp_path, capsys):
    sim, emu, trace = tmp_path / "sim.json", tmp_path / "emu.json", tmp_path / "emu.trace.json"
    png, table = tmp_path / "cmp.png", tmp_path / "cmp.json"
    assert main(["simulate", TINY, "--no-files", "--events", "--json", str(sim)]) == 0
    assert main(["emulate", TINY, "--steps", "2", "--warmup", "1", "--json", str(emu), "--trace", str(trace)]) == 0
    rep = json.loads(emu.read_text())
    for key in ("step_time_s", "throughput_samples_per_s", "tokens_per_s", "model_tflops_per_gpu", "mfu",
                "bubble_fraction", "num_gpus", "peak_memory_bytes", "ranks"):
        assert key in rep
    assert rep["step_time_spread_s"]["n"] == 2 and len(rep["loss_per_step"]) == 3
    assert {r["rank"] for r in rep["ranks"]} == {0, 1}
    assert "traceEvents" in json.loads(trace.read_text())
    capsys.readouterr()
    assert main(["compare", str(sim), str(emu), "--plot", str(png), "--json", str(table)]) == 0
    out = capsys.readouterr().out
    assert "step time" in out and "peak memory" in out
    c = json.loads(table.read_text())
    kinds = {a["kind"] for a in c["actions"]}
    assert {"F", "B", "RECV_F", "RECV_B"} <= kinds
    assert [r["pp"] for r in c["ranks"]] == [0, 1]
    assert png.stat().st_size > 1000


def test_compare_rejects_reports_of_two_different_runs(tmp_path, capsys):
    """A simulation of one scenario against a report of another (4 GPUs x 8 micro-batches vs 2 x 4):
    per-rank errors of thousands of % used to come out; now one line says why they mean nothing."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["simulate", "scenarios/gpt2-small-4gpu.yaml", "--events", "--json", str(a), "--no-files"]) == 0
    assert main(["simulate", TINY, "--events", "--json", str(b), "--no-files"]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "reports of different runs (num_gpus 4 vs 2, num_microbatches 8 vs 4)" in err


def test_compare_rejects_a_trace_file(tmp_path, capsys):
    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": []}')
    assert main(["compare", str(bad), str(bad)]) == 2
    assert "Perfetto trace" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists(PROFILE), reason="no CPU profile in traces/")
def test_crosscheck_with_a_given_profile(capsys):
    assert main(["crosscheck", TINY, "--profile", PROFILE, "--steps", "1", "--warmup", "1"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "measured" in out
