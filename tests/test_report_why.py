"""The report folder, the "why" explanation and report.html in a real browser (issue 18)."""
import json
import shutil
from pathlib import Path

import pytest

import pipesim
from pipesim.cli import main
from pipesim.report.explain import critical_path, explain

ROOT = Path(__file__).resolve().parent.parent
GPT2 = ROOT / "scenarios" / "gpt2-small-4gpu.yaml"


@pytest.fixture(scope="module")
def gpt2():
    s = pipesim.load_scenario(GPT2)
    rep = pipesim.simulate(s)
    return s, rep, explain(rep, s)


def test_why_names_the_lm_head_stage(gpt2):
    s, rep, why = gpt2
    slow = why["slowest_stage"]
    assert slow["stage"] == s.parallel.pipeline - 1 and slow["head"] and slow["ratio"] > 2.0
    assert slow["head_s"] > 0 and "LM head" in slow["holds"]


def test_suggested_partition_matches_its_simulation(gpt2):
    """The suggestion's predicted bubble is what a separate simulation of that split gives."""
    s, rep, why = gpt2
    split = [x for x in why["suggestions"] if "parallel.layers_per_stage" in x["changes"]]
    assert split, why["suggestions"]
    lps = split[0]["changes"]["parallel.layers_per_stage"]
    assert sum(lps) == s.model.num_layers and len(lps) == s.parallel.pipeline
    again = pipesim.simulate(pipesim.load_scenario(GPT2, [f"parallel.layers_per_stage={lps}"]), trace=False)
    assert again.bubble_fraction == pytest.approx(split[0]["bubble_fraction"], rel=1e-9)
    assert again.step_time_s == pytest.approx(split[0]["step_time_s"], rel=1e-9)
    assert again.step_time_s < rep.step_time_s and not again.oom


def test_bubble_causes_add_up_and_fill_drain_is_the_1f1b_formula(gpt2):
    s, rep, why = gpt2
    b = why["bubble"]
    assert b["fill_drain"] + b["imbalance"] + b["communication"] == pytest.approx(rep.bubble_fraction, abs=1e-12)
    # equal stages, free communication: 1F1B leaves (p-1)/(m+p-1) idle (Narayanan et al. SC'21 Sec. 2.2)
    p, m = s.parallel.pipeline, s.num_microbatches
    assert b["fill_drain"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-6)
    assert b["imbalance"] > 0.15          # the LM-head stage


def test_critical_path_spans_the_step_without_gaps(gpt2):
    s, rep, why = gpt2
    path = critical_path(rep.events)
    assert path[0]["start"] == pytest.approx(0.0, abs=1e-12)
    assert path[-1]["end"] == pytest.approx(rep.step_time_s, rel=1e-12)
    for a, b in zip(path, path[1:]):
        assert b["start"] == pytest.approx(a["end"], abs=1e-9), (a, b)
    ranks = why["path"]["seconds_by_rank"]
    assert max(ranks, key=ranks.get) == s.parallel.pipeline - 1


def test_a_step_that_does_not_fit_is_told_what_makes_it_fit():
    """GPT-2 small on 4 H100 cut to 3 GiB: too small for its activations. The suggestions are the
    memory changes that fit, simulated, fastest first; offloading the activations over PCIe is
    among them and slower than the step that did not fit (its copies outlast the passes)."""
    s = pipesim.load_scenario(GPT2, ["system.preset=dgx-h100", "system.num_nodes=1", "system.gpus_per_node=4",
                                     "system.gpu.memory_GiB=3"])
    rep = pipesim.simulate(s)
    assert rep.data["oom"]
    sugs = explain(rep, s)["suggestions"]
    assert sugs and all(sug["peak_memory_bytes"] <= s.system.gpu.memory for sug in sugs)
    assert [sug["step_time_s"] for sug in sugs] == sorted(sug["step_time_s"] for sug in sugs)
    offload = [sug for sug in sugs if sug["title"].startswith("offload")]
    assert offload and offload[0]["step_time_s"] > rep.data["step_time_s"]


