"""`pipesim compare SIM.json EMU.json [--json OUT] [--plot OUT.png]`: predicted vs measured per
action kind, per stage, per step and peak memory per rank, with the error in %."""
from __future__ import annotations

import json


def add_arguments(parser) -> None:
    parser.add_argument("simulated", help="report JSON of `pipesim simulate --json` (predicted)")
    parser.add_argument("measured", help="report JSON of `pipesim emulate --json` (measured)")
    parser.add_argument("--json", dest="json_out", default=None, help="write the comparison tables as JSON")
    parser.add_argument("--plot", default=None, help="side-by-side timeline PNG (simulated above, measured below)")


def run(args) -> int:
    from pipesim.report.compare import check_same_run, compare, format_table, load_report, plot
    from pipesim.errors import PipesimError
    sim, emu = load_report(args.simulated), load_report(args.measured)
    check_same_run(sim, emu, args.simulated, args.measured)
    c = compare(sim, emu)
    print(format_table(c))
    if args.json_out:
        try:
            with open(args.json_out, "w") as fh:
                json.dump(c, fh, indent=1)
        except OSError as exc:
            raise PipesimError(f"{args.json_out}: cannot write: {exc.strerror}") from None
    if args.plot:
        plot(sim, emu, args.plot)
        print(f"wrote {args.plot}")
    return 0
