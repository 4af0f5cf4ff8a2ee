"""Sweep grids: a YAML file of scenario keys -> value lists or ranges, expanded into variants.

Grid file (units as in scenario files)::

    grid:                                   # dotted scenario keys; the product is swept
      parallel.tensor: [1, 2, 4, 8]
      parallel.pipeline: {from: 1, to: 64, times: 2}     # 1, 2, 4, ..., 64
      training.micro_batch_size: {from: 1, to: 4}        # 1, 2, 3, 4 (step 1)
      training.schedule: [1f1b, interleaved]
    set:                                    # optional: fixed overrides applied to every variant
      training.recompute: full

A `zip:` entry is one axis whose values are mappings of keys that change together, e.g.
`zip: [{parallel.pipeline: 2, system.gpus_per_node: 2}, {parallel.pipeline: 4, system.gpus_per_node: 4}]`.
A bare mapping (without `grid:`) is read as the grid itself. When the grid changes the layout
(tensor, pipeline, nodes) but not `parallel.data`, data parallelism is derived from the GPU
count for each variant, as `pipesim simulate` does when `data` is omitted.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipesim.errors import PipesimError, ScenarioError

# Keys whose change invalidates a fixed `parallel.data` in the base scenario.
LAYOUT_KEYS = ("parallel.tensor", "parallel.pipeline", "parallel.context", "system.num_nodes",
               "system.gpus_per_node")
MAX_VARIANTS = 1_000_000
ZIP = "zip"


@dataclass(frozen=True)
class Grid:
    axes: dict[str, list]                      # dotted key -> values, in file order
    fixed: dict[str, Any] = field(default_factory=dict)
    source: str = "<grid>"

    @property
    def keys(self) -> list[str]:
        return list(self.axes)

    @property
    def size(self) -> int:
        n = 1
        for values in self.axes.values():
            n *= len(values)
        return n

    @property
    def columns(self) -> list[str]:
        """The scenario keys a variant sets (a zip axis contributes its keys)."""
        out = []
        for k, values in self.axes.items():
            for key in (values[0] if k == ZIP else {k: None}):
                if key not in out:
                    out.append(key)
        return out

    def variants(self) -> list[dict[str, Any]]:
        """Every combination, as {dotted key: value}, in row-major order of the file."""
        keys = self.keys
        out = []
        for combo in itertools.product(*(self.axes[k] for k in keys)):
            v = {}
            for k, value in zip(keys, combo):
                v.update(value if k == ZIP else {k: value})
            out.append(v)
        return out


def read_grid(path_or_dict, source: str | None = None) -> Grid:
    if isinstance(path_or_dict, dict):
        raw, src = path_or_dict, source or "<grid>"
    else:
        path = Path(path_or_dict)
        src = str(path)
        if not path.is_file():
            raise ScenarioError(f"{path}: grid file not found")
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{path}: YAML syntax error: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict) or not raw:
        raise ScenarioError(f"{src}: expected a mapping `grid: {{key: [values]}}`")
    if "grid" in raw:
        extra = [k for k in raw if k not in ("grid", "set")]
        if extra:
            raise ScenarioError(f"{src}: {extra[0]}: unknown top-level key; expected grid and set")
        axes_raw, fixed = raw["grid"], raw.get("set") or {}
    else:
        axes_raw, fixed = raw, {}
    if not isinstance(axes_raw, dict) or not axes_raw:
        raise ScenarioError(f"{src}: grid: expected a mapping of scenario keys to value lists")
    if not isinstance(fixed, dict):
        raise ScenarioError(f"{src}: set: expected a mapping of scenario keys to values")
    axes = {}
    for key, spec in axes_raw.items():
        if key == ZIP:
            axes[key] = zip_values(src, spec)
            continue
        check_key(src, f"grid.{key}", key)
        axes[key] = expand_values(src, key, spec)
    for key in fixed:
        check_key(src, f"set.{key}", key)
    grid = Grid(axes=axes, fixed=dict(fixed), source=src)
    if grid.size > MAX_VARIANTS:
        raise ScenarioError(f"{src}: the grid has {grid.size:,} combinations (> {MAX_VARIANTS:,}); "
                            "narrow it or use `pipesim search`")
    return grid


def check_key(src: str, where: str, key) -> None:
    from pipesim.scenario_load import SECTIONS
    if not isinstance(key, str) or "." not in key:
        raise ScenarioError(f"{src}: {where}: expected a dotted scenario key like parallel.tensor")
    if key.split(".")[0] not in SECTIONS:
        raise ScenarioError(f"{src}: {where}: unknown section {key.split('.')[0]!r}; "
                            f"valid: {', '.join(SECTIONS)}")


def zip_values(src: str, spec) -> list[dict]:
    if not isinstance(spec, list) or not spec or not all(isinstance(v, dict) and v for v in spec):
        raise ScenarioError(f"{src}: grid.zip: expected a list of mappings of keys that change together")
    keys = set(spec[0])
    for i, v in enumerate(spec):
        if set(v) != keys:
            raise ScenarioError(f"{src}: grid.zip[{i}]: every entry must set the same keys "
                                f"({', '.join(sorted(keys))})")
        for key in v:
            check_key(src, f"grid.zip[{i}].{key}", key)
    return [dict(v) for v in spec]


def expand_values(src: str, key: str, spec) -> list:
    """A list, a scalar, or a range {from, to, step} / {from, to, times} (both ends inclusive)."""
    where = f"{src}: grid.{key}"
    if isinstance(spec, list):
        if not spec:
            raise ScenarioError(f"{where}: empty list")
        return list(spec)
    if not isinstance(spec, dict):
        return [spec]
    unknown = [k for k in spec if k not in ("from", "to", "step", "times")]
    if unknown or "from" not in spec or "to" not in spec:
        raise ScenarioError(f"{where}: a range needs from and to, plus step or times "
                            f"(got keys {sorted(spec)})")
    lo, hi = spec["from"], spec["to"]
    if "step" in spec and "times" in spec:
        raise ScenarioError(f"{where}: give step or times, not both")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi)):
        raise ScenarioError(f"{where}: from and to must be numbers")
    if lo > hi:
        raise ScenarioError(f"{where}: from({lo}) > to({hi})")
    out = []
    if "times" in spec:
        f = spec["times"]
        if not isinstance(f, (int, float)) or f <= 1 or lo <= 0:
            raise ScenarioError(f"{where}: times must be > 1 and from > 0 (got times={f}, from={lo})")
        v = lo
        while v <= hi * (1 + 1e-12):
            out.append(v)
            v = v * f
    else:
        step = spec.get("step", 1)
        if not isinstance(step, (int, float)) or step <= 0:
            raise ScenarioError(f"{where}: step must be positive, got {step}")
        i = 0
        while lo + i * step <= hi * (1 + 1e-12) + 1e-12:
            out.append(lo + i * step)
            i += 1
    if all(isinstance(v, int) for v in (lo, hi, spec.get("step", 1), spec.get("times", 2))):
        out = [int(v) for v in out]
    return out


def base_for(raw: dict, grid: Grid) -> dict:
    """The base scenario dict for the sweep: fixed overrides applied; `parallel.data` dropped when
    the grid changes the layout but not data (so each variant derives it)."""
    from pipesim.scenario_load import apply_override
    raw = dict(raw)
    swept = grid.columns
    changes_layout = any(k in swept or k in grid.fixed for k in LAYOUT_KEYS)
    sets_data = "parallel.data" in swept or "parallel.data" in grid.fixed
    if changes_layout and not sets_data and isinstance(raw.get("parallel"), dict):
        raw["parallel"] = {k: v for k, v in raw["parallel"].items() if k != "data"}
    for key, value in grid.fixed.items():
        raw = apply_override(raw, f"{key}={yaml.safe_dump(value, default_flow_style=True).strip()}")
    return raw


def override_strings(variant: dict[str, Any]) -> list[str]:
    out = []
    for key, value in variant.items():
        text = yaml.safe_dump(value, default_flow_style=True).strip()
        if text.endswith("\n..."):
            text = text[:-4].strip()
        out.append(f"{key}={text}")
    return out


@dataclass
class Prepared:
    """A variant after loading: the scenario, or why it was pruned."""
    index: int
    values: dict[str, Any]
    scenario: Any = None
    reason: str | None = None
    raw: dict | None = None        # a scenario dict still to load (loaded in the worker)


def prepare(raw: dict, grid: Grid, source: str = "<scenario>") -> list[Prepared]:
    """Load every variant; impossible ones keep their loader message as the pruning reason."""
    from pipesim.scenario_load import load_scenario
    base = base_for(raw, grid)
    out = []
    for i, values in enumerate(grid.variants()):
        try:
            s = load_scenario(base, override_strings(values))
        except PipesimError as exc:
            out.append(Prepared(i, values, reason=short_reason(str(exc))))
            continue
        out.append(Prepared(i, values, scenario=s))
    return out


def short_reason(message: str) -> str:
    """Drop the '<dict>: ' source prefix the loader puts on messages about in-memory scenarios."""
    for prefix in ("<dict>: ",):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return message.splitlines()[0] if message else message
