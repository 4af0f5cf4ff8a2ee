"""Report contract, trace round trip, report-from-events, CLI outputs and out-of-memory handling."""
import json
from pathlib import Path

import pytest

import pipesim
from pipesim.cli import main
from pipesim.costs.summary import iteration_flops
from pipesim.report.perfetto import read_trace, to_chrome, write_trace
from pipesim.report.metrics import report_from_events
from _sim_helpers import tiny, uniform

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ("step_time_s", "throughput_samples_per_s", "tokens_per_s", "model_tflops_per_gpu", "mfu",
            "bubble_fraction", "num_gpus", "peak_memory_bytes")
RANK_KEYS = ("rank", "stage", "compute_busy_s", "comm_busy_s", "bubble_fraction", "peak_memory_bytes")


def test_report_contract_and_derived_numbers():
    s = tiny(P=2, M=4, data=2, nodes=2)
    d = pipesim.simulate(s).to_dict()
    for k in CONTRACT + ("oom", "exposed_comm_s", "imbalance", "topology_imbalance", "comm_volume",
                         "ideal_latency_s", "stage_costs", "cost_sources", "events", "memory", "ranks"):
        assert k in d, k
    for r in d["ranks"]:
        for k in RANK_KEYS:
            assert k in r
    step = d["step_time_s"]
    assert d["throughput_samples_per_s"] == pytest.approx(s.training.global_batch_size / step)
    assert d["tokens_per_s"] == pytest.approx(d["throughput_samples_per_s"] * s.model.seq_length)
    assert d["model_tflops_per_gpu"] == pytest.approx(iteration_flops(s) / step / s.num_gpus / 1e12)
    assert d["mfu"] == pytest.approx(d["model_tflops_per_gpu"] * 1e12 / s.system.gpu.matrix_peak("bf16"))
    json.dumps(d)     # serialisable


def test_ideal_latencies_and_imbalance_follow_the_seeds():
    s = tiny(P=3, M=2, schedule="gpipe")
    costs = uniform(s, f=1, b=2)
    costs[1] = costs[1].__class__(**{**costs[1].__dict__, "forward": 2.0, "backward": 4.0})
    d = pipesim.simulate(s, stage_costs=costs).to_dict()
    # cumulative through the pipeline: forward from stage 0, backward from the last stage
    assert d["ideal_latency_s"]["forward"] == pytest.approx([1, 3, 4])
    assert d["ideal_latency_s"]["backward"] == pytest.approx([8, 6, 2])
    assert d["imbalance"] == pytest.approx({"forward": 0.5, "backward": 0.5})
    assert d["topology_imbalance"] == pytest.approx({"forward": 0.5, "backward": 0.5})


def test_comm_volume_per_stage():
    s = tiny(P=2, M=3, schedule="gpipe")
    d = pipesim.simulate(s, stage_costs=uniform(s, send=0.5e9, grad_send=0.25e9)).to_dict()
    v0, v1 = d["comm_volume"]
    assert (v0["out_bytes"], v0["out_s"], v0["grad_in_bytes"]) == (0.5e9, 0.5, 0.25e9)
    assert (v1["in_bytes"], v1["grad_out_bytes"], v1["grad_out_s"]) == (0.5e9, 0.25e9, 0.25)
    assert v0["step_out_bytes"] == 3 * 0.5e9


