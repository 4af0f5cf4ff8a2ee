"""The run section: wall-clock time to train through interruptions, restarts and checkpoints."""
import json
import math
import random
import subprocess
import sys

import pytest

from pipesim import load_scenario, simulate
from pipesim.errors import ScenarioError
from pipesim.report.goodput import checkpoint_bytes, optimal_interval, period_wall


def _monte_carlo(work, block, rate, restart, recovery, periods, seed=7):
    """Mean wall time of a period, by drawing the interruptions one by one (Bougeret et al.'s
    model: after an interruption the job is down `restart` seconds, then re-reads its checkpoint
    in `recovery` seconds, which an interruption may also cut short, then tries again)."""
    rng = random.Random(seed)
    total = 0.0
    for _ in range(periods):
        t = 0.0
        while True:
            x = rng.expovariate(rate)
            if x >= work + block:
                t += work + block
                break
            t += x + restart
            while True:                           # re-read the checkpoint until it succeeds
                y = rng.expovariate(rate)
                if y >= recovery:
                    t += recovery
                    break
                t += y + restart
        total += t
    return total / periods


def test_expected_period_matches_drawn_interruptions():
    args = dict(work=1800.0, block=60.0, rate=1 / 2400, restart=600.0, recovery=300.0)
    drawn = _monte_carlo(**args, periods=40000)
    assert period_wall(**args) == pytest.approx(drawn, rel=0.02)
    assert period_wall(**args) > 1.3 * (args["work"] + args["block"])      # interruptions cost time here


def test_optimal_interval_minimises_the_wall_time_per_unit_of_work():
    rate, block, restart, recovery = 1 / 3600, 45.0, 600.0, 120.0
    best = optimal_interval(rate, block)
    grid = [best * f for f in (0.5, 0.8, 0.95, 1.05, 1.25, 2.0)]
    per_work = lambda t: period_wall(t, block, rate, restart, recovery) / t     # noqa: E731
    assert all(per_work(best) < per_work(t) for t in grid)
    # Young's first-order interval when interruptions are rare against the checkpoint time
    assert optimal_interval(1e-7, 10.0) == pytest.approx(math.sqrt(2 * 10.0 / 1e-7), rel=1e-3)
    assert optimal_interval(0.0, 10.0) == math.inf


def _scenario(*sets):
    base = {"model": {"preset": "llama3-8b", "seq_length": 4096}, "system": {"preset": "dgx-h100", "num_nodes": 2},
            "parallel": {"tensor": 2, "data": 8}, "training": {"micro_batch_size": 1, "global_batch_size": 64},
            "run": {"tokens": 1e12}}
    return load_scenario(base, list(sets))


def test_a_run_adds_its_wall_time_goodput_and_checkpoint_plan():
    s = _scenario()
    r = simulate(s).run
    assert r["compute_s"] == pytest.approx(1e12 / simulate(s).tokens_per_s)
    assert 0.5 < r["goodput"] < 1 and r["wall_s"] > r["compute_s"]
    assert sum(r["time_s"].values()) == pytest.approx(r["wall_s"])
    # Adam in mixed precision: bf16 weights + fp32 master weights and two moments, 14 bytes a parameter
    assert r["checkpoint_bytes"] == pytest.approx(checkpoint_bytes(s)) and checkpoint_bytes(s) / 8.03e9 == pytest.approx(14, rel=0.01)
    assert r["checkpoint_interval_s"] == pytest.approx(r["checkpoint_interval_steps"] * simulate(s).step_time_s)
    # 16 GPUs at Llama 3's rate: one interruption every 54 x 24 x 16384 / 419 / 16 hours
    assert r["mtti_s"] / 3600 == pytest.approx(54 * 24 * 16384 / 419 / 16)
    assert r["interruptions"] == pytest.approx(r["wall_s"] / r["mtti_s"] / (1 + 600 / r["mtti_s"]))
    # two DGX H100 nodes at their 10.2 kW maximum for the wall time
    assert r["energy_MWh"] == pytest.approx(2 * 10.2 * r["wall_s"] / 3600 / 1000)
    # four GB200 compute trays at 6.667 kW; a system without a power figure has no energy
    gb = simulate(_scenario("system.preset=gb200-nvl72", "system.num_nodes=4")).run
    assert gb["energy_MWh"] == pytest.approx(4 * 6.667 * gb["wall_s"] / 3600 / 1000)
    assert simulate(_scenario("system.preset=gb300-nvl72", "system.num_nodes=4")).run["energy_MWh"] is None


