"""`pipesim crosscheck SCENARIO [--nproc N] [--profile P] [--calibrate-out P] [--steps K] [--warmup W]
[--repeat R] [--tolerance PCT] [--nice N] [--no-pin] [--scale S] [--set a.b=v] [--json OUT] [--plot OUT.png]`
`pipesim crosscheck --suite [--seed S] [--cases N] [--json OUT]`

One scenario: emulate it with the op costs and the host model calibrated inside the ranks right
before the timed steps (rank_calibration.py; or with --profile, a given profile), simulate with
that profile, compare, and judge the step time against --tolerance unless the measurement is too
noisy to tell (see `verdict`). --suite runs the seeded grid of emulator/suite.py.
"""
from __future__ import annotations

import json
import os
import tempfile

DEFAULT_NICE = 20          # raise the ranks' priority this much (root only; see emulator/host.py)
DEFAULT_TOLERANCE_PCT = 10.0


def add_arguments(parser) -> None:
    parser.add_argument("scenario", nargs="?", help="scenario YAML (its system should describe this machine)")
    parser.add_argument("--suite", action="store_true", help="run the seeded crosscheck suite instead")
    parser.add_argument("--seed", type=int, default=0, help="--suite: seed of the case grid (default 0)")
    parser.add_argument("--cases", type=int, default=None, help="--suite: number of cases (default 21)")
    parser.add_argument("--nproc", type=int, default=None, help="processes (must equal tensor*pipeline*data)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key (repeatable)")
    parser.add_argument("--scale", default=None, help="shrink the model (see pipesim emulate --scale)")
    parser.add_argument("--profile", default=None,
                        help="use this cost profile instead of calibrating inside the ranks")
    parser.add_argument("--calibrate-out", default=None, help="also write the calibrated profile here")
    parser.add_argument("--quick", action="store_true", help="shorter calibration budget per op")
    parser.add_argument("--steps", type=int, default=12, help="measured emulator steps (default 12; median)")
    parser.add_argument("--warmup", type=int, default=2, help="emulator warm-up steps (default 2)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="independent runs (calibration + emulation each); with 2 or more the verdict "
                             "uses their spread (run to run) instead of the spread over steps")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE_PCT,
                        help="step-time error judged acceptable, percent (default 10)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--nice", type=int, default=DEFAULT_NICE,
                        help=f"raise the ranks' CPU priority by N (root; default {DEFAULT_NICE}, 0 = off)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin rank r to core r")
    parser.add_argument("--json", dest="json_out", default=None, help="write {simulated, measured, comparison}")
    parser.add_argument("--plot", default=None, help="side-by-side timeline PNG")


def contention(emu: dict) -> float | None:
    """Median over the measured steps of wall / thread-CPU time of the compute actions
    (results.contention): 1.0 when the ranks had their cores to themselves."""
    import statistics
    xs = [st["contention"] for st in emu.get("steps", []) if st.get("contention")]
    return statistics.median(xs) if xs else None


def median_interval_pct(emu: dict, key: str = "step_time_uncontended_s") -> float | None:
    """Half-width of the ~95 % interval of the median step time, percent of it: 1.96 x the
    standard error of a median (1.2533 sigma / sqrt(n), Kenney & Keeping 1962, Sec. 13.13), with
    sigma estimated robustly as 1.4826 x the steps' median absolute deviation (Rousseeuw & Croux
    1993) where recorded: one step stalled by something outside the model (the suite's zb-v L8
    h96 a6 once took 232 ms against 90-101 ms) moves the median little and must not widen its
    interval to +-30 %, as the standard deviation did."""
    if key not in emu:
        key = "step_time_s"
    sp = emu.get(key.replace("_s", "_spread_s") if key != "step_time_s" else "step_time_spread_s") or {}
    n, med = sp.get("n", 0), emu.get(key)
    if n < 2 or not med:
        return None
    sigma = 1.4826 * sp["mad"] if "mad" in sp else sp["std"]
    return 100.0 * 1.96 * 1.2533 * sigma / n ** 0.5 / med


