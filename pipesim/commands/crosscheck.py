"""`pipesim crosscheck SCENARIO [--nproc N] [--profile P] [--calibrate-out P] [--steps K] [--warmup W]
[--tolerance PCT] [--nice N] [--no-pin] [--scale S] [--set a.b=v] [--json OUT] [--plot OUT.png]`
`pipesim crosscheck --suite [--seed S] [--cases N] [--json OUT]`

One scenario: emulate it with the op costs and the host model calibrated inside the ranks right
before the timed steps (rank_calibration.py; or with --profile, a given profile), simulate with
that profile, compare, and judge the step time against --tolerance unless the measurement is too
noisy to tell (see `verdict`). --suite runs the seeded grid of emulator/suite.py.
"""
from __future__ import annotations

import json
import os
import sys
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
    parser.add_argument("--steps", type=int, default=6, help="measured emulator steps (default 6; median)")
    parser.add_argument("--warmup", type=int, default=2, help="emulator warm-up steps (default 2)")
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
    """Mean wall / thread-CPU time of the measured compute actions: 1.0 when the ranks had their
    cores to themselves; 1.2 means others took a sixth of the time."""
    pairs = [(e["end"] - e["start"], e["args"]["cpu_s"]) for e in emu.get("events", [])
             if e.get("stream") == "compute" and e["kind"] in ("F", "B", "I", "W")
             and (e.get("args") or {}).get("cpu_s", 0) > 1e-4]
    if not pairs:
        return None
    return sum(w for w, _ in pairs) / sum(c for _, c in pairs)


def median_interval_pct(emu: dict, key: str = "step_time_uncontended_s") -> float | None:
    """Half-width of the ~95 % interval of the median step time, percent of it: 1.96 x the
    standard error of a median (1.2533 sigma / sqrt(n), Kenney & Keeping 1962, Sec. 13.13)."""
    if key not in emu:
        key = "step_time_s"
    sp = emu.get(key.replace("_s", "_spread_s") if key != "step_time_s" else "step_time_spread_s") or {}
    n, med = sp.get("n", 0), emu.get(key)
    if n < 2 or not med:
        return None
    return 100.0 * 1.96 * 1.2533 * sp["std"] / n ** 0.5 / med


def verdict(c: dict, emu: dict, tolerance: float) -> dict:
    """Judge the step-time error e against the tolerance t given the measurement's spread s
    (median_interval_pct): pass when |e| + s <= t, fail when |e| - s > t, otherwise the spread
    is too large to tell and the crosscheck refuses to judge. e is taken against the measured
    step with the time other processes took removed (results.contention) when the emulator
    recorded CPU times, else against the wall-clock step."""
    err = c["step"].get("step_time_uncontended_error_pct", c["step"]["step_time_error_pct"])
    spread = median_interval_pct(emu)
    cont = contention(emu)
    out = {"error_pct": err, "spread_pct": spread, "tolerance_pct": tolerance, "contention": cont,
           "steps": (emu.get("step_time_spread_s") or {}).get("n", 0)}
    if err is None or spread is None:
        out.update(status="not judged", message="not judged: fewer than 2 measured steps (use --steps 5 or more)")
    elif abs(err) + spread <= tolerance:
        out.update(status="pass", message=f"pass: step error {err:+.1f} % (measurement ±{spread:.1f} %) "
                                          f"is within ±{tolerance:g} %")
    elif abs(err) - spread > tolerance:
        out.update(status="fail", message=f"fail: step error {err:+.1f} % (measurement ±{spread:.1f} %) "
                                          f"is outside ±{tolerance:g} %")
    else:
        out.update(status="not judged",
                   message=f"not judged: the measured step time is uncertain by ±{spread:.1f} % (steps vary; "
                           f"wall/CPU time {cont or float('nan'):.2f}), too much to tell whether the "
                           f"{err:+.1f} % error is within ±{tolerance:g} %; rerun on a quieter machine "
                           f"or with more --steps")
    return out


def crosscheck(scenario, *, overrides=(), scale=None, profile=None, calibrate_out=None, quick=False,
               steps=6, warmup=2, backend="gloo", timeout=60.0, nice=DEFAULT_NICE, pin=True,
               tolerance=DEFAULT_TOLERANCE_PCT, progress=None):
    """Returns (simulated report dict, measured result dict, comparison dict with "verdict")."""
    from pipesim import simulate
    from pipesim.compare import compare
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
    s = prepare(s, [f"costs.profile={os.path.abspath(profile)}"])
    sim = simulate(s).to_dict()
    c = compare(sim, emu)
    if emu.get("step_time_uncontended_s"):
        from pipesim.compare import err_pct
        c["step"]["step_time_uncontended_s"] = emu["step_time_uncontended_s"]
        c["step"]["step_time_uncontended_error_pct"] = err_pct(sim["step_time_s"], emu["step_time_uncontended_s"])
    c["verdict"] = verdict(c, emu, tolerance)
    c["profile"] = os.path.abspath(profile)
    return sim, emu, c


def calibrate_for(s, out_path: str, quick: bool = False, device: str = "cpu", progress=None) -> str:
    """A separate calibration process (the CUDA path, and benchmarks that reuse one profile)."""
    from pipesim.calibrate import calibrate
    profile = calibrate(device, scenario=s, quick=quick, threads=1, comm=True, progress=progress)
    profile.save(out_path)
    return out_path


def run(args) -> int:
    from pipesim.commands.emulate import _backend
    from pipesim.compare import format_table, plot
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
    s = prepare(args.scenario, args.overrides, args.scale)
    if args.nproc is not None and args.nproc != s.num_gpus:
        raise ScenarioError(f"{s.source}: --nproc {args.nproc} but tensor({s.parallel.tensor})*pipeline("
                            f"{s.parallel.pipeline})*data({s.parallel.data}) = {s.num_gpus}")
    load0 = os.getloadavg()
    sim, emu, c = crosscheck(s, profile=args.profile, calibrate_out=args.calibrate_out, quick=args.quick,
                             steps=args.steps, warmup=args.warmup, backend=backend, timeout=args.timeout,
                             nice=args.nice, pin=not args.no_pin, tolerance=args.tolerance)
    print(format_table(c))
    v = c["verdict"]
    load1 = os.getloadavg()
    st = c["step"]
    if st.get("step_time_uncontended_s"):
        print(f"\nstep time without the time other processes took (wall / wall-to-CPU ratio per step): "
              f"measured {st['step_time_uncontended_s'] * 1e3:.3f} ms, predicted "
              f"{st['step_time_predicted_s'] * 1e3:.3f} ms, error {st['step_time_uncontended_error_pct']:+.1f} %")
    print(f"measurement: median of {v['steps']} steps, wall/CPU time of compute "
          f"{v['contention'] or float('nan'):.3f}, load average {load0[0]:.2f} -> {load1[0]:.2f} on "
          f"{os.cpu_count()} CPUs; profile {c['profile']}")
    print(v["message"])
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"simulated": sim, "measured": emu, "comparison": c,
                       "load_average": [load0[0], load1[0]]}, fh, default=float)
    if args.plot:
        plot(sim, emu, args.plot, title=os.path.basename(args.scenario))
        print(f"wrote {args.plot}")
    return 0