def test_without_interruptions_the_run_is_its_steps_and_one_checkpoint():
    r = simulate(_scenario("run.interruptions_per_1000_gpu_days=0", "run.async_checkpoint=false")).run
    assert r["interruptions"] == 0 and r["mtti_s"] is None
    assert r["wall_s"] == pytest.approx(r["compute_s"] + r["checkpoint_write_s"], rel=1e-6)


def test_waiting_for_the_write_costs_more_than_copying_to_host():
    slow_storage = ("run.checkpoint_write_GBps_per_node=0.05", "run.interruptions_per_1000_gpu_days=20")
    sync = simulate(_scenario(*slow_storage, "run.async_checkpoint=false")).run
    overlapped = simulate(_scenario(*slow_storage)).run
    assert overlapped["checkpoint_block_s"] < sync["checkpoint_block_s"] == sync["checkpoint_write_s"]
    assert overlapped["goodput"] > sync["goodput"]
    assert overlapped["checkpoint_interval_s"] >= overlapped["checkpoint_write_s"]   # the next waits for the write


def test_a_given_interval_is_kept_in_whole_steps_and_is_no_better_than_the_optimum():
    best = simulate(_scenario("run.async_checkpoint=false", "run.interruptions_per_1000_gpu_days=5")).run
    given = simulate(_scenario("run.async_checkpoint=false", "run.interruptions_per_1000_gpu_days=5",
                               "run.checkpoint_interval_min=240")).run
    assert given["checkpoint_interval_s"] == pytest.approx(240 * 60, rel=0.01)
    assert given["wall_s"] >= best["wall_s"]


def test_the_cli_prints_the_run_and_writes_it_to_json(tmp_path):
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": {"preset": "gpt2-small"}, "system": {"preset": "dgx-a100-80gb"},
                                    "parallel": {"data": 8}, "training": {"micro_batch_size": 4, "global_batch_size": 64},
                                    "run": {"tokens": 3e11, "gpu_hour_usd": 2.0}}))
    out = subprocess.run([sys.executable, "-m", "pipesim", "simulate", str(path), "--no-files", "--no-why",
                          "--json", str(tmp_path / "r.json")], capture_output=True, text=True, check=True).stdout
    run = json.loads((tmp_path / "r.json").read_text())["run"]
    assert "days wall-clock" in out and f"${run['cost_usd']:,.0f}" in out
    assert run["cost_usd"] == pytest.approx(run["gpu_hours"] * 2.0)


@pytest.mark.parametrize("key, value", [("restart_min", -1), ("checkpoint_write_GBps_per_node", 0),
                                        ("tokens", -5), ("checkpoint_interval_min", 0), ("speed", 1)])
def test_bad_run_values_are_one_line_errors_naming_the_key(key, value):
    with pytest.raises(ScenarioError, match=f"run.*{key}") as err:
        _scenario(f"run.{key}={value}")
    assert "\n" not in str(err.value)


def test_search_names_the_winners_run(tmp_path, capsys):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump({"model": {"preset": "llama3-8b", "num_layers": 4}, "system": {"preset": "dgx-h100"},
                                    "training": {"micro_batch_size": 1, "global_batch_size": 16},
                                    "run": {"tokens": 1e11}}))
    for engine in ("analytic", "sim"):
        assert main(["search", str(path), "--gpus", "8", "--no-files", "--no-progress", "--engine", engine,
                     "--pipeline", "1", "--micro-batch", "1"]) == 0
        line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  the run: ")]
        assert len(line) == 1 and "days wall-clock, goodput" in line[0]


