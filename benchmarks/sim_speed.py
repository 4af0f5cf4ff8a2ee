"""Simulator speed: `python benchmarks/sim_speed.py [--repeat N] [--processes K] [--skip-full] [--huge] [--pairs N] [--only-engine]`

Prints, in one run:
0. every schedule generator at P=8, M=64 (V=2 where the schedule needs chunks): generation
   alone and generation + structural checks + lowering + plan rows as the simulator caches them
   (target: generation <= 20 ms);
1. GPT-3 175B on 1024 A100s (tensor 8, pipeline 8, data 16, micro-batch 1, global batch 1536,
   selective recompute), representative mode, 1F1B and interleaved (2 chunks): first call in a
   fresh process after `import pipesim` and numpy (plan generation and pipesim's lazy imports
   included) and the median of N further calls, with the timing
   path that ran (dag | simpy), and the same with the SimPy engine forced. With CALCULON=PATH (a
   git checkout of calculon-ai/calculon, which imports pandas) the same configuration through
   Calculon in the same fresh process: first call and warm median, and the ratios (targets:
   first <= 10x, warm <= 3x). Calculon's modules are imported before its first call is timed;
   the "1f1b, modules" row does the same for pipesim (the modules a simulation imports lazily are
   imported first), the "1f1b" row times pipesim's lazy imports inside its first call. Every row
   runs twice: modules compiled from source at import (no bytecode cache) and with a primed
   bytecode cache (an installed package's state), each in K fresh processes (--processes, default
   3), every figure the median over them. Both are timed as the calling thread's CPU
   time, with OPENBLAS_NUM_THREADS=1 (neither simulator calls BLAS): `import numpy` starts an
   OpenBLAS worker thread that busy-waits for its first job for about 0.1 s, which process CPU
   time charges to whatever runs first after the import (a first call of 16 ms thread time read
   16-32 ms process time, and equal after a 0.5 s sleep) and which slows the calls in that window
   on a 2-vCPU machine (thread time: first call 18-30 ms and the next five 7.5-8.4 ms each, against
   18 ms and 4.8 ms with one BLAS thread); Calculon's calls, timed after pipesim's, fell outside
   that window;
2. full mode with 4096 GPUs x 64 micro-batches: GPT-3 at tensor 8, pipeline 8, data 64 (512
   simulated TP gangs), and tensor 1, pipeline 8, data 512 (4096 simulated rank processes);
   --huge adds 16,384 ranks (targets: 4096 ranks at tensor 1 <= 3 s, 16,384 <= 12 s);
3. engine events per second against a bare SimPy loop processing the same number of events
   (every event the engine schedules: timeouts, message and bucket wake-ups, process starts and
   ends) with as many processes (a rank process and a DP stream per simulated rank); target:
   engine time <= 2x the bare loop. CPU seconds; engine and bare runs alternate (--pairs N, each
   pair sees the same load) and the figures are the best of each and the median of the pairs'
   ratios.
Wall and CPU seconds are both shown: on a shared machine wall time includes other jobs.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time


def gpt3_dict(schedule="1f1b", virtual=1, tensor=8, data=16, nodes=128, batch=1536, recompute="selective"):
    return {"model": {"preset": "gpt3-175b"},
            "system": {"preset": "dgx-a100-80gb", "num_nodes": nodes},
            "parallel": {"tensor": tensor, "pipeline": 8, "data": data, "sequence_parallel": tensor > 1,
                         "virtual_stages": virtual},
            "training": {"micro_batch_size": 1, "global_batch_size": batch, "schedule": schedule,
                         "recompute": recompute}}


def gpt3(*args, **kw):
    from pipesim import load_scenario
    return load_scenario(gpt3_dict(*args, **kw))


# The same layout for Calculon (its models/gpt3-175B.json and systems/a100_80g.json): t8 p8 d16,
# batch 1536, micro-batch 1, fp16, sequence parallelism (rs_ag), attention-only recompute (its
# name for selective), DP overlapped with the backward.
CALCULON_EXECUTION = {
    "num_procs": 1024, "tensor_par": 8, "pipeline_par": 8, "data_par": 16, "tensor_par_net": 0,
    "pipeline_par_net": 1, "data_par_net": 1, "batch_size": 1536, "microbatch_size": 1, "datatype": "float16",
    "fused_activation": True, "attention_type": "multihead", "activation_recompute": "attn_only",
    "pipeline_interleaving": 1, "optimizer_sharding": False, "tensor_par_comm_type": "rs_ag",
    "tensor_par_overlap": "none", "seq_par_ag_redo": False, "data_par_overlap": True, "weight_offload": False,
    "activations_offload": False, "optimizer_offload": False, "training": True}

FIRST_CALL = r"""
import json, logging, os, statistics, sys, time
sys.path.insert(0, {bench!r})
import numpy  # noqa: F401  (a dependency, loaded up front as `import calculon` loads numpy and pandas)
import pipesim
from sim_speed import gpt3_dict, CALCULON_EXECUTION
out = {{}}
s = pipesim.load_scenario(gpt3_dict({schedule!r}, {virtual}))
if {preimport}:   # the modules a simulation imports lazily, imported up front as Calculon's are below
    import pipesim.sim.dag, pipesim.model_stages, pipesim.costs.stage, pipesim.calibrate.host, pipesim.schedules  # noqa
