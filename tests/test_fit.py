"""`pipesim fit`: hardware efficiencies fitted to measured steps (pipesim/calibrate/step_fit.py).

The measured steps here are the simulator's own under known efficiencies, so a fit can be checked
against the truth it should find."""
from pathlib import Path

import pytest
import yaml

import pipesim
from pipesim.calibrate.runs_file import read_runs
from pipesim.calibrate.step_fit import KNOBS, fit_runs, parse_knobs
from pipesim.cli import main
from pipesim.errors import PipesimError

SCENARIO = str(Path(__file__).resolve().parent.parent / "scenarios" / "gpt-13b-2-nodes.yaml")
# 16 A100 on 2 nodes: layouts whose steps depend on compute and network in different shares
LAYOUTS = [{}, {"parallel.tensor": 4, "parallel.pipeline": 1, "parallel.data": 4},
           {"parallel.tensor": 2, "parallel.pipeline": 2, "parallel.data": 4},
           {"parallel.tensor": 1, "parallel.pipeline": 1, "parallel.data": 16, "training.zero_stage": 3}]
TRUTH = {"system.gpu.sustained_ratio": 0.6, "system.inter_node.efficiency": 0.3}


def step(sets, extra=()):
    s = pipesim.load_scenario(SCENARIO, [f"{k}={v}" for k, v in sets.items()] + list(extra))
    return pipesim.simulate(s, trace=False).to_dict(include_trace=False)


def write_runs(tmp_path, layouts=LAYOUTS, truth=TRUTH, metric="step_time_s"):
    runs = []
    for i, sets in enumerate(layouts):
        rep = step(sets, [f"{k}={v}" for k, v in truth.items()])
        value = rep["step_time_s"] if metric == "step_time_s" else rep["tokens_per_s"] / rep["num_gpus"]
        runs.append({"name": f"layout{i}", "scenario": SCENARIO, "set": sets, metric: value})
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": runs}, sort_keys=False))
    return str(path)


def test_fit_recovers_the_efficiencies_the_steps_were_timed_with(tmp_path):
    runs = read_runs(write_runs(tmp_path))
    result = fit_runs(runs, parse_knobs("compute,network"))
    fitted = {k.key: k.fitted for k in result.knobs}
    assert fitted["system.gpu.sustained_ratio"] == pytest.approx(0.6, rel=0.03)
    assert fitted["system.inter_node.efficiency"] == pytest.approx(0.3, rel=0.15)
    assert all(k.status == "fitted" for k in result.knobs)
    assert result.mape("default_step_s") > 20          # the presets are far from this "cluster"
    assert result.mape("fitted_step_s") < 1.0


def test_a_knob_the_runs_do_not_depend_on_stays_at_its_preset(tmp_path):
    """A 13B model's kernels last far longer than a launch: the runs cannot see the launch cost, so
    the prior keeps it at the preset's 5 us and the table says so."""
    truth = {"system.gpu.sustained_ratio": 0.6}
    result = fit_runs(read_runs(write_runs(tmp_path, LAYOUTS[:2], truth)), parse_knobs("compute,launch"))
    launch = next(k for k in result.knobs if k.name == "launch")
    assert launch.status == "prior only"
    assert launch.fitted == pytest.approx(launch.default, abs=1.0)
    assert next(k for k in result.knobs if k.name == "compute").fitted == pytest.approx(0.6, rel=0.01)


def test_cross_validation_predicts_each_run_from_the_others(tmp_path):
    runs = read_runs(write_runs(tmp_path))
    result = fit_runs(runs, parse_knobs("compute,network"), cross_validate=True, jobs=2)
    alone = fit_runs(runs, parse_knobs("compute,network"), jobs=1)       # one process, same fit
    assert [k.fitted for k in alone.knobs] == [k.fitted for k in result.knobs]
    assert all(r.loo_step_s is not None for r in result.runs)
    assert result.mape("loo_step_s") < 3.0
    assert result.mape("loo_step_s") >= result.mape("fitted_step_s") - 1e-9


