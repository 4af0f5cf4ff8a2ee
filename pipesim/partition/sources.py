"""Turn a partition SOURCE into a graph and the cluster it runs on.

SOURCE is a scenario YAML (its transformer), a CNN preset name (cnn.PRESETS), or
`module:package.module:factory` (a torch.nn.Module traced with torch.fx; the factory returns the
module and an example input, or a module with an `example_input` attribute).
"""
from __future__ import annotations

from dataclasses import dataclass

from pipesim.costs.memory import static_bytes_per_param, static_memory
from pipesim.errors import PipesimError
from pipesim.partition.cluster import Cluster, cluster_from_system, load_system
from pipesim.partition.graph import Graph

DEFAULT_SYSTEM = "gtx-1070"      # the seeds' box, for sources without a scenario


@dataclass(frozen=True)
class Source:
    graph: Graph
    cluster: Cluster
    static_bytes_per_param: float
    scenario: object = None          # the scenario the graph was built from
    raw: dict | None = None          # the scenario file's mapping (with --set overrides), for --scenario-out


def load_source(source: str, *, system: str | None = None, batch: int | None = None, input_name: str = "imagenet",
                classes: int | None = None, precision: str | None = None, granularity: str = "layer",
                overrides=(), measure_nodes: bool = False, cnn_options: dict | None = None,
                profile: str | None = None, nodes: int | None = None,
                gpu_speed: dict[int, float] | None = None) -> Source:
    from pipesim.partition.cnn import PRESETS, cnn_graph
    node_override = {}
    if nodes:
        node_override["num_nodes"] = nodes
    if gpu_speed:
        node_override["heterogeneity"] = {"rank_speed": dict(gpu_speed)}
    prof = None
    if profile and not source.endswith((".yaml", ".yml")):
        from pipesim.costs.profile import load_profile
        prof = load_profile(profile)
    if source.startswith("module:"):
        from pipesim.partition.fx_graph import load_factory, module_graph
        sysc = load_system(system or DEFAULT_SYSTEM, node_override)
        module, example = load_factory(source[len("module:"):])
        prec = precision or "fp32"
        g = module_graph(module, example, gpu=sysc.gpu, precision=prec, measure=measure_nodes, name=source,
                         profile=prof)
        return Source(g, cluster_from_system(sysc), _static(prec))
    if source in PRESETS:
        sysc = load_system(system or DEFAULT_SYSTEM, node_override)
        prec = precision or "fp32"
        g = cnn_graph(source, sysc.gpu, batch or 1, prec, input_name, classes, profile=prof, **(cnn_options or {}))
        return Source(g, cluster_from_system(sysc), _static(prec))
    if source.endswith((".yaml", ".yml")):
        from pipesim.partition.transformer import transformer_graph
        extra = list(overrides)
        if system:
            extra.append(f"system.preset={system}")
        if batch:
            extra.append(f"training.micro_batch_size={batch}")
        if nodes:
            extra.append(f"system.num_nodes={nodes}")
        if gpu_speed:
            extra.append("system.heterogeneity.rank_speed={" + ", ".join(f"{k}: {v}" for k, v in gpu_speed.items()) + "}")
        if precision:
            extra.append(f"training.precision={precision}")
        if profile:
            from pathlib import Path
            extra.append(f"costs.profile={Path(profile).resolve()}")
        s, raw = load_for_partition(source, extra)
        g = transformer_graph(s, granularity)
        return Source(g, cluster_from_system(s.system, slot_width=s.parallel.tensor), static_bytes_per_param(s),
                      s, raw)
    raise PipesimError(f"{source}: expected a scenario .yaml, a CNN preset ({', '.join(PRESETS)}) or "
                       f"module:package.module:factory")


def load_for_partition(path: str, overrides) -> tuple:
    """(Scenario, raw mapping). The scenario's own pipeline layout does not constrain a new split:
    when the file does not load as it is (say its layers do not divide its pipeline), it is loaded
    as one stage with data parallelism over the remaining GPUs, and the first error is reported if
    even that fails."""
    from pathlib import Path

    from pipesim.errors import ScenarioError
    from pipesim.presets.systems import SYSTEMS
    from pipesim.scenario.system_config import SystemConfig
    from pipesim.scenario.load import apply_override, build_scenario, read_yaml, resolve_preset
    from pipesim.scenario.schema import Loader
    file = Path(path)
    raw = read_yaml(file)
    for text in overrides:
        raw = apply_override(raw, text)
    try:
        return build_scenario(raw, str(file), file.parent), raw
    except ScenarioError as first:
        try:
            loader = Loader(str(file))
            system = loader.build(SystemConfig, resolve_preset(raw.get("system", {}), SYSTEMS, "system", loader),
                                  "system")
            tensor = (raw.get("parallel") or {}).get("tensor", 1)
            micro = (raw.get("training") or {}).get("micro_batch_size", 1)
            if not (isinstance(tensor, int) and isinstance(micro, int)) or tensor < 1:
                raise first          # the relaxed layout needs them valid: the file's own error says why
            relaxed = raw
            for text in ("parallel.pipeline=1", "parallel.virtual_stages=1", "parallel.layers_per_stage=null",
                         "parallel.data=null", f"training.global_batch_size={micro * max(1, system.num_gpus // tensor)}"):
                relaxed = apply_override(relaxed, text)
            return build_scenario(relaxed, str(file), file.parent), raw
        except (ScenarioError, TypeError, AttributeError):
            raise first from None


def _static(precision: str) -> float:
    # Adam (weights, gradients, two moments, fp32 master when mixed): costs/memory.py.
    return static_memory(1.0, precision, "adam", 0, 1).total