def test_simulate_writes_the_report_folder(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["simulate", str(GPT2), "--set", "training.global_batch_size=16", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "why" in text and "slowest stage  3" in text and "LM head" in text
    names = sorted(p.name for p in out.iterdir())
    assert names == ["memory.png", "report.html", "report.json", "timeline.png", "trace.json"]
    d = json.loads((out / "report.json").read_text())
    assert "events" not in d and d["num_microbatches"] == 4 and d["why"]["slowest_stage"]["head"]
    assert "traceEvents" in json.loads((out / "trace.json").read_text())
    page = (out / "report.html").read_text()
    assert "<script src" not in page and "cdn.plot.ly" not in page.split("</script>")[-1]
    for fig in ("fig-timeline", "fig-memory", "fig-stages", "fig-ranks"):
        assert fig in page
    assert "op costs from</td><td>roofline 100 %" in page     # a GTX-1080Ti: no kernel curve
    assert "kernel rates" not in page


def test_default_folder_and_no_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", str(GPT2), "--no-files", "--no-why"]) == 0
    assert list(tmp_path.iterdir()) == []
    assert main(["simulate", str(GPT2), "--no-why", "--events"]) == 0
    folder = tmp_path / "gpt2-small-4gpu.report"
    assert json.loads((folder / "report.json").read_text())["events"]


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.skipif(_chromium() is None, reason="no Chromium installed (apt-get install chromium)")
def test_report_html_renders_in_headless_chromium(tmp_path, capsys):
    sync_api = pytest.importorskip("playwright.sync_api")
    out = tmp_path / "rep"
    assert main(["simulate", str(GPT2), "--set", "training.global_batch_size=16", "--out", str(out)]) == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run"]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=flags)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors, requests = [], []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto((out / "report.html").as_uri(), timeout=300_000)   # slow on a loaded machine
            page.wait_for_selector("#fig-ranks .main-svg", timeout=300_000)
            counts = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')]
                .map(d => [d.id, d.querySelectorAll('.barlayer .trace, .scatterlayer .trace').length]))""")
            bars = page.evaluate("() => document.querySelectorAll('#fig-timeline .barlayer path').length")
        finally:
            browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith("file:")] == []          # nothing from the network
    assert set(counts) == {"fig-timeline", "fig-memory", "fig-stages", "fig-ranks"}
    assert counts["fig-memory"] == 4 and counts["fig-timeline"] >= 4 and all(counts.values())
    assert bars > 20                          # the ops were drawn, not just the axes


def test_sweep_writes_into_the_report_folder(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("training.micro_batch_size: [2, 4]\n")
    out = tmp_path / "rep"
    assert main(["sweep", str(GPT2), "--grid", str(grid), "--jobs", "1", "--no-progress", "--dir", str(out)]) == 0
    rows = (out / "sweep.csv").read_text().splitlines()
    assert len(rows) == 3 and "micro_batch_size" in rows[0]
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_exposed_zero_traffic_is_offered_one_sharding_replica_per_island():
    """ZeRO-3 over 2 nodes (16 ranks, 8 per NVLink island): the explanation tries 2 replicas, whose
    gathers stay inside a node; a step that does not fit is also offered BF16 Adam moments (and, on
    the distributed optimizer, master remainders)."""
    from pipesim.report.suggest import candidates, island_replicas, memory_candidates
    s = pipesim.load_scenario({"model": {"preset": "llama2-7b", "num_layers": 4},
                               "system": {"preset": "dgx-h100", "num_nodes": 2},
                               "parallel": {"data": 16},
                               "training": {"global_batch_size": 16, "zero_stage": 3}})
    assert island_replicas(s) == 2
    assert island_replicas(pipesim.load_scenario(s, ["training.zero_stage=0"])) == 1
    rep = pipesim.simulate(s)
    exposed = sum(rep.data["exposed_comm_s"].get(k, 0.0) for k in ("DP", "ZERO_GATHER", "ZERO_ALLGATHER"))
    titles = [t for t, _, _ in candidates(s, rep)]
    assert ("2 sharding replicas (one per NVLink island)" in titles) == (exposed > 0.02 * rep.data["step_time_s"])
    assert any(t == "BF16 Adam moments" for t, _, _ in memory_candidates(s))
    assert not any(t == "BF16 Adam moments" for t, _, _ in
                   memory_candidates(pipesim.load_scenario(s, ["training.optimizer_state_dtype=bf16"])))
    # master remainders: Megatron's distributed optimizer only (this ZeRO-3 step is not offered them)
    remainders = "master weights as 16-bit remainders"
    assert not any(t == remainders for t, _, _ in memory_candidates(s))
    z1 = pipesim.load_scenario(s, ["training.zero_stage=1"])
    assert any(t == remainders for t, _, _ in memory_candidates(z1))
    assert not any(t == remainders for t, _, _ in
                   memory_candidates(pipesim.load_scenario(z1, ["training.master_weights=remainders"])))


def test_interleaved_pipeline_gets_layers_moved_off_its_head_heavy_rank():
    """The partitioner does not split interleaved chunks: the greedy rebalance of
    explain.rebalanced_split does, and its suggestion is what simulating it gives."""
    from pipesim.report.suggest import rebalanced_split
    sets = ["parallel.virtual_stages=2", "training.schedule=interleaved", "model.num_layers=16",
            "training.micro_batch_size=1", "model.seq_length=512"]      # fits in the 1080 Ti's 11 GiB
    s = pipesim.load_scenario(GPT2, sets)
    rep = pipesim.simulate(s)
    assert not rep.oom
    moved = rebalanced_split(s, rep)
    lps = list(s.layers_per_stage())
    assert moved and sum(moved) == sum(lps) and len(moved) == len(lps)
    assert moved[-1] < lps[-1]                           # the LM head's chunk gives layers away
    why = explain(rep, s)
    hit = [x for x in why["suggestions"] if x["changes"].get("parallel.layers_per_stage") == moved]
    assert hit and hit[0]["step_time_s"] < rep.step_time_s
    again = pipesim.simulate(pipesim.load_scenario(GPT2, sets + [f"parallel.layers_per_stage={moved}"]), trace=False)
    assert again.step_time_s == pytest.approx(hit[0]["step_time_s"], rel=1e-9)


def test_the_summary_states_the_attention_kernel_the_default_resolved_to(capsys):
    """training.attention: auto resolves per GPU and precision; the user sees which one was costed."""
    from pipesim.cli import main
    assert main(["simulate", str(GPT2), "--no-files", "--no-why"]) == 0                 # GTX 1080 Ti, fp32
    assert "training  fp32, eager attention" in capsys.readouterr().out
    assert main(["simulate", str(GPT2), "--no-files", "--no-why", "--set", "system.preset=dgx-h100",
                 "--set", "system.gpus_per_node=4", "--set", "training.precision=bf16"]) == 0
    assert "training  bf16, flash attention" in capsys.readouterr().out


def test_a_long_sequence_far_out_of_memory_gets_the_changes_that_together_make_it_fit():
    """128K tokens of Llama 3 8B on 8 H100 need ~626 GiB: no single change fits, so the memory
    changes are stacked (recomputation, then context parallelism) until one does, each --set given."""
    s = pipesim.load_scenario({"model": {"preset": "llama3-8b", "seq_length": 131072},
                               "system": {"preset": "dgx-h100", "num_nodes": 1},
                               "parallel": {"tensor": 1, "pipeline": 1, "data": 8},
                               "training": {"micro_batch_size": 1, "global_batch_size": 8, "zero_stage": 3}})
    rep = pipesim.simulate(s)
    assert rep.data["oom"]
    why = explain(rep, s)
    together = [x for x in why["suggestions"] if x["title"].startswith("together: ")]
    assert together and together[0]["changes"]["parallel.context"] > 1
    assert together[0]["peak_memory_bytes"] <= s.system.gpu.memory
    fixed = pipesim.simulate(pipesim.load_scenario(s, [f"{k}={v}" for k, v in together[0]["changes"].items()]))
    assert not fixed.data["oom"] and fixed.data["step_time_s"] == pytest.approx(together[0]["step_time_s"])
    assert "--set parallel.context=" in together[0]["how"] and "parallel.tensor" not in together[0]["how"]


def test_a_layout_candidate_takes_its_gpus_from_data_parallelism_and_splits_uneven_layers():
    from pipesim.report.suggest import layout_candidate, variant
    s = pipesim.load_scenario({"model": {"preset": "llama3-8b", "num_layers": 30}, "system": {"preset": "dgx-h100",
                               "num_nodes": 2}, "parallel": {"tensor": 2, "pipeline": 1, "data": 8},
                               "training": {"micro_batch_size": 1, "global_batch_size": 64}})
    title, changes, how = layout_candidate(s, pipeline=4, context=2)
    v = variant(s, changes)
    assert (v.parallel.tensor, v.parallel.context, v.parallel.pipeline, v.parallel.data) == (2, 2, 4, 1)
    assert v.parallel.layers_per_stage == (7, 8, 8, 7) and title == "context 2 x pipeline 4 (data 1)"
    assert "--set parallel.layers_per_stage=auto" in how and "parallel.tensor" not in how
    assert layout_candidate(s, tensor=32) is None and layout_candidate(s, pipeline=64) is None


def test_interleaved_summary_names_the_rank_imbalance(capsys):
    from pipesim.commands.simulate import summary
    from pipesim import load_scenario, simulate
    plain = load_scenario(GPT2)
    s = load_scenario(GPT2, ["training.schedule=interleaved", "parallel.virtual_stages=3",
                             "training.global_batch_size=32"])
    rep = simulate(s)
    line = [x for x in summary(rep, s).splitlines() if x.startswith("rank imbalance")]
    assert len(line) == 1 and f"{rep.rank_imbalance:.3f}" in line[0] and "its 3 chunks" in line[0]
    assert "rank imbalance" not in summary(simulate(plain), plain)


def test_exposed_tensor_parallel_collectives_are_offered_their_overlaps():
    """GPT-3 175B on 1,024 A100 with its TP collectives blocking (about a tenth of the step): the
    explanation simulates Megatron's asynchronous input-gradient collective and --tp-comm-overlap,
    and the overlap shortens the step."""
    from pipesim.report.suggest import candidates, tp_candidates
    s = pipesim.load_scenario("scenarios/gpt3-175b-1024xa100.yaml")
    rep = pipesim.simulate(s)
    assert rep.data["exposed_comm_s"]["TP"] > 0.02 * rep.data["step_time_s"]
    titles = [t for t, _, _ in candidates(s, rep)]
    assert "tp_grad_overlap" in titles and "overlap_tp_comm" in titles
    on = pipesim.load_scenario(s, ["training.overlap_tp_comm=true"])
    assert pipesim.simulate(on).data["step_time_s"] < rep.data["step_time_s"]
    assert tp_candidates(on) == [] and tp_candidates(pipesim.load_scenario(s, ["parallel.sequence_parallel=false",
                                                                              "training.tp_grad_overlap=true"])) == []
