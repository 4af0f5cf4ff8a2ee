"""The per-layer analytic table of seed 003's notebook, finished: one row per op of a transformer
layer (and the embedding / LM head), with totals over the depth and a model-level summary."""
from __future__ import annotations

from pipesim.costs.layers import embedding_ops, head_ops
from pipesim.costs.ops import Op
from pipesim.costs.stage import comm_seconds, cost_model_for, costed_layer_ops, costed_mtp_ops, stage_costs
from pipesim.costs.summary import iteration_flops, layer_counts, total_params
from pipesim.costs.tp_overlap import userbuffers_bytes
from pipesim.scenario.config import Scenario

COLUMNS = ["block", "op", "kind", "flops_fwd", "flops_bwd", "saved_bytes", "weight_bytes", "weight_grad_bytes",
           "bytes_fwd", "bytes_bwd", "t_comp_fwd_s", "t_mem_fwd_s", "t_comp_bwd_s", "t_mem_bwd_s",
           "intensity_flop_per_byte", "bound", "t_fwd_s", "t_bwd_s", "source", "comm_fwd", "comm_bwd",
           "comm_bytes_fwd", "comm_bytes_bwd", "t_comm_fwd_s", "t_comm_bwd_s", "frac_comm_fwd", "frac_comm_bwd"]
TOTALS = ["flops_fwd", "flops_bwd", "saved_bytes", "weight_bytes", "weight_grad_bytes", "t_fwd_s", "t_bwd_s",
          "t_comm_fwd_s", "t_comm_bwd_s"]


def _comm_label(comms) -> str:
    return "+".join(f"{c.kind}({c.group}:{c.size})" + (f"x{c.count}" if c.count > 1 else "") for c in comms)


def op_row(s: Scenario, cm, op: Op, block: str) -> dict:
    e = s.bytes_per_element
    f, b = cm.time(op, "fwd"), cm.time(op, "bwd")
    tcf, tcb = comm_seconds(s, op.comm_fwd), comm_seconds(s, op.comm_bwd)
    tf, tb = f.seconds + tcf, b.seconds + tcb
    return {
        "block": block, "op": op.name, "kind": op.kind,
        "flops_fwd": op.flops_fwd, "flops_bwd": op.flops_bwd,
        "saved_bytes": op.saved_bytes, "weight_bytes": op.params * e,
        "weight_grad_bytes": 0.0 if op.frozen else op.params * e,
        "bytes_fwd": op.bytes_fwd, "bytes_bwd": op.bytes_bwd,
        "t_comp_fwd_s": f.compute, "t_mem_fwd_s": f.memory, "t_comp_bwd_s": b.compute, "t_mem_bwd_s": b.memory,
        "intensity_flop_per_byte": op.flops_fwd / op.bytes_fwd if op.bytes_fwd else 0.0,
        "bound": f.bound, "t_fwd_s": tf, "t_bwd_s": tb, "source": f.source,
        "comm_fwd": _comm_label(op.comm_fwd), "comm_bwd": _comm_label(op.comm_bwd),
        "comm_bytes_fwd": sum(c.total_bytes for c in op.comm_fwd),
        "comm_bytes_bwd": sum(c.total_bytes for c in op.comm_bwd),
        "t_comm_fwd_s": tcf, "t_comm_bwd_s": tcb,
        "frac_comm_fwd": tcf / tf if tf else 0.0, "frac_comm_bwd": tcb / tb if tb else 0.0,
    }


def _comm_row(block: str, op: str, labels: tuple, sent: tuple, seconds: tuple) -> dict:
    """A row for communication a layer does as a whole: (forward, backward) labels, bytes sent and
    blocking seconds."""
    row = {k: 0.0 for k in COLUMNS}
    row.update(block=block, op=op, kind="comm", bound="comm", source="alpha-beta",
               comm_fwd=labels[0], comm_bwd=labels[1], comm_bytes_fwd=sent[0], comm_bytes_bwd=sent[1],
               t_comm_fwd_s=seconds[0], t_comm_bwd_s=seconds[1], t_fwd_s=seconds[0], t_bwd_s=seconds[1],
               frac_comm_fwd=1.0 if seconds[0] else 0.0, frac_comm_bwd=1.0 if seconds[1] else 0.0)
    return row


