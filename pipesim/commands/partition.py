"""pipesim partition SOURCE --stages K: balanced pipeline stages and the seeds' partition report."""
from __future__ import annotations

import json
from pathlib import Path

from pipesim.errors import PipesimError


def add_arguments(p) -> None:
    p.add_argument("source", help="scenario YAML, CNN preset (amoebanet-d, resnet50, resnet101, mobilenetv2) "
                                  "or module:package.module:factory")
    p.add_argument("--stages", type=int, required=True, help="pipeline stages K")
    p.add_argument("--recompute", action="store_true", help="backward includes recomputation of the forward")
    p.add_argument("--real", action="store_true", help="also run each stage for real (torch, CPU) and time it")
    p.add_argument("--runs", type=int, default=5, help="timed runs per stage with --real (after one warm-up)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads for --real")
    p.add_argument("--device", default="cpu", help="--real: cpu or cuda")
    p.add_argument("--profile", metavar="PATH",
                   help="calibrated cost profile (pipesim calibrate) for the theoretical times, e.g. of this CPU")
    p.add_argument("--scenario-out", metavar="OUT.yaml",
                   help="scenario sources: write the scenario with pipeline=K and the split as layers_per_stage")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON")
    p.add_argument("--system", help="system preset (default: the scenario's; gtx-1070 otherwise)")
    p.add_argument("--nodes", type=int, help="number of nodes of the system (default: the preset's / scenario's)")
    p.add_argument("--gpu-speed", metavar="RANK=FACTOR[,...]",
                   help="slower GPUs (heterogeneity.rank_speed), e.g. 0=0.5 for a half-speed GPU 0")
    p.add_argument("--batch", type=int, help="micro-batch size (CNN default 1; scenario default its own)")
    p.add_argument("--input", default="imagenet", help="CNN input: cifar10 | imagenet")
    p.add_argument("--classes", type=int, help="CNN output classes (default: the input's)")
    p.add_argument("--precision", choices=("fp32", "fp16", "bf16"), help="default fp32 for CNN/module sources")
    p.add_argument("--granularity", default="layer", help="transformer nodes: layer | block")
    p.add_argument("--num-layers", type=int, help="AmoebaNet-D normal cells per group (default 4)")
    p.add_argument("--num-filters", type=int, help="AmoebaNet-D filters (default 512)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="scenario override")
    p.add_argument("--memory-cap-GiB", type=float, help="per-GPU memory cap for the split")
    p.add_argument("--microbatches", type=int, default=None, help="micro-batches in flight for memory (default K)")
    p.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b", help="for in-flight activations")
    p.add_argument("--overlap-comm", action="store_true",
                   help="transfers overlap compute (stage time = max(compute, send/recv)) instead of adding")
    p.add_argument("--no-topology", action="store_true", help="keep stage k on GPU k (no placement search)")
    p.add_argument("--measure-nodes", action="store_true",
                   help="time every graph node on this CPU and balance measured instead of modelled times")


def parse_speeds(text: str | None) -> dict[int, float] | None:
    if not text:
        return None
    out = {}
    for item in text.split(","):
        rank, _, factor = item.partition("=")
        try:
            out[int(rank)] = float(factor)
        except ValueError:
            raise PipesimError(f"--gpu-speed {text}: expected RANK=FACTOR pairs like 0=0.5,3=0.8") from None
        if out[int(rank)] <= 0:
            raise PipesimError(f"--gpu-speed {text}: speed factors must be positive")
    return out


def run(args) -> int:
    from pipesim.partition.report import build_report, format_report
    from pipesim.partition.solve import partition
    from pipesim.partition.sources import load_source
    from pipesim.partition.stages import Options

    if args.stages < 1:
        raise PipesimError(f"--stages must be at least 1, got {args.stages}")
    if args.runs < 1:
        raise PipesimError(f"--runs must be at least 1, got {args.runs}")
    if args.memory_cap_GiB is not None and args.memory_cap_GiB <= 0:
        raise PipesimError(f"--memory-cap-GiB must be positive, got {args.memory_cap_GiB}")
    if args.microbatches is not None and args.microbatches < 1:
        raise PipesimError(f"--microbatches must be at least 1, got {args.microbatches}")
    if args.threads is not None and args.threads < 1:
        raise PipesimError(f"--threads must be at least 1, got {args.threads}")
    if args.nodes is not None and args.nodes < 1:
        raise PipesimError(f"--nodes must be at least 1, got {args.nodes}")
    if args.source.startswith("module:") and args.batch:
        raise PipesimError("--batch does not apply to module sources (the factory's example input fixes it)")
    cnn_options = {k: v for k, v in (("num_layers", args.num_layers), ("filters", args.num_filters)) if v}
    if cnn_options and args.source != "amoebanet-d":
        raise PipesimError("--num-layers/--num-filters apply to amoebanet-d only")
    src = load_source(args.source, system=args.system, batch=args.batch, input_name=args.input,
                      classes=args.classes, precision=args.precision, granularity=args.granularity,
                      overrides=args.set, measure_nodes=args.measure_nodes, cnn_options=cnn_options,
                      profile=args.profile, nodes=args.nodes, gpu_speed=parse_speeds(args.gpu_speed))
    graph = src.graph
    if args.measure_nodes and not args.source.startswith("module:"):
        from pipesim.partition.measure import measure_nodes
        graph = measure_nodes(graph, threads=args.threads)
    cap = args.memory_cap_GiB * 2**30 if args.memory_cap_GiB else None
    opts = Options(recompute=args.recompute, memory_cap=cap, microbatches=args.microbatches or args.stages,
                   schedule=args.schedule, static_bytes_per_param=src.static_bytes_per_param,
                   overlap=args.overlap_comm)
    part = partition(graph, args.stages, src.cluster, opts, topology_aware=not args.no_topology)
    real = None
    if args.real:
        from pipesim.partition.measure import measure_stages
        real = measure_stages(graph, part.bounds, runs=args.runs, recompute=args.recompute,
                              threads=args.threads, device=args.device)
    report = build_report(graph, part, src.cluster, opts, real)
    print(format_report(report))
    if args.scenario_out:
        write_scenario(src, report, Path(args.scenario_out))
        print(f"wrote {args.scenario_out}")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str))
        print(f"\nwrote {path}")
    return 0


