"""pipesim.emulator: execute a scenario's pipeline plan for real on torch.distributed processes
and record it in the simulator's trace schema.

    from pipesim.emulator import emulate
    result = emulate("scenarios/emulator/tiny_1f1b.yaml", steps=3, warmup=1)   # dict, see results.py

Modules: model (the GPT stages), layers (deferred weight gradients, TP operators), executor (walks
the lowered plan), memory (saved-tensor accounting), recorder (events, status), worker (one
process), entry (a process's start and stop), host (priority, pinning), rank_calibration (op and
host costs timed inside the ranks), launcher (N local processes, faults), results (report per
step), reference (one-process run and torch.distributed.pipelining runs for cross-checks), scale
(--scale), suite (the seeded crosscheck suite).
The command line is `pipesim emulate` or `python -m pipesim.emulator` (also under torchrun).
"""
from __future__ import annotations


def prepare(scenario, overrides=(), scale=None):
    """Load (a path, dict or Scenario), apply --set overrides and --scale; returns a Scenario."""
    from pipesim.emulator.scale import scale_scenario
    from pipesim.scenario_load import load_scenario, scenario_to_dict
    if hasattr(scenario, "model"):
        s = load_scenario(scenario_to_dict(scenario), overrides) if overrides else scenario
    else:
        s = load_scenario(scenario, overrides)
    return scale_scenario(s, scale)


def config_for(s, *, steps=3, warmup=1, backend="gloo", seed=0, threads=1, dump_grads=False, nice=0,
               pin=False, calibrate=None) -> dict:
    from pipesim.scenario_load import scenario_to_dict
    from pipesim.emulator.scale import _drop_none
    return {"scenario": _drop_none(scenario_to_dict(s)), "steps": steps, "warmup": warmup, "backend": backend,
            "seed": seed, "threads": threads, "dump_grads": dump_grads, "nice": nice, "pin": pin,
            "calibrate": calibrate}


def emulate(scenario, *, overrides=(), scale=None, nproc=None, steps=3, warmup=1, backend="gloo",
            timeout=60.0, seed=0, threads=1, run_dir=None, dump_grads=False, nice=0, pin=False,
            calibrate=None) -> dict:
    """Run the scenario's plan on nproc local processes; returns the results dict (report fields,
    events and memory samples of the median measured step, spread, losses). Raises
    EmulationError (a PipesimError) naming the rank and action when a rank fails or hangs.

    nice: raise the ranks' CPU priority (root); pin: one core per rank (host.py). calibrate:
    None, or {"budget_s": seconds per op} to time the scenario's ops and the host costs inside
    every rank before its warm-up (rank_calibration.py); the result has a "profile" entry."""
    from pipesim.emulator.launcher import launch, start_forkserver
    start_forkserver()
    from pipesim.emulator.model import check_supported
    from pipesim.emulator.worker import plan_for
    from pipesim.errors import PipesimError, ScenarioError
    s = prepare(scenario, overrides, scale)
    check_supported(s)
    plan_for(s)    # schedule errors surface here, before any process starts
    n = s.num_gpus
    if nproc is not None and nproc != n:
        raise ScenarioError(f"{s.source}: --nproc {nproc} but tensor({s.parallel.tensor})*context("
                            f"{s.parallel.context})*pipeline({s.parallel.pipeline})*data({s.parallel.data}) = {n}")
    if steps < (0 if calibrate else 1) or warmup < 0:
        raise PipesimError(f"--steps must be >= 1 and --warmup >= 0, got {steps} and {warmup}")
    cfg = config_for(s, steps=steps, warmup=warmup, backend=backend, seed=seed, threads=threads,
                     dump_grads=dump_grads, nice=nice, pin=pin, calibrate=calibrate)
    return launch(cfg, n, timeout=timeout, run_dir=run_dir)


__all__ = ["emulate", "prepare", "config_for"]
