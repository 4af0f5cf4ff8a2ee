"""One emulator process: join the process group, build this rank's part of the model, execute
the plan for warm-up + measured steps, record, and write results (files for the launcher, or a
gather to rank 0 under torchrun).
"""
from __future__ import annotations

import gc
import json
import os
import socket
import time
from datetime import timedelta

from pipesim.errors import ScenarioError


def plan_for(s):
    """The scenario's lowered plan (schedule name or torch-format CSV)."""
    from pipesim.schedules import generate, lower, read_csv, validate
    P, V, M = s.parallel.pipeline, s.parallel.virtual_stages, s.num_microbatches
    name = s.training.schedule
    if name.endswith(".csv"):
        plan = read_csv(name)
    else:
        from pipesim.schedules.registry import legacy_warmup, schedule_options
        plan = generate(name, stages=P, microbatches=M, virtual=V,
                        **schedule_options(s.training.microbatch_group_size, legacy_warmup(s)))
    if (plan.num_ranks, plan.num_stages, plan.num_microbatches) != (P, P * V, M):
        raise ScenarioError(f"{s.source}: training.schedule {name!r} has {plan.num_ranks} ranks, "
                            f"{plan.num_stages} stages, {plan.num_microbatches} micro-batches; the scenario "
                            f"needs pipeline({P}), pipeline*virtual({P * V}), micro-batches({M})")
    validate(plan)
    return lower(plan)


def _setup(cfg: dict):
    import torch
    import torch.distributed as dist
    # torch.autograd.backward(out, grad) imports sympy on first use (~0.7 s): do it before timing.
    import torch.fx.experimental.symbolic_shapes  # noqa: F401

    from pipesim.costs.topology import coords as coords_of, rank_of
    from pipesim.emulator.executor import Runtime
    from pipesim.emulator.layers import TPGroup, WeightGradStore
    from pipesim.emulator.memory import MemoryCounter
    from pipesim.emulator.model import DTYPES, build_stages, check_supported
    from pipesim.emulator.recorder import ACTIVE, Recorder, Status
    from pipesim.scenario.load import load_scenario

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    s = load_scenario(cfg["scenario"])
    check_supported(s)
    if world != s.num_gpus:
        raise ScenarioError(f"{s.source}: {world} processes but tensor({s.parallel.tensor})*context("
                            f"{s.parallel.context})*pipeline({s.parallel.pipeline})*data({s.parallel.data}) = "
                            f"{s.num_gpus}")
    cuda = cfg.get("backend") == "nccl"
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(int(cfg.get("threads", 1)))
    run_dir = cfg.get("run_dir")
    status = Status(os.path.join(run_dir, f"rank{rank}.status") if run_dir else None)
    status.set(-1, "INIT", "run")
    timeout = timedelta(seconds=float(cfg.get("pg_timeout", cfg.get("timeout", 60))))
    dist.init_process_group(cfg.get("backend", "gloo"), rank=rank, world_size=world, timeout=timeout,
                            **({"device_id": device} if cuda else {}))
    c = coords_of(s, rank)
    tp_group = dp_group = None
    P, T, D, C = s.parallel.pipeline, s.parallel.tensor, s.parallel.data, s.parallel.context
    # Every rank creates every group in the same order (torch.distributed.new_group's contract).
    # Gradients are reduced over data x context: CP ranks hold the same weights.
    for pp in range(P):
        for dp in range(D):
            for cp in range(C):
                g = dist.new_group([rank_of(s, tp=t, dp=dp, pp=pp, cp=cp) for t in range(T)]) if T > 1 else None
                if (pp, dp, cp) == (c["pp"], c["dp"], c["cp"]):
                    tp_group = g
        for tp in range(T):
            g = dist.new_group([rank_of(s, tp=tp, dp=d, pp=pp, cp=cp) for d in range(D) for cp in range(C)]
                               ) if D * C > 1 else None
            if (pp, tp) == (c["pp"], c["tp"]):
                dp_group = g
    plan = cfg.get("_plan") or plan_for(s)
    counter = MemoryCounter()
    store = WeightGradStore(counter if not cuda else None)
    tp = TPGroup(tp_group, T, c["tp"], sequence_parallel=s.parallel.sequence_parallel,
                 keeps_gathered=s.training.tp_keeps_gathered_input)
    dtype = DTYPES[s.training.precision]
    torch.manual_seed(int(cfg.get("seed", 0)) * 131 + rank)
    my_stages = plan.stages_of(c["pp"])
    tie = s.model.tied_embeddings and P == 1
    stages, builder = build_stages(s, my_stages, tp, store, int(cfg.get("seed", 0)), dtype, tie)
    for m in stages.values():
        m.to(device)
    path = os.path.join(run_dir, f"rank{rank}.jsonl") if run_dir else None
    rec = Recorder(rank, path, status, cuda=cuda)
    rec.base_args = {"pp": c["pp"]}
    ACTIVE["recorder"] = rec
    peer = {k: rank_of(s, tp=c["tp"], dp=c["dp"], pp=plan.rank_of(k), cp=c["cp"]) for k in range(plan.num_stages)}
    cp = None
    if C > 1:
        from pipesim.emulator.context import ContextGroup, attach
        from pipesim.emulator.model import document_tensor
        ring = [rank_of(s, tp=c["tp"], dp=c["dp"], pp=c["pp"], cp=r) for r in range(C)]
        md = s.model      # the softmax scale: 1/sqrt of the q/k head dim (MLA: nope + rope)
        qk_dim = md.qk_nope_head_dim + md.qk_rope_head_dim if md.is_mla else md.head_dim
        cp = ContextGroup(C, c["cp"], ring, md.seq_length, s.parallel.context_layout, md.causal,
                          1.0 / qk_dim ** 0.5, log=tp.log, mode=s.parallel.context_mode,
                          a2a=s.parallel.context_levels[0], docs=document_tensor(s))
        attach(stages, cp)
    from pipesim.emulator.faults import ENV, parse_fault
    rt = Runtime(scenario=s, rank=rank, coords=c, plan=plan, stages=stages, tp=tp, dp_group=dp_group,
                 store=store, counter=counter, recorder=rec, peer_rank=peer, dtype=dtype, device=device,
                 fault=parse_fault(os.environ.get(ENV)), cp=cp)
    return rt, builder


