"""The crosscheck's measurement pieces: the seeded suite grid, the verdict (pass / fail / refuse to
judge), the host model (alpha-beta fit, what it changes in a scenario and in a prediction), and one
tiny crosscheck end to end with calibration inside the ranks."""
import json
import os

import pytest

from pipesim.calibrate.host import fit_link, with_host_model
from pipesim.commands.crosscheck import median_interval_pct, repeated_verdict, verdict
from pipesim.emulator.suite import LAYOUTS, draw_case, flops_per_step, suite_cases, MAX_STEP_GFLOP

ROOT = os.path.join(os.path.dirname(__file__), "..")
TINY = os.path.join(ROOT, "scenarios", "emulator", "tiny_1f1b.yaml")


def _value(case, key):
    return next(o.split("=", 1)[1] for o in case["overrides"] if o.startswith(key + "="))


def test_suite_grid_is_seeded_covers_every_layout_and_stays_in_range():
    a, b, c = suite_cases(0), suite_cases(0), suite_cases(1)
    assert a == b and a != c
    assert {x["layout"] for x in a} == {name for name, _ in LAYOUTS}
    for case in a + c:
        h, heads = int(_value(case, "model.hidden_size")), int(_value(case, "model.num_attention_heads"))
        assert 64 <= h <= 512 and 2 <= heads <= 8 and h % heads == 0
        assert 32 <= int(_value(case, "model.seq_length")) <= 256
        assert 2 <= int(_value(case, "model.num_layers")) <= 8
        assert 1 <= int(_value(case, "training.micro_batch_size")) <= 8
        assert 512 <= int(_value(case, "model.vocab_size")) <= 4096
        if case["layout"] == "tp2":
            assert heads % 2 == 0


def test_suite_cases_load_and_plan(monkeypatch):
    from pipesim.emulator import prepare
    from pipesim.emulator.model import check_supported
    from pipesim.emulator.suite import BASE
    from pipesim.emulator.worker import plan_for
    for i in range(len(LAYOUTS)):
        s = prepare(BASE, draw_case(3, i)["overrides"])
        check_supported(s)
        plan_for(s)
        assert s.num_gpus == 2
        m = s.model
        assert flops_per_step(m.hidden_size, m.seq_length, m.num_layers, m.vocab_size,
                              s.training.global_batch_size) <= MAX_STEP_GFLOP * 1e9


