"""pipesim fit RUNS.yaml - fit a few hardware efficiencies to step times measured on your cluster."""
from __future__ import annotations

import json
from dataclasses import asdict


def add_arguments(p) -> None:
    from pipesim.calibrate.runs_file import MEASURES
    from pipesim.calibrate.step_fit import DEFAULT_KNOBS, KNOBS, NOISE
    knobs = "; ".join(f"{k.name}: {k.doc}" for k in KNOBS.values())
    p.add_argument("runs", help=f"YAML with `runs:`, each a scenario, optional `set:` overrides and one "
                                f"measured figure ({', '.join(MEASURES)}); see docs/FIT.md")
    p.add_argument("--fit", default=",".join(DEFAULT_KNOBS), metavar="KNOB[,KNOB]",
                   help=f"knobs to fit (default {','.join(DEFAULT_KNOBS)}). {knobs}")
    p.add_argument("--noise", type=float, default=NOISE, metavar="F",
                   help=f"relative timing noise of a measured step (default {NOISE})")
    p.add_argument("--cross-validate", action="store_true",
                   help="also refit without each run and predict it: the error to expect on a layout not "
                        "measured (one more fit per run)")
    p.add_argument("--predict", action="append", default=[], metavar="SCENARIO",
                   help="a scenario to predict with the fitted values, with the spread their uncertainty "
                        "gives it (repeatable): the layout you plan, on the cluster you timed")
    p.add_argument("--engine", choices=["sim", "analytic"], default="sim",
                   help="sim = the simulator (default); analytic = the closed-form screen (faster, for "
                        "runs too large to simulate a few hundred times)")
    p.add_argument("--jobs", type=int, default=2, metavar="N",
                   help="runs simulated in parallel (processes; default 2, 1 = in process)")
    p.add_argument("--out", metavar="SYSTEM.yaml",
                   help="write a system preset file with the fitted values (use it as system.preset)")
    p.add_argument("--json", help="write the fit as JSON")


def run(args) -> int:
    from pipesim.calibrate.runs_file import read_runs
    from pipesim.calibrate.step_fit import fit_runs, parse_knobs
    from pipesim.commands.progress import counting
    from pipesim.report.folder import check_output

    knobs = parse_knobs(args.fit)
    check_output(args.json, "--json")
    check_output(args.out, "--out")
    runs = read_runs(args.runs)
    preset = common_system_preset(runs) if args.out else None       # refused before the fit, not after
    for target in args.predict:                                       # a bad target too
        _check_target(target)
    what = "simulations" if args.engine == "sim" else "evaluations"
    with counting(f"fitting {', '.join(k.name for k in knobs)} to {len(runs)} runs", what) as update:
        result = fit_runs(runs, knobs, args.noise, args.cross_validate, update, args.engine, max(1, args.jobs),
                          tuple(args.predict))
    print(format_fit(result, len(runs), len(knobs)))
    if args.out:
        text = system_file(result, preset, len(runs), args.out)
        _write(args.out, text)
        print(f"wrote {args.out}")
    if args.json:
        _write(args.json, json.dumps(asdict(result), indent=1))
    return 0


def _check_target(path: str) -> None:
    from pipesim.errors import PipesimError, ScenarioError
    from pipesim.scenario.load import load_scenario
    try:
        load_scenario(path)
    except ScenarioError as exc:
        raise PipesimError(f"--predict: {exc}") from None


def _write(path: str, text: str) -> None:
    from pipesim.errors import PipesimError
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except OSError as exc:
        raise PipesimError(f"{path}: cannot write: {exc.strerror}") from None


