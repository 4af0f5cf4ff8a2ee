"""CNN presets as pipeline stages for the simulator: `cnn_stage_costs` returns the same
StageCosts records that pipesim.costs.stage_costs gives for transformers, so a CNN can be
simulated under data parallelism (pipeline=1) or pipelining (the seed 004 what-ifs).

Stage split: `nodes_per_stage` when given (from a previous `pipesim partition`), else the optimal
split of partition.solve on the system. Per stage: forward/backward from the roofline graph, the
activation sent forward (compressed to `activation_compression_bits`, with quantize/dequantize
time on sender/receiver, as costs/stage.py does), parameters and static memory (costs/memory.py),
saved activations under the recompute policy ("full": keep the stage input, re-run the forward).
"""
from __future__ import annotations

from pipesim.costs.memory import static_memory
from pipesim.costs.roofline import CostModel
from pipesim.costs.stage import ADAM_BYTES_PER_PARAM, StageCosts
from pipesim.errors import ScenarioError
from pipesim.partition.cluster import cluster_from_system
from pipesim.partition.cnn import cnn_graph
from pipesim.partition.solve import Prefix, partition
from pipesim.partition.stages import Options
from pipesim.scenario.config import BYTES_PER_ELEMENT
from pipesim.scenario.system_config import SystemConfig


def cnn_stage_costs(preset: str, *, system: SystemConfig, micro_batch_size: int, pipeline: int = 1,
                    data: int = 1, precision: str = "fp32", input_name: str = "imagenet",
                    num_classes: int | None = None, recompute: str = "none", optimizer: str = "adam",
                    zero_stage: int = 0, activation_compression_bits: int = 16,
                    nodes_per_stage=None, profile=None, cnn_options: dict | None = None) -> list[StageCosts]:
    if recompute not in ("none", "full"):
        raise ScenarioError(f"training.recompute: {recompute!r} is not available for CNNs (none or full)")
    g = cnn_graph(preset, system.gpu, micro_batch_size, precision, input_name, num_classes, profile=profile,
                  **(cnn_options or {}))
    n = len(g)
    if nodes_per_stage:
        if len(nodes_per_stage) != pipeline or sum(nodes_per_stage) != n - 1 or min(nodes_per_stage) < 1:
            raise ScenarioError(f"parallel.layers_per_stage: {list(nodes_per_stage)} must give {pipeline} "
                                f"positive counts summing to the {n - 1} nodes of {preset}")
        bounds, acc = [0], 1                     # the input node rides with stage 0
        for c in nodes_per_stage:
            acc += c
            bounds.append(acc)
    else:
        opts = Options(recompute=recompute == "full")
        bounds = list(partition(g, pipeline, cluster_from_system(system), opts).bounds)
    pre = Prefix(g, recompute=False)
    cm = CostModel(system.gpu, precision, profile)
    elem = BYTES_PER_ELEMENT[precision]
    full = recompute == "full"
    out = []
    for k in range(pipeline):
        i, j = bounds[k], bounds[k + 1]
        nodes = g.nodes[i:j]
        first, last = k == 0, k == pipeline - 1
        fwd = sum(x.fwd for x in nodes)
        bwd = sum(x.bwd for x in nodes)
        wgrad = sum(x.wgrad for x in nodes)
        rc = fwd if full else 0.0
        params = sum(x.params for x in nodes)
        saved = sum(x.saved_bytes for x in nodes)
        raw_send = 0.0 if last else float(pre.X[j])
        send = raw_send * activation_compression_bits / 16
        bits = activation_compression_bits
        q = cm.quantize_time(raw_send / elem, bits, "quantize")[0] if bits < 16 and not last else 0.0
        dq_in = 0.0 if first else float(pre.X[i])
        dq = cm.quantize_time(dq_in / elem, bits, "dequantize")[0] if bits < 16 and not first else 0.0
        local = params / (data if zero_stage >= 1 else 1)
        out.append(StageCosts(
            stage=k, layers=len([x for x in nodes if not x.is_input]), has_embedding=first, has_head=last,
            forward=fwd, backward=bwd + rc, input_grad=bwd - wgrad + rc, weight_grad=wgrad, recompute=rc,
            tp_comm_fwd=0.0, tp_comm_bwd=0.0, tp_bytes_fwd=0.0, tp_bytes_bwd=0.0,
            send_bytes=send, grad_send_bytes=0.0 if first else float(pre.G[i]),
            quantize=q, dequantize=dq, params=params,
            static=static_memory(params, precision, optimizer, zero_stage, data),
            grad_bytes=params * elem,
            activation_bytes=(float(pre.X[i]) if full else saved),
            recompute_working_bytes=saved if full else 0.0,
            optimizer_step=cm.memory_time(local * ADAM_BYTES_PER_PARAM),
            flops=sum(x.flops for x in nodes),
            sources={"roofline": fwd + bwd + rc}))
    return out


def cnn_stage_costs_for(scenario) -> list[StageCosts]:
    """Adapter for pipesim.costs.stage_costs once ModelConfig has `arch: cnn` (see the partition
    issue note): reads model.cnn / image_input / num_classes / cnn_options from the scenario."""
    m, tr, par = scenario.model, scenario.training, scenario.parallel
    if par.tensor != 1:
        raise ScenarioError(f"{scenario.source}: parallel.tensor: CNN presets are not tensor-parallel (got {par.tensor})")
    return cnn_stage_costs(
        getattr(m, "cnn", None) or m.name, system=scenario.system, micro_batch_size=tr.micro_batch_size,
        pipeline=par.pipeline, data=par.data, precision=tr.precision,
        input_name=getattr(m, "image_input", "imagenet"), num_classes=getattr(m, "num_classes", None),
        recompute=tr.recompute, optimizer=tr.optimizer, zero_stage=tr.zero_stage,
        activation_compression_bits=tr.activation_compression_bits,
        nodes_per_stage=par.layers_per_stage, cnn_options=dict(getattr(m, "cnn_options", None) or {}))