def _clock_offset(rank: int) -> float:
    """This rank's perf_counter minus rank 0's. On one host CLOCK_MONOTONIC is shared by all
    processes, so the offset is 0; across hosts it is estimated at a barrier."""
    import torch.distributed as dist
    info = [None] * dist.get_world_size()
    dist.barrier()
    t = time.perf_counter()
    dist.all_gather_object(info, (socket.gethostname(), t))
    if len({h for h, _ in info}) == 1:
        return 0.0
    return t - info[0][1]


def run_worker(cfg: dict) -> dict:
    """Run one rank. Environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT."""
    import torch
    import torch.distributed as dist

    from pipesim.emulator.data import rank_batch
    from pipesim.emulator.executor import Executor
    from pipesim.emulator.optim import Optimizer, attach_grad_buffer, unique_params

    from pipesim.emulator.host import pin_to_core, raise_priority
    raise_priority(int(cfg.get("nice", 0)))
    if cfg.get("pin"):
        pin_to_core(int(os.environ["RANK"]))
    rt, builder = _setup(cfg)
    s, rec, counter = rt.scenario, rt.recorder, rt.counter
    params_by_stage = {}
    seen: set[int] = set()
    for k, m in sorted(rt.stages.items()):
        ps = [p for p in unique_params([m]) if id(p) not in seen]
        seen.update(id(p) for p in ps)
        params_by_stage[k] = ps
        rt.grad_buffers[k] = attach_grad_buffer(ps)
    all_params = [p for k in sorted(params_by_stage) for p in params_by_stage[k]]
    m = s.model
    muon = (builder.names, (m.num_attention_heads // m.kv_heads * m.head_dim, m.head_dim, m.head_dim),
            s.training.muon_ns_steps) if s.training.optimizer == "muon" else None
    opt = Optimizer(all_params, s.training.optimizer, muon)
    held = unique_params([rt.stages[k] for k in sorted(rt.stages)], learning=False)     # frozen ones too
    counter.skip_storage_of(held)
    counter.set_static("weights", sum(p.numel() * p.element_size() for p in held))
    counter.set_static("gradients", sum(b.numel() * b.element_size() for b in rt.grad_buffers.values()))
    counter.set_static("optimizer", opt.nbytes())
    rec.offset = _clock_offset(rt.rank)
    ex = Executor(rt)
    # Manual garbage collection (Megatron-LM --manual-gc: "helps to align the timing of the
    # collection across ranks which mitigates the impact of CPU-associated jitters"): the
    # collector is paused through the calibrations and the steps and run between steps, so a full
    # collection inside a timed step does not stall its partner ranks (the suite's zb-v L8 h96 a6:
    # the 12th step took 232-261 ms against 90-101 ms for the others, in three runs), and the
    # calibrations time the ops under the same regime as the steps.
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    calibrate, rounds = None, []
    if cfg.get("calibrate"):      # op and host costs, in this process, before and after the timed steps
        from functools import partial

        from pipesim.emulator.rank_calibration import (DEFAULT_BUDGET_S, calibrate_in_rank, in_model_supported,
                                                       trace_round)
        calibrate = partial(calibrate_in_rank, s, rt.rank, dist.get_world_size(),
                            float(cfg["calibrate"].get("budget_s", DEFAULT_BUDGET_S)), executor=ex,
                            run_dir=cfg.get("run_dir"), status=rec.status)
        calibrate(when="before")
    steps, warmup = int(cfg.get("steps", 3)), int(cfg.get("warmup", 1))
    seed = int(cfg.get("seed", 0))
    cuda = rt.device.type == "cuda"
    rec.write_meta(kind="init", coords=rt.coords, stages=sorted(rt.stages), offset=rec.offset,
                   params=sum(p.numel() for p in all_params), static=dict(counter.static))
    step_losses = []
    for step in range(warmup + steps):
        gc.collect()
        if calibrate is not None and step >= warmup and in_model_supported(s):
            rounds.append(trace_round(s, ex))       # op costs at the timed steps' moments
        tokens = rank_batch(s, seed, step, rt.coords["dp"]).to(rt.device)
        for b in rt.grad_buffers.values():
            b.zero_()
        rt.losses.clear()
        measured = step >= warmup
        rec.keep, rec.step = measured, step - warmup
        counter.reset_peak()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(rt.device)
        dist.barrier()
        t0 = rec.start_step()
        if measured:
            rec.write_meta(kind="step", step=rec.step, start=rec.rel(t0))
            rec.sample(t0, *rt.memory_reading())
        ex.run_step(step, tokens)
        if cfg.get("dump_grads") and step == 0:
            _dump_grads(cfg, rt, builder, all_params)
        rt.recorder.status.set(step, "OPTIMIZER", "run")
        # Muon's orthogonalisation as its own event, as the simulator's NEWTON_SCHULZ step op
        for name, run in ((("NEWTON_SCHULZ", opt.step_matrices),) if opt.muon else ()) + (
                ("OPTIMIZER", opt.step if not opt.muon else opt.step_rest),):
            start, cpu0 = rec.now(), time.thread_time()
            run()
            if cuda:
                torch.cuda.synchronize()
            end = rec.now()
            rec.event("compute", name, -1, -1, start, end, cpu_s=time.thread_time() - cpu0)
        rec.sample(end, *rt.memory_reading())
        rec.flush()
        rt.losses[:] = [float(x) for x in rt.losses]
        if measured:
            peak = float(torch.cuda.max_memory_allocated(rt.device)) if cuda else counter.peak
            rec.write_meta(kind="step_end", step=rec.step, end=rec.rel(end), peak=peak,
                           losses=list(rt.losses))
        step_losses.append(list(rt.losses))
        rec.flush_file()
        rt.recorder.status.set(step, "STEP", "done")
    if calibrate is not None and steps:
        gc.collect()
        calibrate(when="after", rounds=rounds)
    if gc_was_enabled:
        gc.enable()
    result = {"rank": rt.rank, "coords": rt.coords, "stages": sorted(rt.stages), "losses": step_losses,
              "quant_errors": list(rt.quant_errors), "peak_memory_bytes": counter.peak,
              "static": dict(counter.static), "params": sum(p.numel() for p in all_params)}
    if cfg.get("run_dir"):
        with open(os.path.join(cfg["run_dir"], f"rank{rt.rank}.result.json"), "w") as fh:
            json.dump(result, fh)
    result["_events"], result["_memory"], result["_metas"] = rec.events, rec.memory, rec.metas
    rec.close()
    dist.barrier()
    return result


def _dump_grads(cfg, rt, builder, params) -> None:
    import torch
    out = {}
    for p in params:
        name = builder.names[id(p)]
        out[name] = (p.grad.detach().clone().float().cpu(), builder.layout.get(name))
    losses = [float(x) for x in rt.losses]
    loss = sum(losses) / len(losses) if losses else None
    torch.save({"grads": out, "losses": losses, "loss": loss, "coords": rt.coords,
                "tp": rt.scenario.parallel.tensor},
               os.path.join(cfg["run_dir"], f"rank{rt.rank}.grads.pt"))