def test_a_throughput_figure_is_read_as_the_step_it_implies(tmp_path):
    """tokens/s per GPU equal to pipesim's own prediction imply exactly its step time."""
    path = write_runs(tmp_path, LAYOUTS[:1], truth={}, metric="tokens_per_s_per_gpu")
    result = fit_runs(read_runs(path), parse_knobs("compute"))
    r = result.runs[0]
    assert r.measured_step_s == pytest.approx(r.default_step_s, rel=1e-9)


def test_cli_prints_the_table_and_writes_a_system_file_that_reproduces_the_fit(tmp_path, capsys):
    runs = write_runs(tmp_path, LAYOUTS[:3])
    out = tmp_path / "tuned" / "fitted.yaml"
    out.parent.mkdir()
    assert main(["fit", runs, "--out", str(out), "--json", str(tmp_path / "fit.json")]) == 0
    text = capsys.readouterr().out
    assert "system.gpu.sustained_ratio" in text and "apply: --set system.gpu.sustained_ratio=" in text
    fitted_line = next(line for line in text.splitlines() if line.startswith("layout0"))
    fitted_step = float(fitted_line.split()[4])
    # the scenario's own system file, swapped for the written one
    raw = yaml.safe_load(Path(SCENARIO).read_text())
    raw["system"] = {"preset": str(out), "num_nodes": 2}
    raw["model"]["preset"] = str(Path(SCENARIO).parent / raw["model"]["preset"])
    s = pipesim.load_scenario(raw)
    assert pipesim.simulate(s, trace=False).step_time_s == pytest.approx(fitted_step, rel=1e-3)
    assert "preset: ../" not in out.read_text() or (out.parent / yaml.safe_load(out.read_text())["preset"]).exists()


def test_the_bundled_example_fits_and_the_closed_form_agrees(capsys):
    """scenarios/fit/runs-example.yaml (README, docs/FIT.md): its steps are slower than the presets'
    A100, so the fitted tensor-core rate is lower; the closed-form screen finds the same within 2 %."""
    example = str(Path(SCENARIO).parent / "fit" / "runs-example.yaml")
    runs = read_runs(example)
    sim = fit_runs(runs, parse_knobs("compute"))
    closed = fit_runs(runs, parse_knobs("compute"), engine="analytic")
    assert sim.knobs[0].fitted < sim.knobs[0].default
    assert closed.knobs[0].fitted == pytest.approx(sim.knobs[0].fitted, rel=0.02)
    assert sim.mape("fitted_step_s") < sim.mape("default_step_s")
    assert main(["fit", example]) == 0 and "apply: --set system.gpu.sustained_ratio=" in capsys.readouterr().out


@pytest.mark.parametrize("content,expected", [
    ("[1, 2]", "expected a mapping with the key 'runs'"),
    ("runs: []", "runs: expected a non-empty list"),
    ("runs: [{step_time_s: 1}]", "runs[0].scenario: expected the path of a scenario file"),
    ("runs: [{scenario: S}]", "runs[0]: expected exactly one measured figure"),
    ("runs: [{scenario: S, step_time_s: 1, mfu: 0.4}]", "got step_time_s, mfu"),
    ("runs: [{scenario: S, step_time_s: -1}]", "runs[0].step_time_s: expected a positive number"),
    ("runs: [{scenario: S, mfu: 40}]", "runs[0].mfu: expected a fraction in (0, 1]"),
    ("runs: [{scenario: S, step_time_s: 1, speed: 3}]", "runs[0].speed: unknown key"),
    ("runs: [{scenario: S, step_time_s: 1, set: 4}]", "runs[0].set: expected a mapping"),
    ("runs: [{scenario: S, step_time_s: 1, set: {parallel.tensor: 3}}]", "runs[0]:"),
    ("runs: [{scenario: S, step_time_s: 1, name: a}, {scenario: S, step_time_s: 2, name: a}]", "'a' names two runs"),
    ("runs: [{scenario: nope.yaml, step_time_s: 1}]", "nope.yaml: file not found"),
    ("runs: {}\nextra: 1", "unknown key 'extra'"),
])
def test_bad_runs_files_get_one_line_naming_the_key(tmp_path, capsys, content, expected):
    path = tmp_path / "runs.yaml"
    path.write_text(content.replace(": S", f": {SCENARIO}").replace("{scenario: S", "{scenario: " + SCENARIO))
    assert main(["fit", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and str(path) in err


@pytest.mark.parametrize("args,expected", [
    (["--fit", "speed"], "unknown knob 'speed'"),
    (["--fit", "compute,compute"], "a knob is named twice"),
    (["--noise", "0"], "--noise 0.0: expected a positive relative noise"),
    (["--cross-validate"], "--cross-validate needs at least two runs"),
])
def test_bad_options_get_one_line(tmp_path, capsys, args, expected):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [{"scenario": SCENARIO, "step_time_s": 5.0}]}))
    assert main(["fit", str(path)] + args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err


def test_runs_on_different_gpus_are_refused(tmp_path):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [
        {"scenario": SCENARIO, "step_time_s": 5.0},
        {"scenario": SCENARIO, "step_time_s": 5.0, "set": {"system.preset": "dgx-h100"}, "name": "h100"}]}))
    with pytest.raises(PipesimError, match="different GPUs"):
        fit_runs(read_runs(str(path)), [KNOBS["compute"]])