def cpu(fn):   # this thread's CPU time: numpy's OpenBLAS worker spins ~0.1 s after import (see main doc)
    c = time.thread_time(); r = fn(); return time.thread_time() - c, r
out["pipesim_first"], rep = cpu(lambda: pipesim.simulate(s, trace=False))
out["engine"], out["step"] = rep.engine, rep.step_time_s
out["pipesim_warm"] = statistics.median(cpu(lambda: pipesim.simulate(s, trace=False))[0] for _ in range({repeat}))
out["simpy_warm"] = statistics.median(cpu(lambda: pipesim.simulate(s, trace=False, engine_choice="simpy"))[0]
                                      for _ in range({repeat}))
root = os.environ.get("CALCULON")
if root and {virtual} == 1:
    sys.path.insert(0, root)
    import calculon
    from calculon.llm import Llm
    from calculon.system import System
    app = json.load(open(os.path.join(root, "models", "gpt3-175B.json")))
    system = json.load(open(os.path.join(root, "systems", "a100_80g.json")))
    log = logging.getLogger("calculon")
    def calc():
        m = Llm(Llm.Application(app), log)
        m.compile(System(system), Llm.Execution.from_json(CALCULON_EXECUTION))
        m.run(System(system))
        return m.get_total_time()
    out["calculon_first"], out["calculon_step"] = cpu(calc)
    out["calculon_warm"] = statistics.median(cpu(calc)[0] for _ in range({repeat}))
