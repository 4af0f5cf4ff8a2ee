"""pipesim search SCENARIO --gpus N[,N...] [--systems PRESET[=USD],...]: the best layout under the
GPU memory, explained; with several GPU counts or systems, the best of each side by side (with the
scenario's `run`: days, goodput, GPU-hours, and cost and energy, of each)."""
from __future__ import annotations

import shlex
import time
from pathlib import Path

from pipesim.errors import ScenarioError
from pipesim.whatif.hardware import label as system_label


def _ints(text: str, flag: str = "", least: int = 1) -> tuple:
    """The comma-separated integers of `flag`, each at least `least`."""
    name = f"{flag} {text}" if flag else repr(text)
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ScenarioError(f"{name}: expected comma-separated integers") from None
    if not values or min(values) < least:
        raise ScenarioError(f"{name}: expected integers of at least {least}")
    return values


def _names(text: str, flag: str, known: tuple) -> tuple:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ScenarioError(f"{flag} {text}: unknown {bad[0]!r}; expected among {', '.join(known)}" if bad else
                            f"{flag} {text}: expected a comma-separated list")
    return names


def add_arguments(p) -> None:
    from pipesim.whatif.cluster import add_ray_argument
    p.add_argument("scenario", help="scenario YAML (its model, system type and training settings are kept)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key before the search, e.g. --set model.seq_length=131072 (repeatable)")
    p.add_argument("--gpus", required=True, help="GPUs to lay the model out on; several, e.g. 512,1024,2048, "
                                                 "search each and compare their best layouts")
    p.add_argument("--systems", help="system presets to search the model on, each with an optional price per "
                                     "GPU-hour, e.g. dgx-h100=2.5,dgx-b200=4.1,gb200-nvl72=5.2, or system preset "
                                     "files, e.g. my-cluster.yaml=2.5 from `pipesim fit --out` (the scenario's "
                                     "network pods carry over, its other system keys do not)")
    p.add_argument("--deadline-days", type=float, help="with several --gpus or --systems and a run section: name "
                                                       "the size (and system) that trains the run's tokens in this "
                                                       "many days with the fewest GPU-hours (across systems: the "
                                                       "lowest cost; every system needs a price)")
    p.add_argument("--finalists", type=int, default=16,
                   help="top candidates by the closed form to simulate (default 16), plus those within its "
                        "measured error band of them")
    p.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per CPU)")
    p.add_argument("--tensor", help="restrict tensor sizes, e.g. 4,8")
    p.add_argument("--pipeline", help="restrict pipeline sizes, e.g. 4,8,16")
    p.add_argument("--context", help="context-parallel sizes to try, e.g. 1,2,4,8 (default: powers of two "
                                     "down to 4096 tokens per GPU)")
    p.add_argument("--context-modes", help="context-parallel attention modes to try, e.g. ring,allgather,a2a "
                                           "(default: the scenario's; layouts whose heads an all-to-all cannot "
                                           "split are skipped)")
    p.add_argument("--expert", help="expert-parallel sizes to try for an MoE model, e.g. 1,8,16,32 (default: "
                                    "the scenario's)")
    p.add_argument("--offload", help="activation-offloaded layers per stage to try, e.g. 0,8,16 (default: the "
                                     "scenario's; training.offload_activation_layers)")
    p.add_argument("--zero-replicas", help="sharding replicas to try with ZeRO, e.g. 1,2,8 (hybrid sharding; "
                                           "training.zero_replicas; layouts they do not divide are skipped)")
    p.add_argument("--micro-batch", help="micro-batch sizes to try (default 1,2,4,8)")
    p.add_argument("--recompute", help="recompute policies to try (default none,selective,full)")
    p.add_argument("--zero", help="ZeRO stages to try (default 0,1,2,3)")
    p.add_argument("--precisions", help="training precisions to try, e.g. bf16,fp8 (default: the scenario's; "
                                        "fp8 uses the scenario's training.fp8_recipe)")
    p.add_argument("--schedules", help="schedules to try (default 1f1b,interleaved,zb-h1,zb-v)")
    p.add_argument("--engine", choices=["sim", "analytic"], default="sim",
                   help="rank the finalists with the simulator (default) or the screening model")
    add_ray_argument(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--dir", metavar="DIR", help="report folder for search.csv (the simulated finalists; "
                                               "default: ./<scenario name>.report/)")
    p.add_argument("--no-files", action="store_true", help="write no report folder")


def run(args) -> int:
    from pipesim.scenario.load import read_sections
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.evaluate import simulate_report
    from pipesim.whatif.hardware import on_system, parse_systems
    from pipesim.whatif.search import CP_MODE, OFFLOAD, SearchSpace, given_value
    from pipesim.whatif.sweep import read_base

    if args.finalists < 1:
        raise ScenarioError(f"--finalists {args.finalists}: expected at least 1")
    raw, source = read_base(args.scenario, args.overrides)
    # what the search keeps (model, system, training) read as the loader reads it: a malformed key
    # is its one-line error, not the search's traceback; the layout need not load as written
    read_sections(raw, source, Path("."))
    space = SearchSpace()
    if args.tensor:
        space.tensor = _ints(args.tensor, "--tensor")
    if args.pipeline:
        space.pipeline = _ints(args.pipeline, "--pipeline")
    if args.context:
        space.context = _ints(args.context, "--context")
    if args.context_modes:
        modes = tuple(m.strip() for m in args.context_modes.split(",") if m.strip())
        bad = [m for m in modes if m not in ("ring", "allgather", "a2a")]
        if bad:
            raise ScenarioError(f"--context-modes {args.context_modes}: unknown mode {bad[0]!r}; expected ring, "
                                f"allgather or a2a (a2a+p2p needs parallel.context_a2a: set it in the scenario)")
        space.extra[CP_MODE] = modes
    if args.expert:
        space.extra["parallel.expert"] = _ints(args.expert, "--expert")
    if args.offload:
        space.extra[OFFLOAD] = _ints(args.offload, "--offload", least=0)
    if args.zero_replicas:
        space.extra["training.zero_replicas"] = _ints(args.zero_replicas, "--zero-replicas")
    if args.micro_batch:
        space.micro_batch = _ints(args.micro_batch, "--micro-batch")
    if args.recompute:
        space.recompute = _names(args.recompute, "--recompute", ("none", "selective", "selective_op", "full"))
    if args.zero:
        space.zero = _ints(args.zero, "--zero", least=0)
        if any(z not in (0, 1, 2, 3) for z in space.zero):
            raise ScenarioError(f"--zero {args.zero}: expected stages among 0, 1, 2, 3")
    if args.precisions:
        space.extra["training.precision"] = _names(args.precisions, "--precisions",
                                                   ("fp32", "tf32", "fp16", "bf16", "fp8"))
    if args.schedules:
        space.schedules = tuple(s.strip() for s in args.schedules.split(",") if s.strip())
        from pipesim.schedules import SCHEDULES
        bad = [n for n in space.schedules if n not in SCHEDULES and not n.endswith(".csv")]
        if bad or not space.schedules:
            raise ScenarioError(f"--schedules {args.schedules}: unknown schedule {(bad or [''])[0]!r}; expected "
                                f"among {', '.join(sorted(SCHEDULES))} (or action CSVs)")
    evaluator = simulate_report if args.engine == "sim" else analytic_report
    counts = _ints(args.gpus, "--gpus")
    systems = parse_systems(args.systems) if args.systems else {}
    targets = [(name, n) for name in (systems or [None]) for n in counts]
    if args.deadline_days is not None:
        _check_deadline(args.deadline_days, len(targets), raw, systems)
    if "rank_order" not in (raw.get("parallel") or {}) and given_value(raw, "system", "pod_gpus"):
        # network pods: the order decides which traffic crosses the oversubscribed layer (costs/pods.py)
        space.extra["parallel.rank_order"] = ("tp-cp-pp-dp", "tp-cp-dp-pp")
    if len(targets) == 1 and not systems:
        return 0 if _search_one(args, raw, space, evaluator, counts[0]) else 1
    bases = {name: on_system(raw, name, price) for name, price in systems.items()} or {None: (raw, [])}
    bests = {}
    for name, n in targets:
        base, dropped = bases[name]
        print(f"=== {n} GPUs" + (f" of {system_label(name)} ===" if name else " ==="))
        if dropped and n == counts[0]:
            print(f"  the scenario's system keys {', '.join(dropped)} describe its own hardware: "
                  f"{system_label(name)} has its preset's")
        stem = f"search-{system_label(name)}-{n}gpus" if name else f"search-{n}gpus"
        try:
            bests[(name, n)] = _search_one(args, base, space, evaluator, n, csv_name=stem + ".csv", system=name,
                                           dropped=bool(dropped))
        except ScenarioError as exc:       # e.g. a GPU count that is no whole number of this system's nodes
            print(f"  not searched: {exc}")
            bests[(name, n)] = None
        print()
    print(cluster_table(bests))
    if args.deadline_days is not None:
        print(deadline_line(bests, args.deadline_days, by_cost=len(systems) > 1))
    return 0 if any(bests.values()) else 1


def _check_deadline(days: float, targets: int, raw: dict, systems: dict) -> None:
    if days <= 0 or targets < 2 or not (raw.get("run") or {}).get("tokens"):
        raise ScenarioError(f"--deadline-days {days:g}: expected a positive number of days, several --gpus or "
                            f"--systems and a scenario with run.tokens")
    unpriced = [name for name, price in systems.items() if price is None]
    if len(systems) > 1 and unpriced:
        raise ScenarioError(f"--deadline-days {days:g} across systems ranks by cost: give each a price per "
                            f"GPU-hour, e.g. --systems {unpriced[0]}=2.5 (missing for {', '.join(unpriced)})")


def _search_one(args, raw, space, evaluator, gpus: int, csv_name: str = "search.csv", system: str | None = None,
                dropped: bool = False) -> dict | None:
    """One search on `gpus` GPUs (of preset `system`: `raw` is already on it), printed; the best
    row, or None when no layout fits."""
    from pipesim.commands.progress import Bar
    from pipesim.whatif.search import describe, nvlink_domain_note, probe_scenario, reproduce_args, search, system_for
    from pipesim.whatif.table import format_table
    bar = None if args.no_progress else Bar("simulating finalists")
    t0 = time.perf_counter()
    res = search(raw, gpus, space, finalists=args.finalists, evaluator=evaluator, jobs=args.jobs, progress=bar,
                 use_ray=args.ray is not None, ray_address=args.ray or None)
    pruned = sum(res.pruned.values())
    print(f"search on {gpus} GPUs: {res.considered} candidates, {pruned} impossible, {res.screened_oom} over "
          f"the GPU memory, {res.simulated} finalists simulated, {len(res.finalists)} of them fit "
          f"({time.perf_counter() - t0:.1f} s)")
    print("  kept per stage: " + " -> ".join(f"{name} {n}" for name, n in res.stages.items()))
    note = nvlink_domain_note(raw["system"], gpus)
    if note:
        print(f"  {note}")
    if not args.expert:
        probe = probe_scenario(dict(raw, system=system_for(raw["system"], gpus)), gpus)
        if probe.model.is_moe:
            ep = (raw.get("parallel") or {}).get("expert", 1)
            print(f"  MoE model: every layout kept the scenario's expert {ep}; --expert 8,16,32 "
                  f"(for example) searches expert parallelism too")
    for reason, n in sorted(res.pruned.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  impossible x{n}: {reason}")
    if res.best is None:
        if not res.considered:
            print(f"no layout to try: the sizes given do not divide {gpus} GPUs (or exceed the layers or the "
                  f"NVLink domain)")
        elif pruned == res.considered:
            print("no layout is possible: every candidate was refused, for the reasons above")
        else:
            print("no layout fits: try more GPUs, recompute full, ZeRO or a smaller micro-batch")
        return None
    print()
    swept = (["offload_layers"] if args.offload else []) + (["context_mode"] if args.context_modes else [])
    swept += ["rank_order"] if "parallel.rank_order" in space.extra else []
    if args.expert or any(r.get("expert", 1) > 1 for r in res.finalists):
        swept.append("expert")
    if args.precisions:
        swept.append("precision")
    print(format_table(res.finalists, swept, top=min(10, len(res.finalists)), ordered=True))
    print()
    for line in res.explanation:
        print(line)
    print(f"\nbest layout: {describe(res.best)}")
    if system is None:             # (with --systems, every system's line follows the comparison)
        from pipesim.report.accuracy import accuracy_of, accuracy_text
        accuracy = accuracy_of(res.best["scenario"])
        if accuracy is not None:
            print(f"  accuracy: {accuracy_text(accuracy)}")
    if res.best.get("run.wall_days") is not None:     # (absent when the run never finishes)
        b = res.best
        print(f"  the run: {b['run.wall_days']:.1f} days wall-clock, goodput {b['run.goodput'] * 100:.1f} %, "
              f"{b['run.gpu_hours']:,.0f} GPU-hours (run section: docs/REPORT.md)")
    on = [f"--set system.preset={system}"] if system else []
    if dropped:
        print(f"  (to reproduce: the scenario with its system section reduced to the preset {system_label(system)} "
              f"and its pods)")
    given = [f"--set {shlex.quote(o)}" for o in args.overrides]     # the search's own, then the layout's
    print(f"  pipesim simulate {args.scenario} " + " ".join(given + on + reproduce_args(res.best["scenario"], raw)))
    if not args.no_files:
        from pipesim.report.folder import default_dir, make_dir
        from pipesim.whatif.table import write_csv
        path = make_dir(args.dir or default_dir(args.scenario)) / csv_name
        write_csv(path, res.finalists)
        print(f"wrote {path}")
    return res.best


def deadline_line(bests: dict, days: float, by_cost: bool = False) -> str:
    """Of the (system, GPU count) results, the one that finishes within `days` with the fewest
    GPU-hours, or with `by_cost` (several systems: GPU-hours of different GPUs are no common
    currency) the lowest cost; else the fastest."""
    def label(key) -> str:
        name, n = key
        return f"{n} GPUs of {system_label(name)}" if name else f"{n} GPUs"
    what = "system and size" if by_cost else "size"
    done = {k: b for k, b in bests.items() if b is not None and b.get("run.wall_days") is not None}
    meets = {k: b for k, b in done.items() if b["run.wall_days"] <= days}
    if meets:
        k, b = min(meets.items(), key=lambda kv: kv[1]["run.cost_usd" if by_cost else "run.gpu_hours"])
        price = (f"${b['run.cost_usd']:,.0f}, the cheapest of the {len(meets)} that make it" if by_cost else
                 f"{b['run.gpu_hours']:,.0f} GPU-hours, the fewest of the {len(meets)} sizes that make it")
        return f"within {days:g} days: {label(k)} ({b['run.wall_days']:.1f} days, {price})"
    if not done:
        return f"within {days:g} days: no {what} has a run estimate"
    k, b = min(done.items(), key=lambda kv: kv[1]["run.wall_days"])
    nothing = "nothing searched" if by_cost else "no size searched"
    return f"within {days:g} days: {nothing} makes it; the fastest, {label(k)}, takes {b['run.wall_days']:.1f} days"


def cluster_table(bests: dict) -> str:
    """The best layout of each (system, GPU count) side by side; with a run, its days, goodput and
    GPU-hours, and its cost and energy where the systems give them."""
    from pipesim.whatif.search import describe
    found = [b for b in bests.values() if b is not None]
    systems = any(name for name, _ in bests)
    run = any(b.get("run.wall_days") is not None for b in found)
    cost = run and any(b.get("run.cost_usd") is not None for b in found)
    energy = run and any(b.get("run.energy_MWh") is not None for b in found)
    width = max([len(system_label(name)) for name, _ in bests if name] + [6])
    head = (f"{'system':<{width}} " if systems else "") + f"{'GPUs':>7} {'step s':>9} {'tok/s/GPU':>10} {'MFU %':>6} {'peak GiB':>8}"
    head += f" {'days':>7} {'goodput %':>9} {'GPU-hours':>12}" if run else ""
    head += f" {'cost $':>13}" if cost else ""
    head += f" {'MWh <=':>8}" if energy else ""
    title = "best layout per " + ("system and cluster size" if systems else "cluster size")
    title += " (MWh <=: the nodes at their maximum input power for the wall-clock days)" if energy else ""
    lines = [title, head + "  layout"]
    for (name, n), b in bests.items():
        row = (f"{system_label(name) if name else '':<{width}} " if systems else "") + f"{n:>7}"
        if b is None:
            lines.append(row + "  no layout fits")
            continue
        row += (f" {b['step_time_s']:9.3f} {b['tokens_per_s'] / n:10,.0f} {b['mfu'] * 100:6.1f} "
                f"{b['peak_memory_bytes'] / 2**30:8.1f}")
        never = run and b.get("run.wall_days") is None
        if never:
            row += f" {'never':>7} {0.0:9.1f} {'-':>12}"
        elif run:
            row += f" {b['run.wall_days']:7.1f} {b['run.goodput'] * 100:9.1f} {b['run.gpu_hours']:12,.0f}"
        if cost:
            row += f" {_or_dash(None if never else b.get('run.cost_usd'), 13, ',.0f')}"
        if energy:
            row += f" {_or_dash(None if never else b.get('run.energy_MWh'), 8, ',.0f')}"
        lines.append(row + "  " + describe(b))
    if systems:
        lines += _accuracy_lines(bests)
    return "\n".join(lines)


def _accuracy_lines(bests: dict) -> list[str]:
    """Per system, pipesim's measured error on published runs of its class (report/accuracy.py):
    systems of different GPU generations are not predicted equally well."""
    from pipesim.report.accuracy import accuracy_of, accuracy_text
    seen, lines = set(), []
    for (name, _), b in bests.items():
        a = accuracy_of(b["scenario"]) if b is not None and name not in seen else None
        if a is not None:
            seen.add(name)
            lines.append(f"  accuracy on {system_label(name)}: {accuracy_text(a)}")
    return lines


def _or_dash(value, width: int, spec: str) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{spec}}"
