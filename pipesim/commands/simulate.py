"""`pipesim simulate SCENARIO [--set a.b=v ...] [--mode representative|full] [--out DIR | --no-files]
[--events] [--no-why] [--json OUT] [--trace OUT.json] [--plot OUT.png] [--memory-plot OUT.png] [--allow-oom]`

By default the report folder `<scenario stem>.report/` (or --out DIR) receives report.json,
trace.json, timeline.png, memory.png and report.html; the single-file flags still work."""
from __future__ import annotations

import sys
from pathlib import Path

from pipesim.costs.documents import documents_clause
from pipesim.costs.lora import lora_clause
from pipesim.errors import OutOfMemoryError, PipesimError
from pipesim.report.metrics import TIGHT_TEXT

GiB = 2**30


def add_arguments(parser) -> None:
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. --set parallel.pipeline=4 (repeatable)")
    parser.add_argument("--mode", choices=("representative", "full"), default="representative",
                        help="representative: one rank per pipeline stage (fast); full: every GPU")
    parser.add_argument("--out", metavar="DIR", help="report folder (default: ./<scenario name>.report/)")
    parser.add_argument("--no-files", action="store_true",
                        help="write no report folder (only what --json/--trace/--plot/--memory-plot ask for)")
    parser.add_argument("--events", action="store_true",
                        help="put the per-event and memory lists into report.json / --json (large; "
                             "`pipesim compare` needs them)")
    parser.add_argument("--no-why", action="store_true",
                        help="skip the explanation (critical path, bubble causes, simulated suggestions)")
    parser.add_argument("--json", metavar="OUT", help="write the report (metrics) as JSON")
    parser.add_argument("--trace", metavar="OUT.json", help="write a Chrome/Perfetto trace")
    parser.add_argument("--plot", metavar="OUT.png", help="write the timeline plot")
    parser.add_argument("--memory-plot", metavar="OUT.png", help="write memory over time per rank")
    parser.add_argument("--allow-oom", action="store_true",
                        help="exit 0 even when the layout does not fit in GPU memory")
    parser.add_argument("--no-trace-in-json", action="store_true",
                        help="(the default now; kept for old scripts) no events/memory lists in --json")


def _fmt_bytes(b: float) -> str:
    return f"{b / GiB:.2f} GiB"


def summary(rep, scenario) -> str:
    d = rep.data
    s = scenario
    p = s.parallel
    lines = [
        f"scenario  {s.source}: {s.model.name} on {s.num_gpus} x {s.system.gpu.name} "
        f"(tensor {p.tensor}, pipeline {p.pipeline}, data {p.data}, virtual {p.virtual_stages})",
        f"schedule  {d['plan']}, {d['num_microbatches']} micro-batches of {s.training.micro_batch_size}, "
        f"{d['mode']} mode ({d['simulated_ranks']} simulated ranks)",
        f"training  {s.training.precision}"
        + (f" ({s.training.fp8_recipe})" if s.training.precision == "fp8" else "")
        + ("" if s.model.arch == "cnn" else
           f", {'FP8 ' if s.training.fp8_attention else ''}{s.training.attention} attention")
        + documents_clause(s) + lora_clause(s)
        + f", recompute {s.training.recompute}, ZeRO-{s.training.zero_stage}",
        "",
        f"step time           {d['step_time_s'] * 1e3:12.3f} ms",
        f"throughput          {d['throughput_samples_per_s']:12.2f} samples/s   {d['tokens_per_s']:,.0f} tokens/s",
        f"model TFLOP/s/GPU   {d['model_tflops_per_gpu']:12.2f}      MFU {d['mfu'] * 100:.1f} %",
        f"pipeline bubble     {d['bubble_fraction'] * 100:11.2f} %",
        f"peak memory         {_fmt_bytes(d['peak_memory_bytes']):>15} of {_fmt_bytes(d['memory_capacity_bytes'])}"
        + ("   OUT OF MEMORY" if d["oom"] else "")
        + (f"   {TIGHT_TEXT}" if d.get("memory_tight") else ""),
        "exposed comm (max rank)  " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in d["exposed_comm_s"].items()),
    ]
    if "tensor_core_rate" in d:
        from pipesim.costs.roofline import rate_text
        lines.append(f"kernel rates        {rate_text(d['tensor_core_rate'])}")
        if "attention_table" in d["tensor_core_rate"]:
            lines.append(f"attention table     {d['tensor_core_rate']['attention_table']}")
    if "accuracy" in d:
        from pipesim.report.accuracy import accuracy_text
        lines.append(f"accuracy            {accuracy_text(d['accuracy'])}")
    if "run" in d:
        from pipesim.report.goodput import run_rows
        lines += [f"{label:<20}{text}" for label, text in run_rows(d["run"])]
    if "imbalance" in d:
        lines.append(f"stage imbalance     forward {d['imbalance']['forward']:.3f}  backward "
                     f"{d['imbalance']['backward']:.3f}   (fastest / slowest stage; 1 = balanced)")
        if s.parallel.virtual_stages > 1 and "rank_imbalance" in d:     # chunks differ; what a rank holds is what counts
            lines.append(f"rank imbalance      {d['rank_imbalance']:.3f}   (least / most busy rank's compute, "
                         f"its {s.parallel.virtual_stages} chunks together)")
    lines += ["", f"{'rank':>6} {'stage':>5} {'compute ms':>11} {'comm ms':>9} {'bubble %':>8} {'peak GiB':>9}"]
    ranks = d["ranks"]
    show = ranks if len(ranks) <= 16 else ranks[:8] + ranks[-8:]
    for i, r in enumerate(show):
        if len(ranks) > 16 and i == 8:
            lines.append(f"{'...':>6} ({len(ranks) - 16} more)")
        lines.append(f"{r['rank']:>6} {r['stage']:>5} {r['compute_busy_s'] * 1e3:11.2f} {r['comm_busy_s'] * 1e3:9.2f} "
                     f"{r['bubble_fraction'] * 100:8.2f} {r['peak_memory_bytes'] / GiB:9.2f}")
    return "\n".join(lines)