print(json.dumps(out))
"""


def timed(fn):
    """(wall seconds, result); CPU seconds of the last call in LAST_CPU (other jobs sharing the
    cores inflate wall time, not CPU time)."""
    global LAST_CPU
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    LAST_CPU = time.process_time() - c
    return time.perf_counter() - t, out


LAST_CPU = 0.0


def bare_simpy(n_events: int, n_procs: int) -> float:
    """CPU seconds for SimPy to process n_events timeouts spread over n_procs processes."""
    import simpy
    env = simpy.Environment()
    per = max(1, n_events // n_procs)

    def proc():
        for _ in range(per):
            yield env.timeout(1.0)

    for _ in range(n_procs):
        env.process(proc())
    from pipesim.sim.gc_pause import no_gc       # same conditions as the engine's run
    with no_gc():
        t = time.process_time()
        env.run()
        return time.process_time() - t


def engine_events(s, mode):
    """(CPU s of Engine.run including its per-rank summaries, events scheduled, processes, plan actions)."""
    from pipesim.sim.engine import Engine
    from pipesim.sim.workload import build
    w = build(s, mode)
    eng = Engine(w, trace=False)
    timed(eng.run)
    actions = sum(len(g.steps) for g in w.gangs)
    return LAST_CPU, next(eng.env._eid), 2 * len(w.gangs), actions


def generators() -> None:
    from pipesim.schedules import SCHEDULES, generate, lower, validate
    from pipesim.sim.workload import plan_steps
    print("0. schedule generators, P=8, M=64 (CPU ms, best of 3; target: generation <= 20 ms)")
    for name in SCHEDULES:
        V = 2 if name in ("interleaved", "looped-bfs", "zb-v", "dualpipe-v") else 1
        gen, full = [], []
        for _ in range(3):
            c = time.process_time()
            plan = generate(name, 8, 64, V)
            gen.append(time.process_time() - c)
            validate(plan, deadlock=False)
            plan_steps(lower(plan))
            full.append(time.process_time() - c)
        print(f"   {name:12s} V={V}  generate {min(gen) * 1e3:6.1f} ms  + checks, lowering, plan rows "
              f"{min(full) * 1e3:6.1f} ms")


def first_and_warm(repeat: int, processes: int = 3) -> None:
    """Each row twice: in a fresh process whose imports compile every module from source (as
    here, where PYTHONDONTWRITEBYTECODE=1 is set: nothing is cached), and in a fresh process with
    a bytecode cache primed by an earlier process (PYTHONPYCACHEPREFIX: what an installed package
    has, pip compiles it at install time). Calculon's modules are imported outside its timing in
    both, so only pipesim's lazy imports see the difference. Each row runs in `processes` fresh
    processes and prints the median of each figure over them."""
    import json
    import os
    import subprocess
    import tempfile
    from pathlib import Path
    here = str(Path(__file__).resolve().parent)
    calc = os.environ.get("CALCULON")
    print("1. GPT-3 175B, 1024 x A100 (t8 p8 d16, mb 1, gbs 1536, selective recompute), representative mode; "
          "CPU s in a fresh process" + ("" if calc else " (set CALCULON=PATH to compare with Calculon)"))
    # one BLAS thread: neither simulator calls BLAS, and numpy's OpenBLAS worker busy-waits for
    # ~0.1 s after import, slowing the first calls on the other vCPU by up to 60 % (module doc)
    quiet = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cached = dict(quiet, PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="pipesim-pyc-"))
    cached.pop("PYTHONDONTWRITEBYTECODE", None)
    source = dict(quiet, PYTHONDONTWRITEBYTECODE="1")
    for label, sched, v, pre in (("1f1b", "1f1b", 1, False), ("1f1b, modules", "1f1b", 1, True),
                                 ("interleaved v=2", "interleaved", 2, False)):
        code = FIRST_CALL.format(bench=here, schedule=sched, virtual=v, repeat=repeat, preimport=pre)
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=cached)  # prime
        for how, env in (("from source", source), ("bytecode cached", cached)):
            runs = [json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                              check=True, env=env).stdout.strip().splitlines()[-1])
                    for _ in range(processes)]
            # each figure: its median over the fresh processes (one neighbour's burst moves one run)
            r = {k: statistics.median(x[k] for x in runs) if isinstance(runs[0][k], float) else runs[0][k]
                 for k in runs[0]}
            line = (f"   {label:16s} {how:15s} first call {r['pipesim_first']:6.3f} s, warm "
                    f"{r['pipesim_warm'] * 1e3:6.1f} ms [{r['engine']}] (SimPy engine forced: warm "
                    f"{r['simpy_warm'] * 1e3:6.1f} ms), step {r['step']:.3f} s")
            if "calculon_first" in r:
                line += (f"\n   {'  Calculon':32s} first call {r['calculon_first']:6.3f} s, warm "
                         f"{r['calculon_warm'] * 1e3:6.1f} ms, step {r['calculon_step']:.3f} s  ->  pipesim / "
                         f"Calculon: first {r['pipesim_first'] / r['calculon_first']:.1f}x (target <= 10x), warm "
                         f"{r['pipesim_warm'] / r['calculon_warm']:.1f}x (target <= 3x)")
            print(line)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per first-call row (medians)")
    ap.add_argument("--skip-full", action="store_true")
    ap.add_argument("--huge", action="store_true", help="also 16,384 ranks at tensor 1 in full mode")
    ap.add_argument("--pairs", type=int, default=15, help="alternating engine / bare SimPy runs in section 3")
    ap.add_argument("--only-engine", action="store_true", help="section 3 only")
    args = ap.parse_args(argv)
    import os
    import pipesim
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if not args.only_engine:
        generators()
        first_and_warm(args.repeat, args.processes)

    if not args.skip_full and not args.only_engine:
        print("2. full mode, 64 micro-batches (1F1B)")
        cases = [("4096 GPUs t8 p8 d64 (512 gangs)", dict(tensor=8, data=64, nodes=512, batch=4096)),
                 ("4096 GPUs t1 p8 d512 (4096 ranks)", dict(tensor=1, data=512, nodes=512, batch=32768))]
        if args.huge:
            cases.append(("16384 GPUs t1 p8 d2048 (16384 ranks)", dict(tensor=1, data=2048, nodes=2048, batch=131072)))
        for label, kw in cases:
            s = gpt3(**kw)
            assert s.num_microbatches == 64
            sec, rep = timed(lambda: pipesim.simulate(s, mode="full", trace=False))
            cpu = LAST_CPU
            r = pipesim.simulate(s, trace=False)
            print(f"   {label:38s} {sec:6.2f} s wall, {cpu:6.2f} s CPU [{rep.engine}]  step {rep.step_time_s:.4f} s "
                  f"(representative {r.step_time_s:.4f} s, {'equal' if r.step_time_s == rep.step_time_s else 'differs'})")
            if s.num_gpus <= 4096:
                sec, ref = timed(lambda: pipesim.simulate(s, mode="full", trace=False, engine_choice="simpy"))
                print(f"   {'  same, SimPy engine forced':38s} {sec:6.2f} s wall, {LAST_CPU:6.2f} s CPU [{ref.engine}]  "
                      f"step {ref.step_time_s:.4f} s ({'bit-equal' if ref.step_time_s == rep.step_time_s else 'DIFFERS'})")

    print("3. SimPy engine vs bare SimPy loop (same event count; target <= 2x)")
    cases = [("representative GPT-3 1f1b", gpt3(), "representative")]
    if not args.skip_full:
        cases.append(("full t8 p8 d64", gpt3(tensor=8, data=64, nodes=512, batch=4096), "full"))
    for label, s, mode in cases:
        _, n, procs, actions = engine_events(s, mode)
        eng, bare = [], []
        for _ in range(args.pairs):
            eng.append(engine_events(s, mode)[0])
            bare.append(bare_simpy(n, procs))
        sec, base = min(eng), min(bare)
        ratio = statistics.median(e / b for e, b in zip(eng, bare))
        print(f"   {label:28s} {n:9d} events, {procs} processes ({actions} plan actions)  engine {sec:6.3f} s "
              f"({n / sec / 1e3:7.1f} k ev/s, {actions / sec / 1e3:7.1f} k actions/s)  "
              f"bare {base:6.3f} s ({n / base / 1e3:7.1f} k ev/s)  overhead {sec / base:4.2f}x best/best, "
              f"{ratio:4.2f}x median of {args.pairs} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