def _emu(times, cont=1.0):
    med = sorted(times)[(len(times) - 1) // 2]
    mean = sum(times) / len(times)
    std = (sum((t - mean) ** 2 for t in times) / len(times)) ** 0.5
    return {"step_time_s": med, "step_time_spread_s": {"n": len(times), "std": std, "mean": mean,
                                                         "min": min(times), "max": max(times)},
            "events": []}


def _cmp(err):
    return {"step": {"step_time_error_pct": err}}


def test_verdict_passes_fails_or_refuses_by_error_and_spread():
    steady = _emu([1.0, 1.0, 1.001, 0.999, 1.0, 1.0])
    noisy = _emu([0.7, 1.3, 0.8, 1.2, 1.0, 1.1])
    assert median_interval_pct(steady) < 0.2
    assert verdict(_cmp(3.0), steady, 10)["status"] == "pass"
    assert verdict(_cmp(-14.0), steady, 10)["status"] == "fail"
    v = verdict(_cmp(8.0), noisy, 10)
    assert v["status"] == "not judged" and "uncertain" in v["message"]
    assert verdict(_cmp(3.0), _emu([1.0]), 10)["status"] == "not judged"


def test_one_stalled_step_does_not_widen_the_median_interval():
    from pipesim.emulator.results import _mad
    times = [0.090, 0.096, 0.093, 0.097, 0.092, 0.092, 0.091, 0.092, 0.090, 0.091, 0.092, 0.232]
    emu = _emu(times)
    assert median_interval_pct(emu) > 25                 # the standard deviation: +-30 %
    emu["step_time_spread_s"]["mad"] = _mad(times)
    assert median_interval_pct(emu) < 2.5                # the MAD: the eleven steady steps
    assert _mad([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0


def test_run_to_run_verdict_refuses_when_runs_disagree():
    single = {"status": "pass"}
    assert repeated_verdict([2.0, 3.0, 4.0], 10, single)["status"] == "pass"
    assert repeated_verdict([-25.0, -22.0, -30.0], 10, single)["status"] == "fail"
    v = repeated_verdict([-24.5, 6.7, -3.1], 10, single)          # the shape A runs
    assert v["status"] == "not judged" and v["error_pct"] == -3.1 and v["spread_pct"] == pytest.approx(15.6)


def test_alpha_beta_fit_recovers_latency_and_bandwidth():
    pts = [(n, 50e-6 + n / 2e9) for n in (4096, 1 << 20, 1 << 23)]
    lat, bw = fit_link(pts)
    assert lat == pytest.approx(50e-6, rel=1e-6) and bw == pytest.approx(2e9, rel=1e-6)
    assert fit_link([(4096, 1e-4)]) is None


def test_alpha_beta_fit_survives_a_loaded_size_and_noise_above_the_byte_term():
    """One size hit by a burst of load does not move the fit much; when the times do not grow
    with the bytes at all the link is still fitted, its bandwidth bounded by the noise."""
    pts = [(n, 50e-6 + n / 2e9) for n in (4096, 1 << 16, 1 << 20, 1 << 23)]
    pts[1] = (pts[1][0], pts[1][1] * 30)                       # a loaded 64 KiB point
    lat, bw = fit_link(pts)
    assert lat == pytest.approx(50e-6, rel=0.05) and bw == pytest.approx(2e9, rel=0.05)
    flat = [(4096, 3e-4), (1 << 16, 2e-4), (1 << 20, 2.5e-4), (1 << 23, 1e-4)]
    lat, bw = fit_link(flat)
    assert 0 < lat <= 3e-4 and 0 < bw < float("inf")
    assert (1 << 23) / bw <= 1e-4                               # byte term within the noise


def _profile(tmp_path, ranks, cores):
    host = {"layout": {"cores": cores, "ranks": ranks, "threads_per_rank": 1}, "action_s": 2e-5,
            "kernel_launch_s": 30e-6, "p2p": {"latency_s": 80e-6, "bandwidth_Bps": 1.5e9},
            }
    meas = [{"op": "gemm", "shape": {"m": 64, "n": 64, "k": 64, "dtype": "fp32"}, "median_s": 1e-5}]
    path = tmp_path / f"p{ranks}.json"
    path.write_text(json.dumps({"version": 1, "device": {"name": "cpu-core-fp32", "kind": "cpu", "host": host},
                                "measurements": meas}))
    return str(path)


def test_host_model_replaces_the_cpu_systems_host_terms(tmp_path):
    from pipesim.emulator import prepare
    s = prepare(TINY, [f"costs.profile={_profile(tmp_path, 2, 2)}"])
    h = with_host_model(s)
    assert h.system.gpu.kernel_launch == pytest.approx(30e-6)
    assert h.system.intra_node.bandwidth == pytest.approx(1.5e9)
    assert h.system.heterogeneity.rank_speed == {}
    over = with_host_model(prepare(TINY, [f"costs.profile={_profile(tmp_path, 4, 2)}"]))
    assert set(over.system.heterogeneity.rank_speed.values()) == {0.5}     # 4 ranks on 2 cores
    assert with_host_model(prepare(TINY)) == prepare(TINY)                 # no profile: unchanged


def test_host_model_changes_the_prediction_per_action(tmp_path):
    from pipesim import simulate
    from pipesim.emulator import prepare
    base = simulate(prepare(TINY, [f"costs.profile={_profile(tmp_path, 2, 2)}"]))
    slow = json.loads(open(_profile(tmp_path, 2, 2)).read())
    slow["device"]["host"]["action_s"] = 1e-3
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow))
    more = simulate(prepare(TINY, [f"costs.profile={path}"]))
    fwd = lambda rep: [e for e in rep.events if e.kind == "F"][0]      # noqa: E731
    assert (fwd(more).end - fwd(more).start) - (fwd(base).end - fwd(base).start) == pytest.approx(1e-3 - 2e-5, rel=1e-6)


@pytest.mark.slow
def test_crosscheck_calibrates_inside_the_ranks(tmp_path):
    pytest.importorskip("torch")
    from pipesim.commands.crosscheck import crosscheck
    out = tmp_path / "prof.json"
    sim, emu, c = crosscheck(TINY, steps=2, warmup=1, quick=True, calibrate_out=str(out))
    prof = json.loads(out.read_text())
    host = prof["device"]["host"]
    assert host["layout"]["ranks"] == 2 and host["kernel_launch_s"] > 0
    assert {m["op"] for m in prof["measurements"]} >= {"gemm", "bmm", "softmax_fwd", "cross_entropy_fwd"}
    # in-model costs pool the trace before each of the 2 timed steps with the last calibration's own
    assert {m.get("rounds") for m in prof["measurements"] if m.get("impl") == "torch in-model"} == {3}
    assert c["verdict"]["status"] in ("pass", "fail", "not judged") and c["verdict"]["steps"] == 2
    assert emu["step_time_uncontended_s"] > 0 and all(st["contention"] for st in emu["steps"])


@pytest.mark.slow
def test_calibrate_cli_inside_emulator_ranks(tmp_path, capsys):
    pytest.importorskip("torch")
    from pipesim.cli import main
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "--device", "cpu", "--scenario", TINY, "--nproc", "2", "--quick",
                 "--out", str(out)]) == 0
    assert "inside 2 ranks" in capsys.readouterr().out
    prof = json.loads(out.read_text())
    host = prof["device"]["host"]
    assert host["layout"]["ranks"] == 2 and host["layout"]["threads_per_rank"] == 1 and host["layout"]["cores"] >= 1
    assert host["action_s"] > 0 and host["kernel_launch_s"] > 0 and "p2p" in host
