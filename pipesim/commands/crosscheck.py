"""`pipesim crosscheck SCENARIO [--nproc N] [--profile P | --calibrate-out P] [--steps K] [--scale S]
[--set a.b=v] [--json OUT] [--plot OUT.png]`

calibrate (on this device, the scenario's op shapes, one thread per rank) -> simulate with that
profile -> emulate -> compare; prints the comparison table.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile


def add_arguments(parser) -> None:
    parser.add_argument("scenario", help="scenario YAML (its system should describe this machine)")
    parser.add_argument("--nproc", type=int, default=None, help="processes (must equal tensor*pipeline*data)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key (repeatable)")
    parser.add_argument("--scale", default=None, help="shrink the model (see pipesim emulate --scale)")
    parser.add_argument("--profile", default=None,
                        help="use this cost profile instead of calibrating (e.g. one written by an earlier run)")
    parser.add_argument("--calibrate-out", default=None, help="where to write the calibrated profile")
    parser.add_argument("--quick", action="store_true", help="quicker, noisier calibration")
    parser.add_argument("--steps", type=int, default=3, help="measured emulator steps (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="emulator warm-up steps (default 1)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--nice", type=int, default=0,
                        help="raise calibration's and the ranks' CPU priority by N (root; for a shared machine)")
    parser.add_argument("--json", dest="json_out", default=None, help="write {simulated, measured, comparison}")
    parser.add_argument("--plot", default=None, help="side-by-side timeline PNG")


def calibrate_for(s, out_path: str, quick: bool = False, device: str = "cpu", progress=None) -> str:
    from pipesim.calibrate import calibrate
    profile = calibrate(device, scenario=s, quick=quick, threads=1, comm=True, progress=progress)
    profile.save(out_path)
    return out_path


def crosscheck(scenario, *, overrides=(), scale=None, profile=None, calibrate_out=None, quick=False,
               steps=3, warmup=1, backend="gloo", timeout=60.0, device="cpu", progress=None, nice=0):
    """Returns (simulated report dict, measured result dict, comparison dict)."""
    from pipesim import simulate
    from pipesim.compare import compare
    from pipesim.emulator import emulate, prepare
    s = prepare(scenario, overrides, scale)
    if profile is None:
        profile = calibrate_out or os.path.join(tempfile.mkdtemp(prefix="pipesim-cal-"), "profile.json")
        calibrate_for(s, profile, quick=quick, device=device, progress=progress)
    s = prepare(s, [f"costs.profile={os.path.abspath(profile)}"])
    sim = simulate(s).to_dict()
    emu = emulate(s, steps=steps, warmup=warmup, backend=backend, timeout=timeout, nice=nice)
    return sim, emu, compare(sim, emu)


def run(args) -> int:
    from pipesim.commands.calibrate import ProgressBar
    from pipesim.commands.emulate import _backend
    from pipesim.compare import format_table, plot
    from pipesim.emulator import prepare
    from pipesim.errors import ScenarioError
    backend = _backend(args)
    from pipesim.scenario_load import load_scenario
    if load_scenario(args.scenario, args.overrides).model.is_moe:     # MoE: pipesim/emulator/moe.py
        return _run_moe(args)
    s = prepare(args.scenario, args.overrides, args.scale)
    if args.nproc is not None and args.nproc != s.num_gpus:
        raise ScenarioError(f"{s.source}: --nproc {args.nproc} but tensor*pipeline*data = {s.num_gpus}")
    device = "cuda" if backend == "nccl" else "cpu"
    if args.nice:
        from pipesim.emulator.worker import raise_priority
        raise_priority(args.nice)
    sim, emu, c = crosscheck(s, profile=args.profile, calibrate_out=args.calibrate_out, quick=args.quick,
                             steps=args.steps, warmup=args.warmup, backend=backend, timeout=args.timeout,
                             device=device, progress=ProgressBar(stream=sys.stderr), nice=args.nice)
    print(format_table(c))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"simulated": sim, "measured": emu, "comparison": c}, fh, default=float)
    if args.plot:
        plot(sim, emu, args.plot, title=os.path.basename(args.scenario))
        print(f"wrote {args.plot}")
    return 0


def _run_moe(args) -> int:
    from pipesim.emulator.moe import crosscheck_scenario, format_crosscheck
    from pipesim.scenario_load import load_scenario
    result = crosscheck_scenario(load_scenario(args.scenario, args.overrides))
    print(format_crosscheck(result))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(result, fh)
    return 0