def run(args) -> int:
    from pipesim import load_scenario
    from pipesim.commands.progress import status
    from pipesim.report.folder import default_dir, report_dict, write_json
    s = load_scenario(args.scenario, args.overrides)
    files = not args.no_files
    want_trace = bool(files or not args.no_why or args.trace or args.plot or args.memory_plot or args.events)
    with status("simulating"):
        rep = _simulate(s, args.mode, want_trace)
    why, headline = None, []
    if not args.no_why:
        from pipesim.report.explain import explain, headline as why_lines
        with status("explaining: counterfactual and suggested layouts"):
            why = explain(rep, s, mode=args.mode)
        headline = why_lines(why, rep)
    print(summary(rep, s))
    if headline:
        print("\nwhy")
        for line in headline:
            print("  " + line)
    written = []
    if files:
        from pipesim.report.folder import write_folder
        out = args.out or default_dir(args.scenario)
        with status(f"writing {out}/"):
            paths = write_folder(out, rep, s, why, headline, events=args.events)
        print(f"\nwrote {out}/ ({', '.join(p.name for p in paths)}); open {paths[-1]} in a browser")
    if args.json:
        write_json(Path(args.json), report_dict(rep, why, args.events and not args.no_trace_in_json))
        written.append(args.json)
    if args.trace:
        from pipesim.report.perfetto import write_trace
        write_trace(args.trace, rep.events, rep.memory)
        written.append(args.trace)
    if args.plot:
        from pipesim.report.plots import plot_timeline
        plot_timeline(rep.events, args.plot, f"{Path(args.scenario).name}: {rep.data['plan']}, "
                      f"step {rep.data['step_time_s'] * 1e3:.1f} ms")
        written.append(args.plot)
    if args.memory_plot:
        from pipesim.report.plots import plot_memory
        plot_memory(rep.memory, args.memory_plot, f"{Path(args.scenario).name}: memory per rank",
                    capacity=rep.data["memory_capacity_bytes"])
        written.append(args.memory_plot)
    for w in written:
        print(f"wrote {w}")
    if rep.data["oom"] and not args.allow_oom:
        worst = max(rep.data["ranks"], key=lambda r: r["peak_memory_bytes"])
        cats = ", ".join(f"{k} {v / GiB:.2f}" for k, v in worst["peak_memory_by_category"].items() if v)
        sys.stdout.flush()
        raise OutOfMemoryError(
            f"{args.scenario}: rank {worst['rank']} needs {worst['peak_memory_bytes'] / GiB:.2f} GiB at its peak "
            f"({cats} GiB) but system.gpu.memory_GiB is {rep.data['memory_capacity_bytes'] / GiB:.2f}; "
            "try more pipeline/tensor/context parallelism, recompute, ZeRO, activation offloading (the suggestions above), "
            "or --allow-oom to keep the report")
    return 0


def _simulate(s, mode: str, trace: bool):
    """simulate(), with a schedule's P/M/V constraint error restated with the scenario keys."""
    from pipesim import simulate
    from pipesim.scenario.checks import schedule_error
    try:
        return simulate(s, mode=mode, trace=trace)
    except PipesimError as exc:
        if type(exc) is PipesimError and str(exc).startswith("schedule "):
            raise schedule_error(s, exc) from None
        raise
