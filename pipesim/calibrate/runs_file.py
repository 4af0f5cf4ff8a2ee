"""The measured-runs file of `pipesim fit`: steps a team timed on its own cluster.

    runs:
      - scenario: llama3-70b.yaml          # relative to this file
        set: {parallel.tensor: 4}          # optional --set overrides (a mapping or KEY=VALUE strings)
        name: tp4                          # optional
        step_time_s: 7.9                   # exactly one measured figure (MEASURES)

Every figure is turned into the step time it implies for its own scenario (tokens, samples and
model FLOPs per step are fixed by the scenario), so runs quoting different figures fit together.
`model_tflops_per_gpu` and `mfu` must be counted as pipesim counts them: model FLOPs without
recompute (docs/REPORT.md); `megatron_tflops_per_gpu` is the TFLOP/s per GPU Megatron-Core's
training log prints (its own FLOP count, costs/summary.py megatron_core_flops: the logger since
March 2025; older logs count causal attention twice).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pipesim.errors import PipesimError, ScenarioError

# measured figure -> the report key it is compared with; all but step_time_s are per-step work
# divided by the step time
MEASURES = {"step_time_s": "step_time_s", "tokens_per_s": "tokens_per_s",
            "tokens_per_s_per_gpu": "tokens_per_s", "samples_per_s": "throughput_samples_per_s",
            "model_tflops_per_gpu": "model_tflops_per_gpu", "mfu": "mfu",
            "megatron_tflops_per_gpu": None}
RUN_KEYS = ("name", "scenario", "set") + tuple(MEASURES)


@dataclass(frozen=True)
class MeasuredRun:
    name: str
    scenario: str             # path of the scenario file
    sets: tuple[str, ...]     # KEY=VALUE overrides
    metric: str               # a key of MEASURES
    value: float

    def implied_step(self, report: dict, scenario) -> float:
        """The step time the measured figure implies, from a report of the same scenario."""
        if self.metric == "step_time_s":
            return self.value
        if self.metric == "megatron_tflops_per_gpu":
            from pipesim.costs.summary import megatron_core_flops
            return megatron_core_flops(scenario) / (self.value * 1e12 * scenario.num_gpus)
        predicted = report[MEASURES[self.metric]]
        if self.metric == "tokens_per_s_per_gpu":
            predicted /= report["num_gpus"]
        return report["step_time_s"] * predicted / self.value


def read_runs(path: str) -> list[MeasuredRun]:
    """Parse and check RUNS.yaml; every scenario is loaded once here so a bad one is named early."""
    from pipesim.scenario.load import load_scenario
    from pipesim.scenario.safe_yaml import load_text
    p = Path(path)
    if not p.is_file():
        raise PipesimError(f"{path}: file not found")
    try:
        raw = load_text(p.read_text(), path)
    except (OSError, UnicodeDecodeError) as exc:
        raise PipesimError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or 'not a text file'})") from None
    if not isinstance(raw, dict):
        raise PipesimError(f"{path}: expected a mapping with the key 'runs' (a list of measured runs)")
    runs = raw.get("runs")
    if set(raw) - {"runs"}:
        raise PipesimError(f"{path}: unknown key {sorted(set(raw) - {'runs'})[0]!r}; expected only 'runs'")
    if not isinstance(runs, list) or not runs:
        raise PipesimError(f"{path}: runs: expected a non-empty list of measured runs")
    out, names = [], set()
    for i, entry in enumerate(runs):
        where = f"{path}: runs[{i}]"
        if not isinstance(entry, dict):
            raise PipesimError(f"{where}: expected a mapping with scenario and one of {', '.join(MEASURES)}")
        unknown = [k for k in entry if k not in RUN_KEYS]
        if unknown:
            raise PipesimError(f"{where}.{unknown[0]}: unknown key; expected {', '.join(RUN_KEYS)}")
        scenario = entry.get("scenario")
        if not isinstance(scenario, str) or not scenario:
            raise PipesimError(f"{where}.scenario: expected the path of a scenario file")
        scenario = str(p.parent / scenario) if not Path(scenario).is_absolute() else scenario
        sets = override_texts(entry.get("set"), f"{where}.set")
        given = [k for k in MEASURES if k in entry]
        if len(given) != 1:
            raise PipesimError(f"{where}: expected exactly one measured figure ({', '.join(MEASURES)}), "
                               f"got {', '.join(given) if given else 'none'}")
        metric = given[0]
        value = entry[metric]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise PipesimError(f"{where}.{metric}: expected a positive number, got {value!r}")
        if metric == "mfu" and value > 1:
            raise PipesimError(f"{where}.mfu: expected a fraction in (0, 1], got {value}")
        name = entry.get("name", f"{Path(scenario).stem}#{i}")
        if not isinstance(name, str) or not name:
            raise PipesimError(f"{where}.name: expected a text")
        if name in names:
            raise PipesimError(f"{where}.name: {name!r} names two runs")
        names.add(name)
        try:
            load_scenario(scenario, sets)
        except ScenarioError as exc:
            raise PipesimError(f"{where}: {exc}") from None
        out.append(MeasuredRun(name, scenario, sets, metric, float(value)))
    return out


def override_texts(value, where: str) -> tuple[str, ...]:
    """`set:` as a mapping {key.path: value} or a list of KEY=VALUE texts -> KEY=VALUE texts."""
    if value is None:
        return ()
    if isinstance(value, dict):
        # JSON is YAML's flow syntax: numbers, texts and lists keep their type through --set
        return tuple(f"{k}={json.dumps(v)}" for k, v in value.items())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PipesimError(f"{where}: expected a mapping of scenario keys to values or a list of KEY=VALUE texts")
