"""A scenario's transformer as a partition graph: token ids -> embedding -> layers -> head.

Node costs come from the cost model the simulator uses (pipesim.costs.layers ops timed by
CostModel: roofline or a calibrated profile), so a partition and a simulation agree. Granularity
"layer" (one node per transformer layer; the result feeds `parallel.layers_per_stage`) or "block"
(attention and MLP halves of each layer as separate nodes, split after the first residual add).
The tensor between nodes is each GPU's slice of the hidden states, compressed as the scenario says
(the bytes stage_costs sends between stages).
"""
from __future__ import annotations

from pipesim.costs.layers import embedding_ops, head_ops, layer_ops, shapes_of
from pipesim.costs.stage import comm_seconds, cost_model_for, layer_recompute
from pipesim.errors import PipesimError
from pipesim.partition.graph import Graph, Node
from pipesim.scenario.config import Scenario

TOKEN_ID_BYTES = 8      # int64 token ids (what a data loader hands the first stage)
LOSS_BYTES = 4          # the head ends in the scalar fp32 loss


def _times(s: Scenario, cm, ops) -> tuple[float, float]:
    fwd = sum(cm.time(o, "fwd").seconds for o in ops) + comm_seconds(s, [c for o in ops for c in o.comm_fwd])
    bwd = sum(cm.time(o, "bwd").seconds for o in ops) + comm_seconds(s, [c for o in ops for c in o.comm_bwd])
    return fwd, bwd


def _wgrad(cm, ops) -> float:
    return sum(cm.time(o, "bwd").seconds * cm.wgrad_share(o) for o in ops)


def _flops(ops) -> float:
    return sum(o.flops_fwd + o.flops_bwd for o in ops)


def transformer_graph(s: Scenario, granularity: str = "layer", profile=None) -> Graph:
    if granularity not in ("layer", "block"):
        raise PipesimError(f"--granularity {granularity}: expected layer or block for a transformer")
    if s.model.hybrid_layer_pattern:
        raise PipesimError(f"{s.source}: model.hybrid_layer_pattern: the partitioner builds identical transformer "
                           "layers; give parallel.layers_per_stage for a hybrid model")
    if s.training.recompute_num_layers is not None:
        # which layers recompute depends on the chunk boundaries the partitioner is choosing
        raise PipesimError(f"{s.source}: training.recompute_num_layers: the partitioner costs every layer "
                           "under one recompute policy; drop the key (or use recompute none/full) to partition")
    cm = cost_model_for(s, profile)
    sh = shapes_of(s)
    m = s.model
    hidden_bytes = sh.tokens * sh.h / sh.tp.size * sh.e * s.training.activation_compression_bits / 16
    spec = dict(hidden=m.hidden_size, heads=m.num_attention_heads, ffn=m.ffn, seq=m.seq_length,
                vocab=m.vocab_size, batch=s.training.micro_batch_size, causal=m.causal)
    nodes = [Node("tokens", "input", out_bytes=sh.tokens * TOKEN_ID_BYTES, grad=False,
                  spec=("tokens", spec))]
    emb = embedding_ops(s)
    f, b = _times(s, cm, emb)
    nodes.append(Node("embedding", "embedding", ("tokens",), fwd=f, bwd=b, wgrad=_wgrad(cm, emb), flops=_flops(emb),
                      params=sum(o.params for o in emb), out_bytes=hidden_bytes,
                      saved_bytes=sum(o.saved_bytes for o in emb), spec=("embedding", spec)))
    layer = layer_ops(s)
    rc_time, rc_saved, _ = layer_recompute(s, cm, layer)
    if granularity == "layer":
        f, b = _times(s, cm, layer)
        parts = [("layer", layer, f, b + rc_time, rc_saved)]
    else:
        cut = next(i for i, o in enumerate(layer) if o.name == "residual1") + 1
        parts = []
        full_f, _ = _times(s, cm, layer)
        for label, ops in (("attn", layer[:cut]), ("mlp", layer[cut:])):
            f, b = _times(s, cm, ops)
            saved = sum(o.saved_bytes for o in ops)
            share = f / full_f if full_f else 0.5
            if s.training.recompute != "none":
                # Split the layer's recompute time and kept bytes in proportion to forward time.
                b, saved = b + share * rc_time, share * rc_saved
            parts.append((label, ops, f, b, saved))
    prev = "embedding"
    for i in range(m.num_layers):
        for label, ops, f, b, saved in parts:
            name = f"layer{i}" if label == "layer" else f"layer{i}.{label}"
            nodes.append(Node(name, label, (prev,), fwd=f, bwd=b, wgrad=_wgrad(cm, ops), flops=_flops(ops),
                              params=sum(o.params for o in ops), out_bytes=hidden_bytes, saved_bytes=saved,
                              spec=(label, spec)))
            prev = name
    head = head_ops(s)
    f, b = _times(s, cm, head)
    head_params = sum(o.params for o in head)
    if m.tied_embeddings and s.parallel.pipeline == 1:
        # layers.head_ops drops the shared weight only when the whole model is one stage; a
        # partitioned model keeps a copy of the tied weight on the last stage (Megatron).
        head_params += sh.v * sh.h / sh.tp.weight_div
    nodes.append(Node("head", "head", (prev,), fwd=f, bwd=b, wgrad=_wgrad(cm, head), flops=_flops(head),
                      params=head_params,
                      out_bytes=LOSS_BYTES, saved_bytes=sum(o.saved_bytes for o in head), spec=("head", spec)))
    meta = dict(kind="transformer", granularity=granularity, precision=s.training.precision,
                batch=s.training.micro_batch_size, model=m.name, scenario=s.source,
                tensor=s.parallel.tensor,
                costs=f"cost model on {s.system.gpu.name}" + (f" with profile {s.costs.profile}" if s.costs.profile
                                                               or profile is not None else " (roofline)"))
    return Graph(m.name, tuple(nodes), outputs=("head",), meta=meta)


def layers_per_stage(g: Graph, bounds) -> tuple[int, ...]:
    """Transformer layers in each stage (embedding and head are not layers), for
    `parallel.layers_per_stage`. A block-granularity split must fall on layer boundaries."""
    out = []
    for k in range(len(bounds) - 1):
        names = [n.name for n in g.nodes[bounds[k]:bounds[k + 1]]]
        if g.meta.get("granularity") == "block":
            halves = [x for x in names if "." in x]
            if halves and (halves[0].endswith(".mlp") or halves[-1].endswith(".attn")):
                return ()
            out.append(len(halves) // 2)
        else:
            out.append(sum(1 for x in names if x.startswith("layer")))
    return tuple(out)
