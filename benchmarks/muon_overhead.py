"""What Muon costs over Adam, simulated: step time, the Newton-Schulz and tensor-group gather
seconds of the slowest rank, and the optimizer memory, for a dense and an MoE layout.

    .venv/bin/python benchmarks/muon_overhead.py

Rows: Adam (distributed optimizer); Muon without a distributed optimizer (every data-parallel
rank orthogonalises all its matrices); Muon with Megatron-Core's layer-wise distribution
(`dist_muon`, zero_stage 1) in the default duplicated tensor mode and in blockwise mode.
"""
from __future__ import annotations

import copy

import pipesim

LLAMA70 = {"model": {"preset": "llama3-70b", "dropout": False},
           "system": {"preset": "dgx-h100", "num_nodes": 8},
           "parallel": {"tensor": 4, "pipeline": 4, "data": 4, "sequence_parallel": True, "virtual_stages": 5},
           "training": {"micro_batch_size": 1, "global_batch_size": 128, "schedule": "interleaved",
                        "attention": "flash", "zero_stage": 1, "overlap_grad_reduce": True,
                        "overlap_param_gather": True, "grad_reduce_in_fp32": True}}
QWEN30 = {"model": "qwen3-30b-a3b",
          "system": {"preset": "dgx-h100", "num_nodes": 4},
          "parallel": {"pipeline": 2, "data": 16, "expert": 8},
          "training": {"micro_batch_size": 2, "global_batch_size": 512, "attention": "flash", "zero_stage": 1,
                       "recompute": "selective", "moe_dispatcher": "alltoall"}}
ROWS = (("adam, ZeRO-1", {"optimizer": "adam"}),
        ("muon, no distributed optimizer", {"optimizer": "muon", "zero_stage": 0}),
        ("muon, layer-wise, duplicated", {"optimizer": "muon"}),
        ("muon, layer-wise, blockwise", {"optimizer": "muon", "muon_tp_mode": "blockwise"}))


def row(base: dict, training: dict) -> tuple[float, float, float, float]:
    sc = copy.deepcopy(base)
    sc["training"].update(training)
    r = pipesim.simulate(sc, trace=False).to_dict()
    p = sc["parallel"]["pipeline"]
    ops: dict = {}
    for c in r["stage_costs"][::p]:                       # rank 0's chunks
        for name, sec in c["step_ops"].items():
            ops[name] = ops.get(name, 0.0) + sec
    opt_gib = sum(c["optimizer_bytes"] for c in r["stage_costs"][::p]) / 2 ** 30
    return r["step_time_s"], ops.get("NEWTON_SCHULZ", 0.0), ops.get("MUON_TP_AG", 0.0), opt_gib


def main() -> None:
    for name, base in (("Llama 3 70B, 64 H100, tp4 pp4 vp5 dp4, 1M tokens/step", LLAMA70),
                       ("Qwen3-30B-A3B, 32 H100, pp2 dp16 ep8, 2M tokens/step", QWEN30)):
        print(name)
        print(f"  {'optimizer':34s} {'step s':>8s} {'vs adam':>8s} {'NS s':>7s} {'TP AG s':>8s} {'opt GiB':>8s}")
        adam = None
        for label, training in ROWS:
            step, ns, ag, opt = row(base, training)
            adam = adam or step
            print(f"  {label:34s} {step:8.3f} {step / adam:8.3f} {ns:7.3f} {ag:8.3f} {opt:8.2f}")
        print()


if __name__ == "__main__":
    main()