def judge(err: float, spread: float, tolerance: float) -> str:
    """pass when the error is within the tolerance even at the far end of the spread, fail when it
    is outside even at the near end, otherwise "not judged"."""
    if abs(err) + spread <= tolerance:
        return "pass"
    if abs(err) - spread > tolerance:
        return "fail"
    return "not judged"


def verdict(c: dict, emu: dict, tolerance: float) -> dict:
    """Judge the step-time error e against the tolerance t given the measurement's spread s (the
    median's interval over the steps, median_interval_pct, and the op costs' drift from the
    calibration before the steps to the traces beside them, calibration_drift_pct): pass when
    |e| + s <= t, fail when |e| - s > t, otherwise the spread is too large to tell and the
    crosscheck refuses to judge. e is taken against the measured step with the time other
    processes took removed (results.contention) when the emulator
    recorded CPU times, else against the wall-clock step."""
    err = c["step"].get("step_time_uncontended_error_pct", c["step"]["step_time_error_pct"])
    steps = median_interval_pct(emu)
    drift = c.get("calibration_drift_pct")
    # independent uncertainties add in quadrature (GUM, JCGM 100:2008, Sec. 5.1.2)
    spread = None if steps is None else (steps ** 2 + (drift or 0.0) ** 2) ** 0.5
    cont = contention(emu)
    out = {"error_pct": err, "spread_pct": spread, "step_spread_pct": steps, "drift_pct": drift,
           "tolerance_pct": tolerance, "contention": cont,
           "steps": (emu.get("step_time_spread_s") or {}).get("n", 0)}
    if err is None or spread is None:
        out.update(status="not judged", message="not judged: fewer than 2 measured steps (use --steps 5 or more)")
    elif (status := judge(err, spread, tolerance)) != "not judged":
        out.update(status=status, message=f"{status}: step error {err:+.1f} % (measurement ±{spread:.1f} %) "
                                          f"is {'within' if status == 'pass' else 'outside'} ±{tolerance:g} %")
    else:
        out.update(status="not judged",
                   message=f"not judged: the measurement is uncertain by ±{spread:.1f} % (steps ±{steps:.1f} %, "
                           f"op costs drifted ±{drift or 0.0:.1f} % during the run, wall/CPU time "
                           f"{cont or float('nan'):.2f}), too much to tell whether the "
                           f"{err:+.1f} % error is within ±{tolerance:g} %; rerun on a quieter machine "
                           f"or with more --steps")
    return out


def _run_error(run) -> float:
    st = run[2]["step"]
    return st.get("step_time_uncontended_error_pct", st["step_time_error_pct"])


def _run_steps(run) -> dict:
    """One run's predicted and measured step (the measured one with the time other processes took
    removed when recorded): which side moved when the runs disagree."""
    st = run[2]["step"]
    return {"predicted_s": st["step_time_predicted_s"],
            "measured_s": st.get("step_time_uncontended_s") or st["step_time_measured_s"],
            "steps_s": [x["step_time_s"] for x in run[1].get("steps", [])]}


def repeated_verdict(errors: list[float], tolerance: float, single: dict) -> dict:
    """The verdict over independent runs: the median error against the run-to-run spread (half
    the range of the errors), with the same rule as `verdict`."""
    import statistics
    err = statistics.median(errors)
    spread = (max(errors) - min(errors)) / 2
    out = dict(single, error_pct=err, spread_pct=spread, runs=len(errors), run_errors_pct=errors)
    if (status := judge(err, spread, tolerance)) != "not judged":
        out.update(status=status, message=f"{status}: median step error {err:+.1f} % over {len(errors)} runs "
                                          f"(run to run ±{spread:.1f} %) is "
                                          f"{'within' if status == 'pass' else 'outside'} ±{tolerance:g} %")
    else:
        out.update(status="not judged",
                   message=f"not judged: the step error varies by ±{spread:.1f} % from run to run, too much to "
                           f"tell whether the median {err:+.1f} % is within ±{tolerance:g} %")
    return out