def a2a_row(s: Scenario, block: str) -> dict:
    """The MoE layer's dispatch and combine all-to-alls as a row of their own: their cost is the
    layer's (costs/moe.py a2a_costs), not any one op's. Blocking time as the stage costs count it;
    with the A2A overlap the simulator hides part of it under the paired micro-batch."""
    from pipesim.costs.layers import shapes_of
    from pipesim.costs.moe import a2a_costs
    a = a2a_costs(s, shapes_of(s))
    label = f"all_to_all(ep:{s.parallel.expert})x2"
    return _comm_row(block, "ep_all_to_all", (label, label), (a.bytes_fwd, a.bytes_bwd), (a.fwd, a.bwd))


def cp_row(s: Scenario, cm, ops: list[Op], block: str) -> dict | None:
    """A layer's context-parallel K/V exchange as a row (costs/context.py context_comm): the part
    the attention blocks do not hide is its time; the label says how much hides."""
    from pipesim.costs.context import context_comm
    c = context_comm(s, cm, ops)
    if not (c.bytes_fwd or c.bytes_bwd):
        return None
    mode = f"{s.parallel.context_mode}(cp:{s.parallel.context})"
    labels = (f"{mode}, hidden {c.fwd_hidden * 1e3:.3g} ms", f"{mode}, hidden {c.bwd_hidden * 1e3:.3g} ms")
    return _comm_row(block, "cp_kv_exchange", labels, (c.bytes_fwd, c.bytes_bwd), (c.fwd_exposed, c.bwd_exposed))


def estimate(s: Scenario) -> dict:
    """Rows per op, per-layer and depth totals, and the model summary (all SI units)."""
    cm = cost_model_for(s)
    # MoE models: the table shows an MoE layer; the depth totals add dense and MoE layers
    # a hybrid model's table has every layer kind, its block named after the kind (mamba, ...)
    hybrid = bool(s.model.hybrid_layer_pattern)
    block = lambda kind: ("moe" if kind is True else kind) if hybrid else "layer"
    kinds = {}
    for moe, _ in layer_counts(s):
        ops = costed_layer_ops(s, moe)
        kinds[moe] = [op_row(s, cm, op, block(moe)) for op in ops]
        if s.parallel.context > 1:
            cp = cp_row(s, cm, ops, block(moe))
            kinds[moe] += [cp] if cp else []
    if True in kinds and s.parallel.expert > 1:
        kinds[True].append(a2a_row(s, block(True)))
    layer = kinds.get(True, kinds.get(False)) or next(iter(kinds.values()))   # an MoE layer if there is one
    extras = ([op_row(s, cm, op, "embedding") for op in embedding_ops(s)]
              + [op_row(s, cm, op, "head") for op in head_ops(s)]
              + [op_row(s, cm, op, "mtp") for op in (costed_mtp_ops(s) if s.model.mtp_layers else [])])
    depth = s.model.num_layers + s.model.mtp_layers      # MTP blocks counted with the stack
    stack = {k: sum(n * sum(r[k] for r in kinds[moe]) for moe, n in layer_counts(s)) for k in TOTALS}
    # per layer: the table's layer, or a hybrid model's mean layer
    per_layer = {k: stack[k] / depth for k in TOTALS} if hybrid else {k: sum(r[k] for r in layer) for k in TOTALS}
    if hybrid:
        layer = [dict(r, op=f"{r['block']}.{r['op']}") for rows in kinds.values() for r in rows]
    stages = stage_costs(s)
    memory = {
        "weights_bytes": max(st.static.weights for st in stages),
        "grads_bytes": max(st.static.gradients for st in stages),
        "optimizer_bytes": max(st.static.optimizer for st in stages),
        "activations_per_microbatch_bytes": max(st.activation_bytes for st in stages),
        # what a pass holds beyond them at its peak (the loss's logit copies, FSDP2's root unit)
        "workspace_bytes": max(max(st.workspace.forward(), st.workspace.backward(0.0)) for st in stages),
        "userbuffers_bytes": userbuffers_bytes(s),
    }
    summary = {
        "params": total_params(s),
        "reference_params": s.model.reference_params,
        "params_per_gpu_max": max(st.params for st in stages),
        "iteration_flops": iteration_flops(s),
        "num_gpus": s.num_gpus,
        "microbatches": s.num_microbatches,
        "recompute": s.training.recompute,
        "memory_per_gpu": memory,
        "frac_comm_fwd": per_layer["t_comm_fwd_s"] / per_layer["t_fwd_s"] if per_layer["t_fwd_s"] else 0.0,
        "frac_comm_bwd": per_layer["t_comm_bwd_s"] / per_layer["t_bwd_s"] if per_layer["t_bwd_s"] else 0.0,
    }
    return {"rows": layer + extras, "per_layer": per_layer, "layers_total": stack, "depth": depth,
            "summary": summary}
