"""pipesim sweep SCENARIO --grid GRID.yaml [--out OUT.csv] [--plot OUT.png] [--jobs N] [--dir DIR | --no-files]

The report folder (default ./<scenario name>.report/) receives sweep.csv and sweep.png."""
from __future__ import annotations

import time

from pipesim.errors import ScenarioError


def add_arguments(p) -> None:
    from pipesim.whatif.cluster import add_ray_argument
    p.add_argument("scenario", help="base scenario YAML")
    p.add_argument("--grid", required=True, help="grid YAML: scenario keys -> lists or ranges")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the base scenario, e.g. --set model.seq_length=32768 (repeatable)")
    p.add_argument("--out", help="write one CSV row per configuration")
    p.add_argument("--plot", help="write the heatmap / Pareto / bubble PNG")
    p.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per CPU)")
    p.add_argument("--mode", choices=["representative", "full"], default="representative",
                   help="simulator mode (default representative)")
    p.add_argument("--top", type=int, default=10, help="rows in the ranked table (default 10)")
    add_ray_argument(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--dir", metavar="DIR", help="report folder for sweep.csv and sweep.png "
                                               "(default: ./<scenario name>.report/)")
    p.add_argument("--no-files", action="store_true", help="no report folder (only --out / --plot)")
    p.add_argument("--no-screen", action="store_true",
                   help="simulate every layout, also those the closed form puts >10 %% over the GPU memory "
                        "(by default those are kept as out-of-memory rows without simulating them)")
    p.add_argument("--engine", choices=["sim", "analytic"], default="sim",
                   help="sim = SimPy simulator (default); analytic = closed-form screening model")


def run(args) -> int:
    from pipesim.whatif.analytic import analytic_report
    from pipesim.commands.progress import Bar
    from pipesim.whatif.evaluate import count_status, simulate_report
    from pipesim.whatif.sweep import run_sweep
    from pipesim.whatif.table import format_table, rank, write_csv

    if args.jobs < 0:
        raise ScenarioError(f"--jobs {args.jobs}: expected a positive number of processes (0 = all CPUs)")
    from pipesim.report.folder import check_output
    check_output(args.out, "--out")
    check_output(args.plot, "--plot")
    evaluator = simulate_report if args.engine == "sim" else analytic_report
    bar = None if args.no_progress else Bar("sweep")
    t0 = time.perf_counter()
    result = run_sweep(args.scenario, args.grid, evaluator=evaluator, mode=args.mode, jobs=args.jobs,
                       progress=bar, screen=args.engine == "sim" and not args.no_screen,
                       use_ray=args.ray is not None, ray_address=args.ray or None, overrides=args.overrides)
    elapsed = time.perf_counter() - t0
    rows, swept = result.rows, result.grid.columns
    counts = count_status(rows)
    evaluated = counts["ok"] + counts["oom"]
    screened = sum(1 for r in rows if r["status"] == "oom" and r.get("engine") == "analytic") if args.engine == "sim" else 0
    print(f"{len(rows)} configurations from {args.grid}: {counts['ok']} feasible, {counts['oom']} out of "
          f"memory ({screened} of them by the memory screen, not simulated), {counts['pruned']} pruned, "
          f"{counts['error']} failed ({elapsed:.1f} s, {evaluated / elapsed if elapsed else 0:.1f} evaluated/s)")
    reasons: dict[str, int] = {}
    for r in rows:
        if r["status"] in ("pruned", "error"):
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  pruned x{n}: {reason}")
    print()
    print(format_table(rows, swept, top=args.top))
    best = rank(rows)
    if best:
        b = best[0]
        print(f"\nbest: tensor {b['tensor']} pipeline {b['pipeline']} data {b['data']} "
              f"micro-batch {b['micro_batch_size']} {b['schedule']} -> {b['throughput_samples_per_s']:.2f} samples/s")
    csvs, plots = [args.out] if args.out else [], [args.plot] if args.plot else []
    if not args.no_files:
        from pipesim.report.folder import default_dir, make_dir
        folder = make_dir(args.dir or default_dir(args.scenario))
        csvs.append(str(folder / "sweep.csv"))
        plots.append(str(folder / "sweep.png"))
    for path in csvs:
        write_csv(path, rows, swept)
        print(f"wrote {path}")
    for path in plots:
        from pipesim.whatif.plots import plot_sweep
        plot_sweep(rows, path, title=f"{args.scenario} x {args.grid}", memory_limit=result.memory_limit)
        print(f"wrote {path}")
    return 0