def test_trace_round_trip_and_report_from_events(tmp_path):
    s = tiny(P=2, M=4, data=2, nodes=2, extra_training={"grad_bucket_MB": 0.01})
    rep = pipesim.simulate(s)
    path = tmp_path / "t.json"
    write_trace(path, rep.events, rep.memory)
    doc = json.loads(path.read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {0, 1}
    f0 = next(e for e in xs if e["name"] == "0F0")
    assert f0["ts"] == 0 and f0["args"]["stage"] == 0 and f0["args"]["microbatch"] == 0
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    sends = [e for e in rep.events if e.kind.startswith("SEND")]
    assert len(flows) == 2 * len(sends) > 0
    events, memory = read_trace(path)
    assert events == rep.events and memory == rep.memory
    again = report_from_events(s, events, memory)
    for k in ("step_time_s", "bubble_fraction", "peak_memory_bytes", "mfu", "exposed_comm_s", "imbalance"):
        assert again.data[k] == pytest.approx(rep.data[k]), k
    for a, b in zip(again.ranks, rep.ranks):
        assert a["compute_busy_s"] == pytest.approx(b["compute_busy_s"])
        assert a["comm_busy_s"] == pytest.approx(b["comm_busy_s"])


def test_chrome_trace_is_microseconds():
    s = tiny(P=2, M=1, schedule="gpipe")
    rep = pipesim.simulate(s, stage_costs=uniform(s, f=0.001, b=0.002))
    doc = to_chrome(rep.events)
    b = next(e for e in doc["traceEvents"] if e.get("name") == "1B0")
    assert b["dur"] == pytest.approx(2000.0)


def test_a_peak_within_the_allocators_reserve_of_the_capacity_is_tight():
    s = tiny(P=1, M=1, memory_GiB=1.05)
    fits = pipesim.simulate(s, stage_costs=uniform(s, act=2**30))            # 1 GiB of 1.05: 5 % left
    assert not fits.oom and fits.data["memory_tight"]
    roomy = pipesim.simulate(tiny(P=1, M=1, memory_GiB=1.2), stage_costs=uniform(s, act=2**30))
    assert not roomy.data["memory_tight"]
    over = pipesim.simulate(tiny(P=1, M=1, memory_GiB=0.9), stage_costs=uniform(s, act=2**30))
    assert over.oom and not over.data["memory_tight"]


def test_out_of_memory_is_flagged_not_hidden():
    s = tiny(P=2, M=8, schedule="gpipe", memory_GiB=0.001)
    r = pipesim.simulate(s, stage_costs=uniform(s, act=2**20))
    # rank 0 holds all 8 micro-batches of 1 MiB: 8 MiB > 1.024 MiB
    assert r.oom is True and r.peak_memory_bytes == 8 * 2**20
    ok = pipesim.simulate(tiny(P=2, M=8, schedule="gpipe"), stage_costs=uniform(s, act=2**20))
    assert ok.oom is False


def test_cli_writes_outputs(tmp_path, capsys):
    sc = ROOT / "scenarios" / "gpt2-small-4gpu.yaml"
    out = {k: tmp_path / n for k, n in (("json", "r.json"), ("trace", "t.json"), ("plot", "p.png"),
                                         ("mem", "m.png"))}
    rc = main(["simulate", str(sc), "--no-files", "--no-why", "--events", "--set", "training.global_batch_size=16",
               "--json", str(out["json"]),
               "--trace", str(out["trace"]), "--plot", str(out["plot"]), "--memory-plot", str(out["mem"])])
    assert rc == 0
    text = capsys.readouterr().out
    assert "step time" in text and "pipeline bubble" in text and "rank" in text
    d = json.loads(out["json"].read_text())
    assert d["num_microbatches"] == 4 and d["events"]
    for k in ("plot", "mem"):
        assert out[k].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_oom_exits_2_unless_allowed(tmp_path, capsys):
    sc = ROOT / "scenarios" / "gpt2-small-4gpu.yaml"
    args = ["simulate", str(sc), "--no-files", "--no-why", "--set", "system.gpu.memory_GiB=1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "needs" in err and "GiB" in err and "memory_GiB" in err and "Traceback" not in err
    assert main(args + ["--allow-oom"]) == 0


def test_cli_bad_scenario_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {preset: gpt2-small}\nsystem: {preset: gtx-1080ti}\n"
                   "training: {global_batch_size: 8, schedule: nope}\n")
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope" in err and len(err.splitlines()) == 1


def test_interval_measures():
    from pipesim.report.metrics import measure, minus
    assert measure([(5, 6), (0, 2), (1, 3)]) == 4
    assert measure([]) == 0
    assert minus([(0, 4)], [(1, 2), (3, 5)]) == 2
    assert minus([(0, 1)], []) == 1 and minus([], [(0, 1)]) == 0