def test_search_over_cluster_sizes_compares_their_runs(tmp_path, capsys):
    import yaml
    from pipesim.cli import main
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump({"model": {"preset": "llama3-8b", "num_layers": 4}, "system": {"preset": "dgx-h100"},
                                    "training": {"micro_batch_size": 1, "global_batch_size": 16},
                                    "run": {"tokens": 1e11}}))
    args = ["search", str(path), "--no-files", "--no-progress", "--engine", "analytic", "--pipeline", "1",
            "--micro-batch", "1"]
    assert main(args + ["--gpus", "4,8"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("best layout per cluster size"):].splitlines()
    assert "days" in table[1] and "GPU-hours" in table[1]
    rows = {int(line.split()[0]): line.split() for line in table[2:]}
    assert set(rows) == {4, 8}
    assert float(rows[8][5]) < float(rows[4][5])          # twice the GPUs, fewer days
    for bad in ("0", "4,x"):
        assert main(args + ["--gpus", bad]) != 0
        err = capsys.readouterr().err
        assert "--gpus" in err and err.count("\n") == 1
    days = {n: float(rows[n][5]) for n in rows}
    hours = {n: float(rows[n][7].replace(",", "")) for n in rows}
    assert main(args + ["--gpus", "4,8", "--deadline-days", str(days[4] * 1.01)]) == 0
    cheapest = min(rows, key=lambda n: hours[n])
    assert f"{cheapest} GPUs ({days[cheapest]:.1f} days" in capsys.readouterr().out.splitlines()[-1]
    assert main(args + ["--gpus", "4,8", "--deadline-days", str(days[8] / 2)]) == 0
    assert "no size searched makes it; the fastest, 8 GPUs" in capsys.readouterr().out
    assert main(args + ["--gpus", "8", "--deadline-days", "3"]) != 0
    assert "--deadline-days" in capsys.readouterr().err


def test_the_estimate_holds_its_invariants_for_any_run():
    """Whatever the rates, sizes and intervals: finite, wall >= steps, goodput in (0, 1], the
    lost time adds up, and the interval is whole steps no shorter than the write it waits for."""
    from dataclasses import replace

    from hypothesis import given, settings, strategies as st

    from pipesim.report.goodput import run_estimate, run_rows
    base = _scenario()

    @settings(max_examples=300, deadline=None)
    @given(rate=st.floats(0, 1e4), restart=st.floats(0, 1e5), write=st.floats(1e6, 1e12),
           interval=st.one_of(st.none(), st.floats(1, 1e7)), overlapped=st.booleans(),
           step=st.floats(1e-3, 1e3), tokens_per_s=st.floats(1.0, 1e9), tokens=st.floats(1e6, 1e16))
    def check(rate, restart, write, interval, overlapped, step, tokens_per_s, tokens):
        run = replace(base.run, tokens=tokens, interruptions_per_1000_gpu_days=rate, restart=restart,
                      checkpoint_write=write, checkpoint_interval=interval, async_checkpoint=overlapped)
        r = run_estimate(replace(base, run=run), step, tokens_per_s)
        if r["wall_s"] is None:                   # interruptions outpace every checkpoint period
            assert r["goodput"] == 0 and "never finish" in run_rows(r)[0][1]
            return
        assert r["wall_s"] >= r["compute_s"] * (1 - 1e-12) and 0 <= r["goodput"] <= 1 + 1e-12
        assert r["checkpoint_interval_steps"] >= 1
        assert r["checkpoint_interval_s"] == pytest.approx(r["checkpoint_interval_steps"] * step)
        if r["checkpoint_overlapped"]:
            assert r["checkpoint_interval_s"] >= r["checkpoint_write_s"] * (1 - 1e-9)
        assert sum(r["time_s"].values()) == pytest.approx(r["wall_s"], rel=1e-6)

    check()


@pytest.mark.parametrize("name, published_gpu_hours", [("deepseek-v3-2048xh800.yaml", 2_664_000),
                                                       ("bloom-176b-384xa100.yaml", 1_082_990)])
def test_published_runs_report_their_run(name, published_gpu_hours):
    """The bundled published runs carry their token counts; the GPU-hours come out near what
    their reports counted (DeepSeek-V3 Table 1 pre-training: +2.2 %; BLOOM's whole training, with
    its batch ramp-up and the Jean Zay specifics pipesim leaves out: -23 %)."""
    from pathlib import Path
    r = simulate(load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / name)).run
    assert r["goodput"] > 0.95 and r["checkpoint_interval_steps"] >= 1
    assert 0.7 < r["gpu_hours"] / published_gpu_hours < 1.1
