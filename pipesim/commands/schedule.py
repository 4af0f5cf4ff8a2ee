"""`pipesim schedule`: generate (or load) a pipeline plan, print its grid and unit-time bubble, write CSV/PNG."""
from __future__ import annotations

import argparse

from pipesim.errors import PipesimError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from pipesim.schedules import CONSTRAINTS

    names = "; ".join(f"{n} ({c})" for n, c in CONSTRAINTS.items()).replace("%", "%%")  # argparse formats help with %
    p.add_argument("name", nargs="?", help=f"schedule name: {names}")
    p.add_argument("--stages", "-p", type=int, help="pipeline ranks P")
    p.add_argument("--microbatches", "-m", type=int, help="micro-batches M per step")
    p.add_argument("--virtual", "-v", type=int, default=None, help="model chunks per rank V (default 1; 2 for V-shapes)")
    p.add_argument("--costs", default="f=1,b=2,i=1,w=1",
                   help="relative costs for placement and unit-time analysis, e.g. f=1,b=2,i=1,w=1")
    p.add_argument("--microbatch-group", dest="group", type=int, default=None, metavar="N",
                   help="interleaved: micro-batches per group and chunk (Megatron-Core "
                        "microbatch_group_size_per_vp_stage; default P)")
    p.add_argument("--recompute", action="store_true", help="insert an explicit R (recompute forward) before each backward")
    p.add_argument("--from-csv", dest="from_csv", metavar="IN", help="load the plan from a torch-format CSV instead")
    p.add_argument("--csv", metavar="OUT", help="write the plan as a torch-format CSV")
    p.add_argument("--plot", metavar="OUT.png", help="draw the plan (time from the unit-time analysis)")
    p.add_argument("--lowered", action="store_true", help="print the plan with explicit SEND/RECV actions")
    p.add_argument("--deadlock-mode", choices=("buffered", "rendezvous"), default="buffered",
                   help="send/recv model of the deadlock check (buffered = torch's isend/irecv)")


def _parse_costs(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("f", "b", "i", "w", "r"):
            raise PipesimError(f"--costs: cannot read {part!r}; expected KEY=NUMBER with KEY in f, b, i, w, r")
        try:
            out[key] = float(val)
        except ValueError:
            raise PipesimError(f"--costs: {key}={val!r} is not a number") from None
        if not out[key] > 0:
            raise PipesimError(f"--costs: {key} must be > 0, got {out[key]}")
    return out


def _aligned_rows(plan, step_of) -> list[list[object]]:
    """One column per unit step; None where the rank waits."""
    width = int(max((step_of[a] for row in plan.ranks for a in row if a.is_compute), default=-1)) + 1
    rows: list[list[object]] = []
    for row in plan.ranks:
        cells: list[object] = [None] * width
        for a in row:
            if a.is_compute:
                cells[int(step_of[a])] = a
        rows.append(cells)
    return rows


def run(args: argparse.Namespace) -> int:
    from pipesim.schedules import format_grid, generate, lower, read_csv, unit_time, validate, write_csv

    costs = _parse_costs(args.costs)
    if args.from_csv:
        plan = read_csv(args.from_csv)
    else:
        if not args.name:
            raise PipesimError("give a schedule NAME (or --from-csv IN)")
        if args.stages is None or args.microbatches is None:
            raise PipesimError("--stages P and --microbatches M are required to generate a schedule")
        virtual = args.virtual
        if virtual is None:
            virtual = 2 if args.name.lower().replace("_", "-") in ("zb-v", "zbv", "dualpipe-v", "dualpipev") else 1
        hints = {k: v for k, v in costs.items() if k in ("f", "b", "i", "w")}
        if args.group is not None:
            hints["group"] = args.group
        plan = generate(args.name, args.stages, args.microbatches, virtual, recompute=args.recompute, **hints)
    validate(plan, mode=args.deadlock_mode)
    ua = unit_time(plan, **costs)
    unit = unit_time(plan, f=1, b=1, i=1, w=1, r=1)

    print(f"schedule {plan.name}: P={plan.num_ranks} ranks, {plan.num_stages} stages "
          f"(V={plan.virtual}), M={plan.num_microbatches} micro-batches; stage->rank {list(plan.stage_to_rank)}")
    print("grid (one column per step with every action one step long; '.' = waiting):")
    print(format_grid(_aligned_rows(plan, unit.start), idle="."))
    if args.lowered:
        print("lowered plan (execution order with SEND/RECV):")
        print(format_grid(lower(plan).ranks))
    cost_txt = ", ".join(f"{k}={v:g}" for k, v in costs.items())
    print(f"unit-time analysis ({cost_txt}; free communication): makespan {ua.makespan:g}, "
          f"bubble {ua.bubble_fraction:.4f} overall")
    for r in range(plan.num_ranks):
        print(f"  rank {r}: busy {ua.busy[r]:g}  idle {ua.idle[r]:g}  bubble {ua.rank_bubble_fraction[r]:.4f}  "
              f"peak in-flight {ua.peak_inflight[r]}  peak pending W {ua.peak_pending_w[r]}")
    if args.csv:
        write_csv(plan, args.csv)
        print(f"wrote {args.csv}")
    if args.plot:
        from pipesim.schedules.plot import plot_plan

        plot_plan(plan, ua, args.plot)
        print(f"wrote {args.plot}")
    return 0
