"""The crosscheck suite (pipesim/emulator/suite.py): seeded random small GPTs across gpipe, 1f1b,
interleaved, zb-h1, zb-v, TP=2 and DP=2 on 2 local processes; each case calibrated inside its
ranks, simulated and emulated. Prints per-case predicted / measured / error, the step MAPE, the
worst case and the per-action-kind MAPE (wall and thread CPU time).

    python benchmarks/crosscheck_suite.py [--seed 0] [--cases 21] [--json OUT]

The same as `pipesim crosscheck --suite`. The load average is printed per case: the machine may
be shared, and the "w/cpu" column (wall / thread CPU time of the compute actions) shows how much
other processes took; the step error is taken with that time removed, the wall-clock MAPE beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=None)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--nice", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from pipesim.emulator.suite import HEADER, format_suite, run_suite
    t0, load0 = time.time(), os.getloadavg()
    print(HEADER, flush=True)
    res = run_suite(seed=args.seed, cases=args.cases, steps=args.steps, warmup=args.warmup, nice=args.nice,
                    progress=lambda line: print(line, flush=True))
    print()
    print("\n".join(format_suite(res).splitlines()[len(res["rows"]) + 2:]))
    load1 = os.getloadavg()
    print(f"wall time {time.time() - t0:.0f} s; load average {load0[0]:.2f} before, {load1[0]:.2f} after, on "
          f"{os.cpu_count()} CPUs")
    if args.json:
        res["summary"].update(load_before=load0, load_after=load1, seconds=time.time() - t0)
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
