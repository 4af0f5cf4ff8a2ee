"""Stage costs of any model family: transformers from the op-level cost model (pipesim.costs),
CNN presets from their layer graphs (pipesim.partition.cnn_stages). The dispatch lives here, above
both, so the cost model does not depend on the partitioner."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace


def stage_costs_for(s, profile=None) -> list:
    if s.model.arch == "cnn":
        from pipesim.partition.cnn_stages import cnn_stage_costs_for
        return cnn_stage_costs_for(s)
    from pipesim.costs.stage import stage_costs
    if profile is not None or s.costs.profile is not None:
        return stage_costs(s, profile)      # a profile file can change under the same path: not cached
    # The transformer cost model reads every scenario field but the schedule name (a plan is timed
    # by the simulator, not costed here), so the layouts of a sweep or search that differ only in
    # their schedule share one computation: keyed by the rest of the scenario, in full.
    key = repr((s.model, s.system, s.parallel, replace(s.training, schedule=""), s.costs))
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = stage_costs(s)
        if len(_CACHE) > 512:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return list(hit)


_CACHE: OrderedDict = OrderedDict()


def clear_cache() -> None:
    """Forget cached stage costs (benchmarks that time a cold evaluation)."""
    _CACHE.clear()