def crosscheck(scenario, *, overrides=(), scale=None, profile=None, calibrate_out=None, quick=False,
               steps=12, warmup=2, backend="gloo", timeout=60.0, nice=DEFAULT_NICE, pin=True,
               tolerance=DEFAULT_TOLERANCE_PCT, progress=None):
    """Returns (simulated report dict, measured result dict, comparison dict with "verdict")."""
    from pipesim import simulate
    from pipesim.report.compare import compare
    from pipesim.emulator import emulate, prepare
    from pipesim.emulator.rank_calibration import DEFAULT_BUDGET_S
    s = prepare(scenario, overrides, scale)
    if profile is None and backend == "nccl":
        profile = calibrate_out or os.path.join(tempfile.mkdtemp(prefix="pipesim-cal-"), "profile.json")
        calibrate_for(s, profile, quick=quick, device="cuda", progress=progress)
    cal = None if profile is not None else {"budget_s": DEFAULT_BUDGET_S / (2 if quick else 1)}
    emu = emulate(s, steps=steps, warmup=warmup, backend=backend, timeout=timeout, nice=nice, pin=pin,
                  calibrate=cal)
    if profile is None:
        if "profile" not in emu:
            from pipesim.errors import PipesimError
            raise PipesimError("the ranks did not write their calibration (see the run's rank logs in "
                               f"{emu.get('run_dir')})")
        profile = calibrate_out or os.path.join(emu.get("run_dir") or tempfile.mkdtemp(), "profile.json")
        with open(profile, "w") as fh:
            json.dump(emu.pop("profile"), fh, indent=1)
    drift = calibration_drift_pct(s, emu, profile)
    s = prepare(s, [f"costs.profile={os.path.abspath(profile)}"])
    sim = simulate(s).to_dict()
    c = compare(sim, emu)
    c["calibration_drift_pct"] = drift
    if emu.get("step_time_uncontended_s"):
        from pipesim.report.compare import err_pct
        c["step"]["step_time_uncontended_s"] = emu["step_time_uncontended_s"]
        c["step"]["step_time_uncontended_error_pct"] = err_pct(sim["step_time_s"], emu["step_time_uncontended_s"])
    c["verdict"] = verdict(c, emu, tolerance)
    c["profile"] = os.path.abspath(profile)
    return sim, emu, c


def calibration_drift_pct(s, emu: dict, profile: str) -> float | None:
    """Half the difference of the step times predicted from the calibration before the timed
    steps and the one after them, percent of their mean: how far the machine's op costs moved
    from the start of the run to the steps (the later calibration's in-model costs pool the
    traces taken between the steps; the two profiles are written beside `profile`). Kept in the
    verdict's spread although the prediction uses the traces beside the steps: a conservative
    bound. None without both."""
    if "profile_before" not in emu or "profile_after" not in emu:
        return None
    from pipesim import simulate
    from pipesim.emulator import prepare
    t = []
    for when in ("before", "after"):
        path = os.path.splitext(profile)[0] + f".{when}.json"
        with open(path, "w") as fh:
            json.dump(emu.pop(f"profile_{when}"), fh, indent=1)
        t.append(simulate(prepare(s, [f"costs.profile={os.path.abspath(path)}"])).to_dict()["step_time_s"])
    return 100.0 * abs(t[0] - t[1]) / (t[0] + t[1])


def calibrate_for(s, out_path: str, quick: bool = False, device: str = "cpu", progress=None) -> str:
    """A separate calibration process (the CUDA path, and benchmarks that reuse one profile)."""
    from pipesim.calibrate.run import calibrate
    profile = calibrate(device, scenario=s, quick=quick, threads=1, comm=True, progress=progress)
    profile.save(out_path)
    return out_path