def test_any_runs_file_is_read_or_refused_in_one_line(tmp_path):
    """Hypothesis: whatever a runs file holds, read_runs returns runs or raises PipesimError."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=True),
                        st.text(max_size=5), st.just(SCENARIO), st.just("step_time_s"))
    values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                       st.dictionaries(st.sampled_from(
                                                           ["runs", "scenario", "set", "name", "step_time_s",
                                                            "mfu", "tokens_per_s", "parallel.tensor", "x"]), c,
                                                           max_size=4)), max_leaves=12)
    path = tmp_path / "runs.yaml"

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(values)
    def check(doc):
        path.write_text(yaml.safe_dump(doc))
        try:
            read_runs(str(path))
        except PipesimError as exc:
            assert "\n" not in str(exc)
    check()


def test_runs_with_a_measured_cpu_host_model_are_refused(tmp_path, monkeypatch):
    """A CPU profile's host model sets the launch cost and the links itself (calibrate/host.py);
    fitting them over it would be overwritten, so such runs are refused by name."""
    import pipesim.calibrate.host as host
    monkeypatch.setattr(host, "with_host_model", lambda s: object())
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [{"scenario": SCENARIO, "step_time_s": 5.0, "name": "cpu"}]}))
    with pytest.raises(PipesimError, match="run 'cpu': costs.profile carries a measured CPU host model"):
        fit_runs(read_runs(str(path)), [KNOBS["compute"]])


def test_validate_diagnose_fits_each_knob_alone_to_a_family():
    """`pipesim validate SUITE --diagnose` (whatif/diagnose.py), on the closed form for speed: one
    row per knob, each the family's MAPE with that knob alone fitted, never above today's."""
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.diagnose import diagnose, format_diagnosis
    from pipesim.whatif.validation import run_suite
    results = run_suite(["korthikanti22"], evaluator=analytic_report)["korthikanti22"]
    ((label, now, rows),) = diagnose("korthikanti22", results, engine="analytic", jobs=1)
    assert label == "korthikanti22"
    assert {r.knob for r in rows} == set(KNOBS)
    assert now == pytest.approx(sum(abs(r.error_pct) for r in results) / len(results))
    assert all(r.mape_pct <= now + 0.05 for r in rows)
    launch = next(r for r in rows if r.knob == "launch")
    assert launch.status == "prior only"          # 2022-size GPT layers: a launch floor never binds
    text = format_diagnosis("korthikanti22", now, rows)
    assert text.splitlines()[0].startswith("diagnosis korthikanti22") and len(text.splitlines()) == 7


def test_out_is_refused_before_fitting_when_the_runs_use_different_system_presets(tmp_path, capsys):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [
        {"scenario": SCENARIO, "step_time_s": 5.0},
        {"scenario": SCENARIO, "step_time_s": 5.0, "name": "b",
         "set": {"system.preset": "dgx-a100-80gb", "system.num_nodes": 2}}]}))
    assert main(["fit", str(path), "--out", str(tmp_path / "o.yaml")]) == 2
    captured = capsys.readouterr()
    assert "--out: the runs do not share one system preset" in captured.err and captured.out == ""


def test_predict_a_layout_not_timed_with_the_spread_of_the_fitted_values(tmp_path):
    """Fitted on three layouts, the fourth (the ZeRO-3 one, as a scenario file) is predicted from the
    fitted values; its spread comes from their covariance and is reported in %."""
    raw = yaml.safe_load(Path(SCENARIO).read_text())
    base = Path(SCENARIO).parent
    raw["model"]["preset"] = str(base / raw["model"]["preset"])
    raw["system"]["preset"] = str(base / raw["system"]["preset"])
    raw["parallel"] = {"tensor": 1, "pipeline": 1, "data": 16}
    raw["training"]["zero_stage"] = 3
    target = tmp_path / "zero3.yaml"
    target.write_text(yaml.safe_dump(raw))
    truth = step(LAYOUTS[3], [f"{k}={v}" for k, v in TRUTH.items()])["step_time_s"]
    result = fit_runs(read_runs(write_runs(tmp_path, LAYOUTS[:3])), parse_knobs("compute,network"),
                      predict=(str(target),))
    (p,) = result.predictions
    assert p.default_step_s == pytest.approx(step(LAYOUTS[3])["step_time_s"], rel=1e-6)
    assert 0 < p.sd_pct < 50
    # closer to the truth than the presets are
    assert abs(p.step_s / truth - 1) < abs(p.default_step_s / truth - 1)


def test_a_bad_prediction_target_is_refused_before_fitting(tmp_path, capsys):
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [{"scenario": SCENARIO, "step_time_s": 5.0}]}))
    assert main(["fit", str(path), "--predict", str(tmp_path / "missing.yaml")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("pipesim fit: error: --predict:") and "missing.yaml: file not found" in captured.err
    assert captured.out == ""


def test_megatron_logged_tflops_are_read_with_megatrons_own_flop_count(tmp_path, monkeypatch):
    """`megatron_tflops_per_gpu` (what Megatron-Core's log prints) implies the step through
    Megatron-Core's FLOP count (costs/summary.py megatron_core_flops), not pipesim's model FLOPs:
    the figure pipesim's own step gives under that count implies exactly that step, and a count
    twice as large implies a step twice as long."""
    import pipesim.costs.summary as summary
    s = pipesim.load_scenario(SCENARIO)
    rep = step({})
    logged = summary.megatron_core_flops(s) / (rep["step_time_s"] * s.num_gpus * 1e12)
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [{"scenario": SCENARIO, "megatron_tflops_per_gpu": logged}]}))
    runs = read_runs(str(path))
    assert fit_runs(runs, parse_knobs("compute")).runs[0].measured_step_s == pytest.approx(rep["step_time_s"], rel=1e-9)
    count = summary.megatron_core_flops
    monkeypatch.setattr(summary, "megatron_core_flops", lambda sc: 2 * count(sc))
    assert runs[0].implied_step(rep, s) == pytest.approx(2 * rep["step_time_s"], rel=1e-9)


def test_diagnose_fits_a_family_of_several_gpus_one_gpu_at_a_time():
    """megatron-v1 runs on V100 and A100: one diagnosis per GPU type (a fit is of one system), not
    the refusal a mixed fit gets."""
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.diagnose import diagnose
    from pipesim.whatif.validation import run_suite
    results = run_suite(["megatron-v1"], evaluator=analytic_report)["megatron-v1"]
    groups = diagnose("megatron-v1", results, engine="analytic", jobs=1)
    assert len(groups) >= 2 and all(label.startswith("megatron-v1 on ") for label, _, _ in groups)
    assert all(len(rows) == len(KNOBS) for _, _, rows in groups)
