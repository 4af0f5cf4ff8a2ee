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
    for section in ("model", "system"):
        if section in raw:
            raw[section] = _absolute_files(raw[section], path.parent)
    return raw, str(path)


def _absolute_files(section, folder: Path):
    """A model or system section with its preset file (and a model's hf_config) made absolute, so
    that variants built from the dict load from any working directory."""
    def absolute(value):
        return str(folder / value) if not Path(value).is_absolute() else value
    if isinstance(section, str):
        return absolute(section) if section.endswith((".yaml", ".yml")) else section
    if not isinstance(section, dict):
        return section
    out = dict(section)
    if isinstance(out.get("preset"), str) and out["preset"].endswith((".yaml", ".yml")):
        out["preset"] = absolute(out["preset"])
    if isinstance(out.get("hf_config"), str):
        out["hf_config"] = absolute(out["hf_config"])
    return out


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
