"""pipesim validate [SUITE ...] - predicted vs published TFLOP/s per GPU, MAPE per suite."""
from __future__ import annotations

import json

from pipesim.errors import ScenarioError


def add_arguments(p) -> None:
    from pipesim.whatif.validation import SUITES
    p.add_argument("suites", nargs="*", metavar="SUITE",
                   help=f"suites to run (default all published): {', '.join(SUITES)}, nccl, moezoo-qwen3; "
                        "seed-002 / seed-004 print the seeds' side-by-side tables")
    p.add_argument("--cases", help="published cases YAML (default scenarios/validation/published.yaml)")
    p.add_argument("--engine", choices=["sim", "analytic"], default="sim",
                   help="sim = SimPy simulator (default); analytic = closed-form screening model")
    p.add_argument("--efficiency", choices=["preset"], default="preset",
                   help="GPU efficiencies: the system presets' kernel curves (no fitted scalars)")
    p.add_argument("--jobs", type=int, default=2, metavar="N",
                   help="cases simulated in parallel (process pool; default 2, 1 = in process)")
    p.add_argument("--zero3-alpha-us", type=float, metavar="US",
                   help="diagnosis: time ZeRO-3 cases with the per-parameter-tensor collective model "
                        "(closed form, ring latency US microseconds per hop); see docs/WHATIF.md")
    p.add_argument("--json", help="write per-case results as JSON")
    p.add_argument("--plot", help="write predicted vs published as a PNG")
    p.add_argument("--write-scenarios", metavar="DIR", help="also write each case as a scenario YAML")
    p.add_argument("--diagnose", action="store_true",
                   help="after the tables, fit each hardware knob alone to each family and show how far it "
                        "would take the MAPE (a pointer at the wrong term; pipesim/whatif/diagnose.py)")
    p.add_argument("--snapshot", action="store_true",
                   help="run every case and write scenarios/validation/accuracy.json, the per-class errors "
                        "reports show beside a prediction (pipesim/report/accuracy.py)")


