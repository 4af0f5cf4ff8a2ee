"""`run_sweep`: scenario + grid -> rows (the library side of `pipesim sweep`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from pipesim.errors import ScenarioError
from pipesim.scenario.file_paths import rebase
from pipesim.whatif.evaluate import evaluate_all, simulate_report
from pipesim.whatif.grid import Grid, prepare, read_grid


@dataclass
class SweepResult:
    grid: Grid
    rows: list[dict]
    memory_limit: float | None     # GPU memory of the base scenario (bytes), for the plots


def read_base(path_or_dict, overrides: Iterable[str] = ()) -> tuple[dict, str]:
    """The scenario as a raw mapping, with `--set KEY=VALUE` overrides applied after its own
    relative paths were rebased (an override's path is from the working directory, as for
    `pipesim simulate`)."""
    from pipesim.scenario.load import apply_override, read_yaml
    if isinstance(path_or_dict, dict):
        raw, source = dict(path_or_dict), "<dict>"
    else:
        path = Path(path_or_dict)
        # relative paths inside the scenario (preset files, hf_config, schedule CSV, profile) stay
        # relative to its folder
        raw, source = rebase(read_yaml(path), path.parent), str(path)
    for text in overrides:
        raw = apply_override(raw, text)
    _check_sections(raw, source)
    return raw, source


def _check_sections(raw: dict, source: str) -> None:
    """Each section a mapping (model and system may name a preset): the grid merges its keys into
    them, which would otherwise turn `training: 80GB` into a `training.preset` key of every row."""
    from pipesim.scenario.load import SECTIONS
    from pipesim.scenario.schema import _describe
    for name, value in raw.items():
        named = name in ("model", "system")          # `model: llama3-8b`, `system: dgx-h100`
        if name in SECTIONS and not isinstance(value, (dict, type(None))) and not (named and isinstance(value, str)):
            what = "a mapping or a preset name" if named else "a mapping"
            raise ScenarioError(f"{source}: {name}: expected {what}, got {_describe(value)}")


def run_sweep(scenario, grid, evaluator: Callable = simulate_report, mode: str = "representative",
              jobs: int = 1, progress=None, screen: bool = False, use_ray: bool = False,
              ray_address: str | None = None, overrides: Iterable[str] = ()) -> SweepResult:
    raw, source = read_base(scenario, overrides)
    grid = grid if isinstance(grid, Grid) else read_grid(grid)
    items = prepare(raw, grid, source)
    rows = evaluate_all(items, evaluator=evaluator, mode=mode, jobs=jobs, progress=progress, screen=screen,
                        use_ray=use_ray, ray_address=ray_address)
    limit = next((it.scenario.system.gpu.memory for it in items if it.scenario is not None), None)
    return SweepResult(grid=grid, rows=rows, memory_limit=limit)
