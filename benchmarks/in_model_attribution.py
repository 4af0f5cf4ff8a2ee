"""Where a stage's CPU time goes: the ops of one emulator stage timed alone (the isolated
calibration, L2 flushed) and timed inside the stage's own forward and backward
(pipesim/calibrate/in_context.py), key by key, the stage's F and B predicted from each profile
against the stage's measured F and B, and the aten calls no profile key covers (left to the
host model). One process pinned to core 0, one thread, thread CPU time; the isolated ops, the
in-model trace and the plain F/B timings are taken back to back, so compare within one run.

    python benchmarks/in_model_attribution.py scenarios/emulator/shape_a_1f1b.yaml [--stage 0]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict


def plain_times(model, shape, vocab, counter, n: int = 6) -> tuple[float, float]:
    """Median thread CPU seconds of the stage's forward and backward, one micro-batch each."""
    import torch
    fwd, bwd = [], []
    with counter.hooks():
        for _ in range(n):
            tokens = torch.randint(0, vocab, (shape[1], shape[0] + 1))
            x = tokens[:, :-1] if model.first else torch.randn(shape, requires_grad=True)
            t0 = time.thread_time()
            y = model(x, tokens[:, 1:]) if model.last else model(x)
            fwd.append(time.thread_time() - t0)
            g = None if model.last else torch.randn_like(y)
            t0 = time.thread_time()
            torch.autograd.backward(y, g)
            bwd.append(time.thread_time() - t0)
    return statistics.median(fwd), statistics.median(bwd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--stage", type=int, default=0)
    args = ap.parse_args()
    import torch
    import torch.fx.experimental.symbolic_shapes  # noqa: F401 - first backward imports sympy
    from pipesim.calibrate.host import host_model, measure_dispatch, with_host_model
    from pipesim.calibrate.in_context import MAPPED, PATTERNS, in_context, trace_stages
    from pipesim.calibrate.run import device_info, measure_ops, plan
    from pipesim.costs.stage import stage_costs
    from pipesim.emulator import prepare
    from pipesim.emulator.host import layout, pin_to_core
    from pipesim.emulator.layers import TPGroup, WeightGradStore
    from pipesim.emulator.memory import MemoryCounter
    from pipesim.emulator.model import build_stages
    from pipesim.emulator.optim import attach_grad_buffer, unique_params

    pin_to_core(0)
    torch.set_num_threads(1)
    s = prepare(args.scenario)
    k = args.stage
    counter = MemoryCounter()
    stages, _ = build_stages(s, [k], TPGroup(), WeightGradStore(counter), 0, torch.float32, False)
    for m in stages.values():
        attach_grad_buffer(unique_params([m]))
    model = stages[k]
    shape = (s.model.seq_length, s.training.micro_batch_size, s.model.hidden_size)
    plain_times(model, shape, s.model.vocab_size, counter, 2)           # warm-up
    before = plain_times(model, shape, s.model.vocab_size, counter)
    items, notes = plan("cpu", s)
    isolated = [m.to_dict() for m in measure_ops(items, "cpu", quick=False, notes=notes, budget_s=0.1)]
    records = trace_stages({k: model}, shape, s.model.vocab_size, counter)
    in_model, _ = in_context(isolated, items, records)
    after = plain_times(model, shape, s.model.vocab_size, counter)
    dispatch = measure_dispatch(s)
    fwd, bwd = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
    print(f"{s.source} stage {k}: measured F {fwd * 1e3:.2f} ms, B {bwd * 1e3:.2f} ms per micro-batch")
    tmp = tempfile.mkdtemp(prefix="pipesim-attr-")
    for label, meas in (("isolated", isolated), ("in-model", in_model)):
        info = device_info("cpu", 1)
        info["host"] = host_model(s, dispatch, 0.0, [], layout(1, 1))
        path = os.path.join(tmp, f"{label}.json")
        with open(path, "w") as fh:
            json.dump({"version": 1, "device": info, "created": info["date"], "measurements": meas}, fh)
        c = stage_costs(with_host_model(prepare(s, [f"costs.profile={path}"])))[k]
        print(f"  predicted from {label:8s} ops: F {c.forward * 1e3:.2f} ms ({(c.forward / fwd - 1) * 100:+.1f} %), "
              f"B {c.backward * 1e3:.2f} ms ({(c.backward / bwd - 1) * 100:+.1f} %)")
    print("\nkey                                                    isolated us  in-model us   ratio")
    for m in in_model:
        if "isolated_s" in m:
            label = m["op"] + " " + " ".join(f"{a}={b}" for a, b in m["shape"].items() if a != "dtype")
            print(f"  {label:52s} {m['isolated_s'] * 1e6:10.1f} {m['median_s'] * 1e6:11.1f} {m['median_s'] / m['isolated_s']:7.2f}")
    rest: dict = defaultdict(float)
    for name, shapes, phase, sec, _ in records:
        if name not in MAPPED:
            rest[(phase, name)] += sec
    calls = 3 * PATTERNS    # forwards (and backwards) per trace: patterns of F F B F B B
    print("\naten calls of kinds no key covers (timer overhead included), us per micro-batch:")
    for (phase, name), sec in sorted(rest.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {phase} {name:32s} {sec / calls * 1e6:8.1f}")


if __name__ == "__main__":
    main()
