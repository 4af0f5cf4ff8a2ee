"""Reference cross-check (seed 002: own pipeline vs torchgpipe): the same model, weights and batch
run by torch.distributed.pipelining's ScheduleGPipe / Schedule1F1B, timed and memory-counted the
way the emulator is, so step time, peak memory and loss can be put side by side.

Started through the same launcher (cfg["mode"] = "torch_pipelining", see
reference.torch_pipelining_run); pipeline parallelism only.
"""
from __future__ import annotations

import json
import os
import time

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}


def available() -> bool:
    try:
        import torch.distributed.pipelining  # noqa: F401
        return True
    except ImportError:
        return False


def run_torch_pipelining(cfg: dict) -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed import pipelining

    from pipesim.emulator.data import global_batch
    from pipesim.emulator.layers import TPGroup, WeightGradStore
    from pipesim.emulator.memory import MemoryCounter
    from pipesim.emulator.model import DTYPES, build_stages
    from pipesim.emulator.optim import Optimizer, attach_grad_buffer, unique_params
    from pipesim.emulator.recorder import Status
    from pipesim.errors import ScenarioError
    from pipesim.scenario_load import load_scenario

    from pipesim.emulator.host import pin_to_core, raise_priority
    raise_priority(int(cfg.get("nice", 0)))
    if cfg.get("pin"):
        pin_to_core(int(os.environ["RANK"]))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    s = load_scenario(cfg["scenario"])
    P, M = s.parallel.pipeline, s.num_microbatches
    if s.parallel.tensor != 1 or s.parallel.data != 1 or s.parallel.virtual_stages != 1 or world != P:
        raise ScenarioError(f"{s.source}: the torch.distributed.pipelining reference runs pipeline "
                            f"parallelism only (tensor = data = virtual_stages = 1)")
    torch.set_num_threads(int(cfg.get("threads", 1)))
    status = Status(os.path.join(cfg["run_dir"], f"rank{rank}.status"))
    status.set(-1, "INIT", "run")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    seed = int(cfg.get("seed", 0))
    dtype = DTYPES[s.training.precision]
    store = WeightGradStore()
    stages, _ = build_stages(s, [rank], TPGroup(), store, seed, dtype, tie=False)
    model = stages[rank]
    head = model.head

    class Logits(torch.nn.Module):
        """The stage with the loss moved out (torch's schedules apply loss_fn to the last output)."""

        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            m = self.inner
            if m.embedding is not None:
                x = m.embedding(x)
            for layer in m.layers:
                x = layer(x)
            if head is not None:
                return head.lin(head.norm(x)).float()
            return x

    def loss_fn(logits, target):       # logits [s, b, V], target [b, s]
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), target.t().reshape(-1))

    mb, seq, h, V = s.training.micro_batch_size, s.model.seq_length, s.model.hidden_size, s.model.vocab_size
    example_in = (torch.zeros(mb, seq, dtype=torch.long) if rank == 0
                  else torch.zeros(seq, mb, h, dtype=dtype, requires_grad=True),)
    example_out = (torch.zeros(seq, mb, V, requires_grad=True) if head is not None
                   else torch.zeros(seq, mb, h, dtype=dtype, requires_grad=True),)
    module = Logits()
    stage = pipelining.PipelineStage(module, rank, P, torch.device("cpu"), input_args=example_in,
                                     output_args=example_out)
    name = s.training.schedule
    if name not in SCHEDULES:
        raise ScenarioError(f"{s.source}: training.schedule {name!r}: the torch reference runs "
                            f"{', '.join(SCHEDULES)}")
    schedule = getattr(pipelining, SCHEDULES[name])(stage, n_microbatches=M, loss_fn=loss_fn)
    params = unique_params([model])
    attach_grad_buffer(params)
    opt = Optimizer(params, s.training.optimizer)
    counter = MemoryCounter()
    counter.skip_storage_of(params)
    counter.set_static("weights", sum(p.numel() * p.element_size() for p in params))
    counter.set_static("gradients", sum(p.numel() * p.element_size() for p in params))
    counter.set_static("optimizer", opt.nbytes())
    steps, warmup = int(cfg.get("steps", 3)), int(cfg.get("warmup", 1))
    times, peaks, losses = [], [], []
    for step in range(warmup + steps):
        tokens = global_batch(s, seed, step)
        for p in params:
            p.grad.zero_()
        counter.reset_peak()
        dist.barrier()
        status.set(step, "STEP", "run")
        t0 = time.perf_counter()
        out = []
        with counter.hooks():
            if rank == 0 and rank == P - 1:
                schedule.step(tokens[:, :-1], target=tokens[:, 1:], losses=out)
            elif rank == 0:
                schedule.step(tokens[:, :-1])
            elif rank == P - 1:
                schedule.step(target=tokens[:, 1:], losses=out)
            else:
                schedule.step()
        opt.step()
        t1 = time.perf_counter()
        status.set(step, "STEP", "done")
        if step >= warmup:
            times.append(t1 - t0)
            peaks.append(counter.peak)
        losses.append([float(x.detach()) for x in out])
    # the step ends when the slowest rank ends: gather and take the max per step
    all_times = [None] * world
    dist.all_gather_object(all_times, times)
    result = {"rank": rank, "schedule": name, "step_times_s": [max(ts) for ts in zip(*all_times)],
              "own_step_times_s": times, "peak_memory_bytes": max(peaks) if peaks else 0.0,
              "losses": losses}
    with open(os.path.join(cfg["run_dir"], f"rank{rank}.result.json"), "w") as fh:
        json.dump(result, fh)
    return result
