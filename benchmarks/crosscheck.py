"""Simulator vs emulator on this machine: a small GPT on 2 pipeline ranks (one CPU thread each,
gloo), for gpipe, 1f1b, interleaved-1f1b (2 chunks) and zb-h1. Calibrates once (the op shapes
are the same for every schedule), then for each schedule simulates with that profile and
emulates; prints predicted and measured step time and peak memory, their errors and the MAPE,
then the same model and batch under torch.distributed.pipelining's ScheduleGPipe / Schedule1F1B
beside the emulator's gpipe / 1f1b (seed 002's reference cross-check).

    python benchmarks/crosscheck.py [--steps 5] [--profile traces/X.json] [--json OUT]

Wall-clock measurements on a shared CPU include time lost to other processes; the "contention"
column is the emulator's mean wall/CPU-time ratio over its compute actions (1.0 = the rank had
its core to itself) and the load average is printed, so a noisy run is visible as such.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "..", "scenarios", "emulator", "crosscheck_gpt.yaml")
CASES = [("gpipe", []), ("1f1b", []),
         ("interleaved-1f1b", ["parallel.virtual_stages=2"]), ("zb-h1", [])]


def contention(result: dict) -> float:
    r = [(e["end"] - e["start"]) / e["args"]["cpu_s"] for e in result.get("events", [])
         if e["stream"] == "compute" and e["kind"] in "FBIW" and e["args"].get("cpu_s", 0) > 1e-4]
    return statistics.fmean(r) if r else float("nan")


def torch_reference(s, name, args):
    from pipesim.emulator import torch_pipelining
    from pipesim.emulator.reference import torch_pipelining_run
    if not torch_pipelining.available():
        return None
    return torch_pipelining_run(s, name, steps=args.steps, warmup=args.warmup, nice=args.nice)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", default=None, help="reuse a CPU profile instead of calibrating")
    ap.add_argument("--scenario", default=SCENARIO)
    ap.add_argument("--json", default=None, help="write all figures here")
    ap.add_argument("--verbose", action="store_true", help="print the full comparison table per schedule")
    ap.add_argument("--no-torch-reference", action="store_true",
                    help="skip the torch.distributed.pipelining GPipe/1F1B runs of the same model and batch")
    ap.add_argument("--nice", type=int, default=0,
                    help="raise this process tree's CPU priority by N (needs root): on a shared machine the "
                         "ranks then lose less time to other processes; the contention column shows the effect")
    args = ap.parse_args(argv)
    from pipesim.emulator.host import raise_priority
    if args.nice and not raise_priority(args.nice):    # calibration runs in this process
        print("--nice needs root; running at normal priority", file=sys.stderr)

    from pipesim import simulate
    from pipesim.commands.crosscheck import calibrate_for
    from pipesim.compare import compare, format_table
    from pipesim.emulator import emulate, prepare

    load0 = os.getloadavg()
    profile = args.profile
    if profile is None:
        profile = os.path.join(HERE, "..", "traces", "cpu-crosscheck.json")
        t = time.time()
        calibrate_for(prepare(args.scenario), profile)
        print(f"calibrated {profile} in {time.time() - t:.0f} s", file=sys.stderr)
    rows, refs = [], {}
    for name, sets in CASES:
        s = prepare(args.scenario, [f"training.schedule={name}", f"costs.profile={os.path.abspath(profile)}"] + sets)
        sim = simulate(s).to_dict()
        emu = emulate(s, steps=args.steps, warmup=args.warmup, nice=args.nice)
        c = compare(sim, emu)
        if args.verbose:
            print(f"== {name}\n{format_table(c)}\n")
        st = c["step"]
        if name in ("gpipe", "1f1b") and not args.no_torch_reference:
            refs[name] = (emu, torch_reference(s, name, args))
        rows.append({"schedule": name, "step_pred_s": st["step_time_predicted_s"],
                     "step_meas_s": st["step_time_measured_s"], "step_err_pct": st["step_time_error_pct"],
                     "step_spread_s": emu["step_time_spread_s"],
                     "mem_pred": st["peak_memory_predicted"], "mem_meas": st["peak_memory_measured"],
                     "mem_err_pct": st["peak_memory_error_pct"], "contention": contention(emu),
                     "actions": c["actions"], "stage_actions": c["stage_actions"]})
    load1 = os.getloadavg()
    print(f"{'schedule':<18} {'step pred ms':>12} {'meas ms':>9} {'(std)':>7} {'err %':>7}   "
          f"{'peak pred MiB':>13} {'meas MiB':>9} {'err %':>7}   contention")
    for r in rows:
        print(f"{r['schedule']:<18} {r['step_pred_s'] * 1e3:12.2f} {r['step_meas_s'] * 1e3:9.2f} "
              f"{r['step_spread_s']['std'] * 1e3:7.2f} {r['step_err_pct']:+7.1f}   {r['mem_pred'] / 2**20:13.2f} "
              f"{r['mem_meas'] / 2**20:9.2f} {r['mem_err_pct']:+7.1f}   {r['contention']:.2f}")
    mape_t = statistics.fmean(abs(r["step_err_pct"]) for r in rows)
    mape_m = statistics.fmean(abs(r["mem_err_pct"]) for r in rows)
    print(f"MAPE step time {mape_t:.1f} %   peak memory {mape_m:.1f} %   "
          f"(load average {load0[0]:.2f} before, {load1[0]:.2f} after, on {os.cpu_count()} CPUs; "
          f"nice {os.getpriority(os.PRIO_PROCESS, 0)})")
    if refs:
        print("\nreference runtime (seed 002's cross-check): the same model, weights and batch under "
              "torch.distributed.pipelining")
        print(f"{'schedule':<10} {'emulator ms':>11} {'torch ms':>9} {'emulator peak MiB':>18} {'torch MiB':>10} "
              f"{'loss (emulator / torch)':>24}")
        for name, (emu, ref) in refs.items():
            if ref is None:
                print(f"{name:<10} torch.distributed.pipelining not available: skipped")
                continue
            peak_e = max(r["peak_memory_bytes"] for r in emu["ranks"]) / 2**20
            print(f"{name:<10} {emu['step_time_s'] * 1e3:11.2f} {ref['step_time_s'] * 1e3:9.2f} {peak_e:18.2f} "
                  f"{max(ref['peak_memory_bytes']) / 2**20:10.2f} {emu['loss_per_step'][-1]:11.5f} / "
                  f"{ref['loss_per_step'][-1]:.5f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "mape_step_pct": mape_t, "mape_memory_pct": mape_m,
                       "load_before": load0, "load_after": load1, "profile": profile}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