def format_fit(result, n_runs: int, n_knobs: int) -> str:
    from pipesim.calibrate.step_fit import RunFit
    loo = any(r.loo_step_s is not None for r in result.runs)
    head = f"{'run':28s} {'measured s':>11s} {'pipesim s':>10s} {'err %':>7s} {'fitted s':>10s} {'err %':>7s}"
    head += f" {'left out s':>10s} {'err %':>7s}" if loo else ""
    lines = ["runs (err %: + = pipesim faster than measured; fitted = with the values below)", head]
    for r in result.runs:
        e0, e1 = RunFit.error(r.default_step_s, r.measured_step_s), RunFit.error(r.fitted_step_s, r.measured_step_s)
        line = (f"{r.name[:28]:28s} {r.measured_step_s:11.4g} {r.default_step_s:10.4g} {e0:+7.1f} "
                f"{r.fitted_step_s:10.4g} {e1:+7.1f}")
        if loo:
            line += f" {r.loo_step_s:10.4g} {RunFit.error(r.loo_step_s, r.measured_step_s):+7.1f}"
        lines.append(line + ("  (pipesim: out of memory)" if r.oom else ""))
    summary = f"MAPE {result.mape('default_step_s'):.1f} % with the presets, {result.mape('fitted_step_s'):.1f} % fitted"
    if loo:
        summary += f", {result.mape('loo_step_s'):.1f} % on each run left out of its fit"
    lines += [summary, "", f"{'knob':8s} {'key':32s} {'preset':>9s} {'fitted':>9s} {'± 1 sd':>8s}  status"]
    for k in result.knobs:
        lines.append(f"{k.name:8s} {k.key:32s} {k.default:9.4g} {k.fitted:9.4g} {k.sigma:8.2g}  {k.status}")
    if n_runs < n_knobs:
        lines.append(f"{n_runs} runs for {n_knobs} knobs: the prior (the preset value, a factor of 2 either way) "
                     f"decides what the runs cannot")
    if result.predictions:
        lines += ["", "predictions with the fitted values (± one standard deviation of their uncertainty)",
                  f"{'scenario':40s} {'presets s':>10s} {'fitted s':>10s} {'± %':>6s}"]
        for p in result.predictions:
            lines.append(f"{p.scenario[-40:]:40s} {p.default_step_s:10.4g} {p.step_s:10.4g} {p.sd_pct:6.1f}")
        if loo:
            lines.append(f"the runs left out of their fits were off by {result.mape('loo_step_s'):.1f} % on average: "
                         f"expect at least that on a layout not timed")
    what = "simulations" if result.engine == "sim" else "closed-form evaluations"
    lines += [f"{result.evaluations} {what}; timing noise {result.noise:g} of a step",
              "apply: " + " ".join(f"--set {o}" for o in result.overrides)]
    return "\n".join(lines)


def common_system_preset(runs) -> str:
    """The system preset every run's scenario names (a built-in name or a preset file's path)."""
    from pipesim.errors import PipesimError
    presets = {_system_preset(r) for r in runs}
    if len(presets) != 1 or None in presets:
        raise PipesimError(f"--out: the runs do not share one system preset ({', '.join(sorted(map(str, presets)))}); "
                           f"apply the printed --set overrides instead")
    return presets.pop()


def system_file(result, preset: str, n_runs: int, out_path: str) -> str:
    """A system preset file: the runs' common system preset (a preset file by its path from
    `out_path`) with the fitted keys over it."""
    import os
    import yaml
    from pipesim.scenario.file_paths import PRESET_FILE
    if preset.endswith(PRESET_FILE):
        preset = os.path.relpath(preset, os.path.dirname(os.path.abspath(out_path)))
    nested: dict = {}
    for o in result.overrides:
        key, value = o.split("=", 1)
        node = nested
        parts = key.split(".")[1:]          # below `system.`
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = float(value)
    body = yaml.safe_dump(dict({"preset": preset}, **nested), sort_keys=False)
    return (f"# written by `pipesim fit` from {n_runs} measured runs: their system preset with the fitted\n"
            f"# values over it. In a scenario, in place of that preset:  system: {{preset: <this file>, ...}}\n" + body)


def _system_preset(run) -> str | None:
    """The system preset a run's scenario names (a built-in name, or a preset file's absolute path)."""
    from pipesim.calibrate.step_fit import read_run
    section = read_run(run.scenario, run.sets).get("system")
    preset = section if isinstance(section, str) else (section or {}).get("preset")
    return preset if isinstance(preset, str) else None
