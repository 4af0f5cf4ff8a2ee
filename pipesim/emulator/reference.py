"""Reference runs the emulator is checked against.

- `single_process_grads`: the same model (same weights, same batch) in one process, no pipeline,
  no tensor or data parallelism: the loss and every parameter's gradient after one step.
- `assemble_grads`: put the per-rank gradient dumps of an emulation back together (tensor-parallel
  shards concatenated per their split) for comparison with the single-process run.
- `torch_pipelining_run`: the same model and batch under torch.distributed.pipelining's
  ScheduleGPipe / Schedule1F1B on local processes (torch_pipelining.py runs inside each rank).
"""
from __future__ import annotations

import glob
import os


def single_process_grads(s, seed: int = 0, step: int = 0):
    """(loss, {global parameter name: gradient}) of one step of the whole model in one process."""
    import torch

    from pipesim.emulator.data import global_batch
    from pipesim.emulator.layers import TPGroup, WeightGradStore
    from pipesim.emulator.model import DTYPES, build_stages
    from pipesim.emulator.optim import attach_grad_buffer, unique_params

    torch.manual_seed(seed)
    tie = s.model.tied_embeddings and s.parallel.pipeline == 1
    stages, builder = build_stages(s, range(s.num_model_stages), TPGroup(), WeightGradStore(), seed,
                                   DTYPES[s.training.precision], tie)
    params = unique_params([stages[k] for k in sorted(stages)])
    attach_grad_buffer(params)
    tokens = global_batch(s, seed, step)
    x = tokens[:, :-1]
    last = max(stages)
    for k in sorted(stages):
        x = stages[k](x, tokens[:, 1:]) if k == last else stages[k](x)
    x.backward()
    return float(x.detach()), {builder.names[id(p)]: p.grad.detach().clone() for p in params}


def _unshard(shards, layout, tp: int):
    import torch
    if layout is None or tp == 1:
        return shards[0]
    _, dim, parts = layout
    pieces = [torch.split(t, [p // tp for p in parts], dim=dim) for t in shards]
    return torch.cat([torch.cat([pc[i] for pc in pieces], dim=dim) for i in range(len(parts))], dim=dim)


def assemble_grads(run_dir: str):
    """(mean loss over all micro-batches, {name: full gradient of data-parallel replica 0}) from the
    rank*.grads.pt dumps."""
    import torch
    by_name: dict = {}
    losses, tp = [], 1
    for path in sorted(glob.glob(os.path.join(run_dir, "rank*.grads.pt"))):
        d = torch.load(path, weights_only=False)
        if d["coords"]["tp"] == 0:
            losses += d["losses"]        # every data-parallel replica's micro-batch losses
        if d["coords"]["dp"] != 0:
            continue
        tp = d["tp"]
        for name, (g, layout) in d["grads"].items():
            by_name.setdefault(name, {})[d["coords"]["tp"]] = (g, layout)
    out = {}
    for name, shards in by_name.items():
        ordered = [shards[r][0] for r in sorted(shards)]
        out[name] = _unshard(ordered, shards[min(shards)][1], tp)
    return (sum(losses) / len(losses) if losses else None), out


def torch_pipelining_run(scenario, schedule: str, steps: int = 3, warmup: int = 1, timeout: float = 60.0,
                         run_dir=None, seed: int = 0, nice: int = 0, pin: bool = False) -> dict:
    """Run the torch reference on local processes; returns {step_time_s (median), step_times_s,
    peak_memory_bytes per rank, loss_per_step}."""
    import json
    import statistics
    import tempfile

    from pipesim.emulator import config_for, prepare
    from pipesim.emulator.launcher import launch
    s = prepare(scenario, [f"training.schedule={schedule}"])
    cfg = config_for(s, steps=steps, warmup=warmup, seed=seed, nice=nice, pin=pin)
    cfg["mode"] = "torch_pipelining"
    run_dir = run_dir or tempfile.mkdtemp(prefix="pipesim-torchpp-")
    launch(cfg, s.num_gpus, timeout=timeout, run_dir=run_dir)
    res = []
    for r in range(s.num_gpus):
        with open(os.path.join(run_dir, f"rank{r}.result.json")) as fh:
            res.append(json.load(fh))
    times = res[0]["step_times_s"]
    last = res[-1]
    return {"schedule": schedule, "step_time_s": statistics.median(times), "step_times_s": times,
            "peak_memory_bytes": [r["peak_memory_bytes"] for r in res],
            "loss_per_step": [sum(ls) / len(ls) for ls in last["losses"] if ls]}
