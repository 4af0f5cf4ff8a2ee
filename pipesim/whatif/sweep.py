"""`run_sweep`: scenario + grid -> rows (the library side of `pipesim sweep`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pipesim.whatif.evaluate import evaluate_all, simulate_report
from pipesim.whatif.grid import Grid, prepare, read_grid


@dataclass
class SweepResult:
    grid: Grid
    rows: list[dict]
    memory_limit: float | None     # GPU memory of the base scenario (bytes), for the plots


def read_base(path_or_dict) -> tuple[dict, str]:
    from pipesim.scenario.load import read_yaml
    if isinstance(path_or_dict, dict):
        return dict(path_or_dict), "<dict>"
    path = Path(path_or_dict)
    raw = read_yaml(path)
    # Relative paths inside the scenario (schedule CSV, profile, a system preset file) stay relative
    # to its folder.
    for section, key in (("training", "schedule"), ("costs", "profile")):
        value = (raw.get(section) or {}).get(key) if isinstance(raw.get(section), dict) else None
        if isinstance(value, str) and (value.endswith(".csv") or section == "costs") and not Path(value).is_absolute():
            raw[section] = dict(raw[section], **{key: str(path.parent / value)})
    system = raw.get("system")
    preset = system if isinstance(system, str) else (system or {}).get("preset") if isinstance(system, dict) else None
    if isinstance(preset, str) and preset.endswith((".yaml", ".yml")) and not Path(preset).is_absolute():
        absolute = str(path.parent / preset)
        raw["system"] = absolute if isinstance(system, str) else dict(system, preset=absolute)
    return raw, str(path)


def run_sweep(scenario, grid, evaluator: Callable = simulate_report, mode: str = "representative",
              jobs: int = 1, progress=None, screen: bool = False, use_ray: bool = False,
              ray_address: str | None = None) -> SweepResult:
    raw, source = read_base(scenario)
    grid = grid if isinstance(grid, Grid) else read_grid(grid)
    items = prepare(raw, grid, source)
    rows = evaluate_all(items, evaluator=evaluator, mode=mode, jobs=jobs, progress=progress, screen=screen,
                        use_ray=use_ray, ray_address=ray_address)
    limit = next((it.scenario.system.gpu.memory for it in items if it.scenario is not None), None)
    return SweepResult(grid=grid, rows=rows, memory_limit=limit)
