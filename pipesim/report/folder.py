"""The report folder of `pipesim simulate`: report.json, trace.json, timeline.png, memory.png and
report.html side by side (also where `sweep` and `search` put their CSV and plots)."""
from __future__ import annotations

import json
from pathlib import Path

from pipesim.errors import PipesimError


def default_dir(scenario_path: str) -> Path:
    """`S.report/` in the current directory for scenario file S (the scenario's own folder may
    be read-only or under version control)."""
    return Path(Path(str(scenario_path)).stem + ".report")


def check_output(path: str | None, flag: str) -> None:
    """Refuse, before a long run, an output file whose folder does not exist."""
    if path is None:
        return
    folder = Path(path).parent
    if not folder.is_dir():
        from pipesim.errors import PipesimError
        raise PipesimError(f"{flag} {path}: the folder {folder} does not exist")


def make_dir(out) -> Path:
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PipesimError(f"{out}: cannot create the report folder ({exc.strerror})") from None
    if not out.is_dir():
        raise PipesimError(f"{out}: exists and is not a folder")
    return out


def write_json(path: Path, data) -> None:
    try:
        path.write_text(json.dumps(data, indent=1, default=_plain))
    except OSError as exc:
        raise PipesimError(f"{path}: cannot write ({exc.strerror})") from None


def _plain(obj):
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def report_dict(rep, why: dict | None, events: bool) -> dict:
    out = rep.to_dict(include_trace=events)
    if why is not None:
        out["why"] = why
    return out


def write_folder(out, rep, scenario, why: dict | None, headline: list[str], *, events: bool = False) -> list[Path]:
    """Write the five files into `out`; returns their paths."""
    from pipesim.report.html import render
    from pipesim.report.perfetto import write_trace
    from pipesim.report.plots import plot_memory, plot_timeline
    out = make_dir(out)
    d = rep.data
    name = Path(str(scenario.source)).name
    files = [out / "report.json", out / "trace.json", out / "timeline.png", out / "memory.png", out / "report.html"]
    write_json(files[0], report_dict(rep, why, events))
    write_trace(files[1], rep.events, rep.memory)
    plot_timeline(rep.events, files[2], f"{name}: {d.get('plan', d['schedule'])}, step {d['step_time_s'] * 1e3:.1f} ms")
    plot_memory(rep.memory, files[3], f"{name}: memory per rank", capacity=d["memory_capacity_bytes"])
    page = render(rep, scenario, why, headline, f"{name}: step {d['step_time_s'] * 1e3:.1f} ms, "
                                                f"bubble {d['bubble_fraction'] * 100:.1f} %")
    try:
        files[4].write_text(page, encoding="utf-8")
    except OSError as exc:
        raise PipesimError(f"{files[4]}: cannot write ({exc.strerror})") from None
    return files