def write_scenario(src, report: dict, path: Path) -> None:
    """The source scenario file with parallel.pipeline = K and the split as layers_per_stage (data
    parallelism over the remaining GPUs); loaded back before writing, so it is valid."""
    import copy

    import yaml

    from pipesim.scenario.file_paths import rebase
    from pipesim.scenario.load import build_scenario
    if src.scenario is None:
        raise PipesimError("--scenario-out needs a scenario source (a transformer YAML)")
    lps = report.get("layers_per_stage")
    if not lps:
        raise PipesimError("--scenario-out: the split falls inside a layer; use --granularity layer")
    s = src.scenario
    k = len(lps)
    width = s.parallel.tensor * k
    if s.system.num_gpus % width:
        raise PipesimError(f"--scenario-out: {s.system.num_gpus} GPUs are not divisible by "
                           f"tensor({s.parallel.tensor})·stages({k}) = {width}")
    source = Path(s.source)
    # the scenario's relative file paths, rewritten to resolve from the new file's folder
    raw = rebase(copy.deepcopy(src.raw), source.parent, path.resolve().parent)
    parallel = raw.setdefault("parallel", {}) or {}
    raw["parallel"] = parallel
    parallel.update(pipeline=k, virtual_stages=1, data=s.system.num_gpus // width, layers_per_stage=list(lps))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)     # its relative paths must resolve through it
    except OSError as exc:
        raise PipesimError(f"--scenario-out {path}: cannot create its folder: {exc.strerror}") from None
    build_scenario(raw, str(path), path.resolve().parent)      # ScenarioError with the reason if it does not fit
    note = [f"# written by pipesim partition {s.source} --stages {k}: slowest stage "
            f"{report['objective_s'] * 1e3:.3f} ms, imbalance {report['imbalance']['stage_total']:.3f}"]
    if [p["slot"] for p in report["placement"]] != list(range(k)):
        note.append(f"# note: the partitioner placed stages on GPU slots {[p['slot'] for p in report['placement']]};"
                    " the scenario maps stage k to pipeline rank k")
    try:
        path.write_text("\n".join(note) + "\n" + yaml.safe_dump(raw, sort_keys=False))
    except OSError as exc:
        raise PipesimError(f"--scenario-out {path}: cannot write: {exc.strerror}") from None
