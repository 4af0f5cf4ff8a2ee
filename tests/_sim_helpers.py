"""Tiny scenarios with hand-set stage costs for the simulator tests."""
from __future__ import annotations

from dataclasses import replace

from pipesim import load_scenario
from pipesim.costs import stage_costs
from pipesim.costs.memory import StaticMemory
from pipesim.costs.workspace import Workspace


def tiny(P=2, M=1, V=1, schedule="1f1b", data=1, tensor=1, nodes=1, gpus_per_node=None, bw_GBps=1.0,
         latency_us=0.0, inter_GBps=None, memory_GiB=80, extra_training=None, extra_parallel=None,
         heterogeneity=None, extra_system=None, extra_model=None):
    """A small transformer on a made-up system whose links run at exactly `bw_GBps` (efficiency 1)."""
    gpn = gpus_per_node or (P * data * tensor) // nodes
    system = {
        "num_nodes": nodes, "gpus_per_node": gpn,
        "gpu": {"peak_tflops_fp16": 100, "peak_tflops_fp32": 10, "hbm_bandwidth_GBps": 1000,
                "memory_GiB": memory_GiB},
        "intra_node": {"bandwidth_GBps": bw_GBps, "latency_us": latency_us, "efficiency": 1.0},
        "inter_node": {"bandwidth_GBps": inter_GBps or bw_GBps, "latency_us": latency_us, "efficiency": 1.0},
    }
    if heterogeneity:
        system["heterogeneity"] = heterogeneity
    system.update(extra_system or {})
    training = {"micro_batch_size": 1, "global_batch_size": M * data, "schedule": schedule,
                "precision": "bf16"}
    training.update(extra_training or {})
    parallel = {"tensor": tensor, "pipeline": P, "data": data, "virtual_stages": V}
    parallel.update(extra_parallel or {})
    model = {"num_layers": 2 * P * V, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32,
             "vocab_size": 128}
    return load_scenario({
        "model": {**model, **(extra_model or {})},
        "system": system, "parallel": parallel, "training": training})


def uniform(s, f=1.0, b=2.0, i=None, w=None, send=0.0, grad_send=None, act=1.0, grad_bytes=0.0, opt=0.0,
            q=0.0, dq=0.0, static=(0.0, 0.0, 0.0), recompute=0.0, rc_working=0.0, params=None):
    """Every stage costs the same: F = f, B = b = I + W (I = i, W = w; default b/2 each), no TP."""
    i = b / 2 if i is None else i
    w = b - i if w is None else w
    out = []
    cs = stage_costs(s)
    for c in cs:
        first, last = c.stage == 0, c.stage == len(cs) - 1
        out.append(replace(
            c, forward=f, backward=b, input_grad=i, weight_grad=w, recompute=recompute, tp_comm_fwd=0.0,
            tp_comm_bwd=0.0, send_bytes=0.0 if last else send,
            grad_send_bytes=0.0 if first else (send if grad_send is None else grad_send),
            quantize=0.0 if last else q, dequantize=0.0 if first else dq, recv_gather=0.0,
            offload_bytes=0.0, offload_window=0.0, offload_fwd=0.0, offload_bwd=0.0,
            static=StaticMemory(*static),
            grad_bytes=grad_bytes, activation_bytes=act, recompute_working_bytes=rc_working, workspace=Workspace(),
            optimizer_step=opt, step_ops=(("OPTIMIZER", opt),) if opt else (),
            params=c.params if params is None else params))
    return out


def log(report, rank=None, streams=("compute", "send", "recv", "dp")):
    """Events as (rank, kind, stage, micro-batch, start, end) sorted by rank then start."""
    ev = [e for e in report.events if e.stream in streams and (rank is None or e.rank == rank)]
    return sorted((e.rank, e.kind, e.stage, e.microbatch, round(e.start, 9), round(e.end, 9)) for e in ev)