def run(args) -> int:
    from pipesim.commands.emulate import _backend
    from pipesim.report.compare import format_table, plot
    from pipesim.emulator import prepare
    from pipesim.errors import ScenarioError
    if args.suite:
        from pipesim.emulator.suite import format_suite, run_suite
        res = run_suite(seed=args.seed, cases=args.cases, steps=args.steps, warmup=args.warmup,
                        nice=args.nice, pin=not args.no_pin, progress=lambda line: print(line, flush=True))
        print(format_suite(res))
        if args.json_out:
            with open(args.json_out, "w") as fh:
                json.dump(res, fh, indent=1, default=float)
        return 0
    if not args.scenario:
        raise ScenarioError("pipesim crosscheck: give a SCENARIO, or --suite")
    backend = _backend(args)
    from pipesim.scenario.load import load_scenario
    if load_scenario(args.scenario, args.overrides).model.is_moe:     # MoE: pipesim/emulator/moe.py
        return _run_moe(args)
    s = prepare(args.scenario, args.overrides, args.scale)
    if args.nproc is not None and args.nproc != s.num_gpus:
        raise ScenarioError(f"{s.source}: --nproc {args.nproc} but tensor({s.parallel.tensor})*pipeline("
                            f"{s.parallel.pipeline})*data({s.parallel.data}) = {s.num_gpus}")
    load0 = os.getloadavg()
    runs = []
    for _ in range(max(1, args.repeat)):
        runs.append(crosscheck(s, profile=args.profile, calibrate_out=args.calibrate_out, quick=args.quick,
                               steps=args.steps, warmup=args.warmup, backend=backend, timeout=args.timeout,
                               nice=args.nice, pin=not args.no_pin, tolerance=args.tolerance))
    sim, emu, c = runs[len(runs) // 2] if len(runs) < 3 else sorted(runs, key=_run_error)[len(runs) // 2]
    print(format_table(c))
    if len(runs) > 1:
        c["verdict"] = repeated_verdict([_run_error(r) for r in runs], args.tolerance, c["verdict"])
        c["verdict"]["run_steps"] = [_run_steps(r) for r in runs]
        print("\nrun-to-run: step errors " + ", ".join(f"{_run_error(r):+.1f} %" for r in runs))
        print("  predicted ms  " + "  ".join(f"{x['predicted_s'] * 1e3:8.2f}" for x in c["verdict"]["run_steps"]))
        print("  measured ms   " + "  ".join(f"{x['measured_s'] * 1e3:8.2f}" for x in c["verdict"]["run_steps"]))
    v = c["verdict"]
    load1 = os.getloadavg()
    st = c["step"]
    if st.get("step_time_uncontended_s"):
        print(f"\nstep time without the time other processes took (wall / wall-to-CPU ratio per step): "
              f"measured {st['step_time_uncontended_s'] * 1e3:.3f} ms, predicted "
              f"{st['step_time_predicted_s'] * 1e3:.3f} ms, error {st['step_time_uncontended_error_pct']:+.1f} %")
    drift = v.get("drift_pct")
    print(f"measurement: median of {v['steps']} steps (±{v.get('step_spread_pct') or float('nan'):.1f} %), "
          f"op costs drifted ±{drift if drift is not None else float('nan'):.1f} % between the calibration "
          f"before them and the traces beside them, wall/CPU time of compute {v['contention'] or float('nan'):.3f}, load "
          f"average {load0[0]:.2f} -> {load1[0]:.2f} on {os.cpu_count()} CPUs; profile {c['profile']}")
    print(v["message"])
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"simulated": sim, "measured": emu, "comparison": c,
                       "load_average": [load0[0], load1[0]]}, fh, default=float)
    if args.plot:
        plot(sim, emu, args.plot, title=os.path.basename(args.scenario))
        print(f"wrote {args.plot}")
    return 0


def _run_moe(args) -> int:
    from pipesim.emulator.moe_crosscheck import crosscheck_scenario, format_crosscheck
    from pipesim.scenario.load import load_scenario
    result = crosscheck_scenario(load_scenario(args.scenario, args.overrides), steps=args.steps, warmup=args.warmup,
                                 timeout=max(args.timeout, 300.0), nice=args.nice, pin=not args.no_pin,
                                 budget_s=0.05 if args.quick else 0.1)
    print(format_crosscheck(result))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(result, fh)
    return 0
