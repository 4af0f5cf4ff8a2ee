"""`pipesim emulate SCENARIO [--nproc N] [--steps K] [--warmup W] [--backend gloo|nccl] [--scale S]
[--set a.b=v] [--timeout S] [--trace OUT.json] [--json OUT]`

Starts N = tensor*pipeline*data processes on this machine (or, under torchrun, is one of them)
and runs the scenario's plan for real; prints the measured step time, its spread and memory.
"""
from __future__ import annotations

import json
import os


def add_arguments(parser) -> None:
    parser.add_argument("scenario", help="scenario YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a scenario key, e.g. parallel.pipeline=2 (repeatable)")
    parser.add_argument("--scale", default=None,
                        help="shrink the model: one factor (0.25) or width=,depth=,seq=,vocab= factors")
    parser.add_argument("--nproc", type=int, default=None,
                        help="processes to start (must equal tensor*pipeline*data; default: that product)")
    parser.add_argument("--steps", type=int, default=3, help="measured steps (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps, not recorded (default 1)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                        help="torch.distributed backend (default: nccl with CUDA, else gloo)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="stop the run when no rank makes progress for this many seconds (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="weights and data seed")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per rank (default 1)")
    parser.add_argument("--run-dir", default=None, help="keep per-rank logs and traces here (default: a temp dir)")
    parser.add_argument("--json", dest="json_out", default=None, help="write the measured report JSON here")
    parser.add_argument("--trace", default=None, help="write a Chrome/Perfetto trace of the median step")


def _backend(args) -> str:
    if args.backend:
        return args.backend
    try:
        import torch
        return "nccl" if torch.cuda.is_available() else "gloo"
    except ImportError:
        return "gloo"


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ \
        or os.environ.get("PIPESIM_UNDER_TORCHRUN") == "1"


def write_outputs(result: dict, args) -> None:
    from pipesim.errors import PipesimError
    if args.json_out:
        try:
            with open(args.json_out, "w") as fh:
                json.dump(result, fh, indent=1, default=float)
        except OSError as exc:
            raise PipesimError(f"{args.json_out}: cannot write the report: {exc.strerror}") from None
    if args.trace:
        from pipesim.report.perfetto import write_trace
        from pipesim.report.trace import MemorySample, TraceEvent
        write_trace(args.trace, [TraceEvent.from_dict(e) for e in result.get("events", [])],
                    [MemorySample.from_dict(m) for m in result.get("memory", [])], name="pipesim emulator")


def print_summary(result: dict) -> None:
    sp = result.get("step_time_spread_s", {})
    print(f"step time      {result.get('step_time_s', 0) * 1e3:9.2f} ms  (median of {sp.get('n', 0)} steps; "
          f"mean {sp.get('mean', 0) * 1e3:.2f}, std {sp.get('std', 0) * 1e3:.2f}, "
          f"min {sp.get('min', 0) * 1e3:.2f}, max {sp.get('max', 0) * 1e3:.2f} ms)")
    print(f"throughput     {result.get('throughput_samples_per_s', 0):9.2f} samples/s, "
          f"{result.get('tokens_per_s', 0):.0f} tokens/s")
    print(f"bubble         {result.get('bubble_fraction', 0) * 100:9.1f} %")
    print(f"peak memory    {result.get('peak_memory_bytes', 0) / 2**20:9.2f} MiB")
    if result.get("loss_per_step"):
        print("loss per step  " + " ".join(f"{x:.4f}" for x in result["loss_per_step"]))
    if "quantization_rel_error" in result:
        q = result["quantization_rel_error"]
        print(f"quantization   relative error mean {q['mean']:.3g}, max {q['max']:.3g}")
    for r in result.get("ranks", []):
        print(f"  rank {r['rank']:2d} (pp {r['stage']}): compute {r['compute_busy_s'] * 1e3:8.2f} ms, "
              f"comm {r['comm_busy_s'] * 1e3:7.2f} ms, bubble {r['bubble_fraction'] * 100:5.1f} %, "
              f"peak {r['peak_memory_bytes'] / 2**20:8.2f} MiB")


def run(args) -> int:
    from pipesim.emulator import emulate
    from pipesim.emulator.launcher import EmulationError
    backend = _backend(args)
    if under_torchrun():
        return _run_torchrun(args, backend)
    try:
        result = emulate(args.scenario, overrides=args.overrides, scale=args.scale, nproc=args.nproc,
                         steps=args.steps, warmup=args.warmup, backend=backend, timeout=args.timeout,
                         seed=args.seed, threads=args.threads, run_dir=args.run_dir)
    except EmulationError as exc:
        if exc.partial and (args.json_out or args.trace):
            write_outputs(exc.partial, args)
        raise
    write_outputs(result, args)
    print_summary(result)
    return 0


def _run_torchrun(args, backend: str) -> int:
    """One rank of a torchrun launch: run, gather everything to rank 0, which writes the outputs."""
    import torch.distributed as dist

    from pipesim.emulator import config_for, prepare
    from pipesim.emulator.results import from_gathered
    from pipesim.emulator.worker import run_worker
    s = prepare(args.scenario, args.overrides, args.scale)
    cfg = config_for(s, steps=args.steps, warmup=args.warmup, backend=backend, seed=args.seed,
                     threads=args.threads)
    cfg["timeout"] = args.timeout
    res = run_worker(cfg)
    payload = ([e.to_dict() for e in res.pop("_events")], [m.to_dict() for m in res.pop("_memory")],
               res.pop("_metas", []), res)
    gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(payload, gathered, dst=0)
    if dist.get_rank() == 0:
        result = from_gathered(s, gathered)
        write_outputs(result, args)
        print_summary(result)
    dist.destroy_process_group()
    return 0