def run(args) -> int:
    from pipesim.report.folder import check_output
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.evaluate import detailed_report
    from pipesim.whatif.validation import SUITES, format_results, mape, run_suite, write_scenarios

    check_output(args.json, "--json")
    check_output(args.plot, "--plot")
    if args.snapshot:
        from pipesim.report.accuracy import SNAPSHOT
        from pipesim.whatif.validation_snapshot import run_all, write_snapshot
        rows = run_all(jobs=max(1, args.jobs))
        write_snapshot(rows)
        print(f"wrote {SNAPSHOT} ({len(rows)} published runs)")
        return 0
    if args.write_scenarios:
        files = write_scenarios(args.write_scenarios, args.cases, args.efficiency, args.suites)
        print(f"wrote {len(files)} scenarios to {args.write_scenarios}")
    seeds = [s for s in args.suites if s.startswith("seed-")]
    want_nccl = not args.suites or "nccl" in args.suites
    want_moe = not args.suites or "moezoo-qwen3" in args.suites
    suites = [s for s in args.suites if not s.startswith("seed-") and s not in ("nccl", "moezoo-qwen3")]
    if args.diagnose and args.suites and not suites:
        print(f"--diagnose covers the throughput families ({', '.join(SUITES)}), not "
              f"{', '.join(args.suites)}\n")
    if want_moe:
        from pipesim.whatif.validation_moe import format_longseq, format_moe, run_longseq_suite, run_moe_suite
        evaluator = None if args.engine == "sim" else analytic_report
        moe, longseq = run_moe_suite(args.cases, evaluator=evaluator), run_longseq_suite(args.cases, evaluator=evaluator)
        asked = "moezoo-qwen3" in args.suites     # a cases file without these rows prints no empty table
        if moe or not args.cases or asked:
            print(format_moe(moe) + "\n")
        if longseq or not args.cases or asked:
            print(format_longseq(longseq) + "\n")
        if args.suites and not suites and not seeds and not want_nccl:
            return 0
    if want_nccl:
        from pipesim.whatif.validation_nccl import collective_results, format_collectives
        collectives = collective_results(args.cases)
        if collectives or not args.cases or "nccl" in args.suites:
            print(format_collectives(collectives) + "\n")
        if args.suites and not suites and not seeds:
            return 0
    if seeds:
        from pipesim.whatif.seeds import seed_report
        for name in seeds:
            print(seed_report(name) + "\n")
        if not suites:
            return 0
    evaluator = detailed_report if args.engine == "sim" else analytic_report
    if args.zero3_alpha_us is not None:
        import functools
        from pipesim.whatif.validation import zero3_per_tensor_report
        zero3 = functools.partial(zero3_per_tensor_report, alpha=args.zero3_alpha_us * 1e-6)
        plain = evaluator
        evaluator = lambda s, mode: zero3(s, mode) if s.training.zero_stage >= 3 else plain(s, mode)  # noqa: E731
    custom = args.engine != "sim" or args.zero3_alpha_us is not None
    results = _run_with_progress(run_suite, suites or None, None if not custom else evaluator, args)
    if args.cases and not any(results.values()):
        raise ScenarioError(f"{args.cases}: no training_throughput case of a family asked for (an id starts with "
                            f"the family's prefix: {', '.join(p for p, _ in SUITES.values() if p)}; any other id "
                            f"is the `other` family)")
    if not any(results.values()):          # only `other`, which the default files leave empty
        print(f"no case of {', '.join(results)} in the default files: give your runs with --cases FILE "
              f"(the published.yaml shape; pipesim/whatif/validation_generic.py)")
        return 0
    print(f"engine: {args.engine}; GPU efficiencies: {args.efficiency} (kernel curves at the sustained, "
          f"power-limited tensor-core rate: docs/COSTS.md)\n")
    print(format_results(results))
    if args.plot:
        from pipesim.whatif.validation import plot_validation
        plot_validation(results, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        from pipesim.whatif.validation import max_error, mean_signed
        out = {suite: {"mape_pct": mape(rs), "max_abs_pct": max_error(rs), "mean_signed_pct": mean_signed(rs),
                       "target_pct": SUITES[suite][1],
                       "cases": [{"id": r.case.id, "published_tflops": r.case.target, "predicted_tflops": r.predicted,
                                  "error_pct": r.error_pct, "step_time_s": r.step_time_s, "note": r.note,
                                  "published_peak_memory_gib": r.case.memory_gib,
                                  "published_memory_kind": r.case.memory_kind,
                                  "predicted_peak_memory_gib": r.memory_pred_gib,
                                  "memory_error_pct": r.memory_error_pct,
                                  "source": r.case.source} for r in rs]}
               for suite, rs in results.items()}
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {args.json}")
    if args.diagnose:
        from pipesim.commands.progress import status
        from pipesim.whatif.diagnose import diagnose, format_diagnosis
        for suite, rs in results.items():
            if not rs:                 # a cases file (--cases) without this family
                continue
            with status(f"diagnosing {suite}"):
                groups = diagnose(suite, rs, args.cases, args.efficiency, args.engine, max(1, args.jobs))
            for label, now, rows in groups:
                print("\n" + format_diagnosis(label, now, rows))
            if not groups:
                print(f"\ndiagnosis {suite}: fewer than two cases on any one GPU type, nothing to fit")
    return 0


def _run_with_progress(run_suite, suites, evaluator, args):
    """The suite with a rich progress bar on stderr (cases finish out of order with --jobs)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    console = Console(stderr=True)
    with Progress(TextColumn("validate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as bar:
        task = bar.add_task("", total=None)

        def progress(done, total, case_id):
            bar.update(task, completed=done, total=total, description=case_id)

        return run_suite(suites, evaluator=evaluator, path=args.cases, efficiency=args.efficiency,
                         jobs=max(1, args.jobs), progress=progress)
