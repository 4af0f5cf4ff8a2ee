"""`pipesim calibrate` on CPU (torch, gloo) and profiles driving the cost model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pipesim.cli import main  # noqa: E402
from pipesim.costs.profile import OPS, load_profile, profile_from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "emulator" / "tiny_1f1b.yaml"


def test_cli_quick_cpu_profile_covers_every_op(tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "--device", "cpu", "--quick", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "done" in captured.err and "[" in captured.err          # the progress bar
    assert f"wrote {out}" in captured.out
    raw = json.loads(out.read_text())
    assert raw["version"] == 1 and raw["device"]["kind"] == "cpu" and raw["device"]["threads"] == 1
    for key in ("torch", "triton", "python", "date", "name"):
        assert raw["device"][key]
    p = load_profile(out)
    assert p.ops() == set(OPS), set(OPS) - p.ops()
    for m in p.measurements:
        assert 0 < m.p10_s <= m.median_s <= m.p90_s and m.n >= 1
        assert p.lookup(m.op, **m.shape) == (m.median_s, "measured")
    g = next(m for m in p.measurements if m.op == "gemm")
    s = g.shape
    assert g.tflops == pytest.approx(2 * s["m"] * s["n"] * s["k"] / g.median_s / 1e12)
    c = next(m for m in p.measurements if m.op == "copy")
    assert c.gbps == pytest.approx(2 * c.shape["bytes"] / c.median_s / 1e9)
    # two processes really exchanged data: a 256x larger message is not 256x slower (latency
    # dominates small messages), so its achieved bandwidth is higher
    sr = sorted((m.shape["bytes"], m) for m in p.measurements if m.op == "sendrecv")
    assert sr[-1][0] >= 256 * sr[0][0]
    assert sr[-1][1].gbps > sr[0][1].gbps
    assert sr[0][1].gbps == pytest.approx(sr[0][0] / sr[0][1].median_s / 1e9)
    assert p.achieved("matmul") > 0 and p.achieved("p2p") > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_gpu_is_a_clear_error(tmp_path, capsys):
    assert main(["calibrate", "--device", "cuda", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "Traceback" not in err
    assert not (tmp_path / "x.json").exists()


def _tiny():
    from pipesim import load_scenario
    return load_scenario(TINY)


def test_scenario_plan_has_every_required_measurement():
    from pipesim.calibrate.run import plan
    from pipesim.costs import required_measurements
    s = _tiny()
    items, notes = plan("cpu", s)
    keys = {(op, tuple(sorted(sh.items()))) for op, sh in items}
    for op, sh in required_measurements(s):
        assert (op, tuple(sorted(sh.items()))) in keys, (op, sh)
    assert any(op == "copy" for op, _ in items) and not notes
    # --grid adds the default grid on top (a 512^3 fp32 GEMM is in the CPU grid, not the scenario)
    with_grid, _ = plan("cpu", s, grid=True)
    big = ("gemm", dict(m=512, n=512, k=512, dtype="fp32"))
    assert big in with_grid and big not in items and len(with_grid) > len(items)


def test_one_profile_entry_moves_the_stage_costs():
    # Every lookup the tiny scenario needs at 1 ms; then layer_norm_fwd +0.5 s. Stage 0 holds
    # 2 layers with 2 layer norms each: its forward grows by 4 · 0.5 = 2.0 s; stage 1 also has
    # the final layer norm (same shape): 5 · 0.5 = 2.5 s. Backward does not move.
    from pipesim.costs import required_measurements, stage_costs
    s = _tiny()
    doc = {"version": 1, "device": {"name": "t", "kind": "cpu"},
           "measurements": [{"op": op, "shape": sh, "median_s": 1e-3} for op, sh in required_measurements(s)]}
    before = stage_costs(s, profile_from_dict(doc))
    for m in doc["measurements"]:
        if m["op"] == "layer_norm_fwd":
            m["median_s"] += 0.5
    after = stage_costs(s, profile_from_dict(doc))
    assert [a.forward - b.forward for a, b in zip(after, before)] == pytest.approx([2.0, 2.5])
    assert [a.backward - b.backward for a, b in zip(after, before)] == pytest.approx([0.0, 0.0])
    assert before[0].sources.get("measured", 0) > 0


def test_calibrated_tiny_scenario_gives_measured_stage_costs(tmp_path):
    from pipesim.calibrate.run import calibrate
    from pipesim.costs import stage_costs
    s = _tiny()
    profile = calibrate("cpu", scenario=s, quick=True, comm=False)
    path = tmp_path / "tiny.json"
    profile.save(path)
    measured = stage_costs(s, load_profile(path))
    roofline = stage_costs(s)
    assert all(c.sources.get("measured", 0) > 0 for c in measured)
    assert all("measured" not in c.sources for c in roofline)
    assert [c.forward for c in measured] != [c.forward for c in roofline]


def test_calibrate_scenario_takes_set_overrides(tmp_path, capsys):
    """`calibrate --scenario S --set K=V` measures the shapes of the overridden scenario (as every
    command reading a scenario takes --set); --set without --scenario is a one-line error."""
    from pipesim import load_scenario
    out = tmp_path / "p.json"
    assert main(["calibrate", "--device", "cpu", "--quick", "--no-comm", "--scenario", str(TINY),
                 "--set", "model.seq_length=24", "--out", str(out)]) == 0
    capsys.readouterr()
    tiny = load_scenario(TINY, ["model.seq_length=24"])
    rows = {m["shape"].get("rows") for m in json.loads(out.read_text())["measurements"] if m["op"] == "layer_norm_fwd"}
    assert tiny.training.micro_batch_size * 24 in rows
    assert main(["calibrate", "--device", "cpu", "--set", "model.seq_length=24", "--out", str(out)]) == 2
    assert "needs --scenario" in capsys.readouterr().err
