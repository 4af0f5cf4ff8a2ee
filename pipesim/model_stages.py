"""Stage costs of any model family: transformers from the op-level cost model (pipesim.costs),
CNN presets from their layer graphs (pipesim.partition.cnn_stages). The dispatch lives here, above
both, so the cost model does not depend on the partitioner."""
from __future__ import annotations


def stage_costs_for(s, profile=None) -> list:
    if s.model.arch == "cnn":
        from pipesim.partition.cnn_stages import cnn_stage_costs_for
        return cnn_stage_costs_for(s)
    from pipesim.costs.stage import stage_costs
    return stage_costs(s, profile)
