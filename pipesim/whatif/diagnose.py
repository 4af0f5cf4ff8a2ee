"""`pipesim validate SUITE --diagnose`: which single hardware knob would explain a family's misses.

When a family is off, the term that is wrong is the one to fix (never a scalar tuned until the
table matches). This points at it: each knob of `pipesim fit` (calibrate/step_fit.py: the
sustained tensor-core rate, HBM, network, NVLink, launch cost) is fitted *alone* to the family's
published runs, and the table shows how far each one alone would take the family's MAPE and to
what value. A knob that closes most of the gap at a plausible value names the term to look at; a
knob that needs an implausible value (a 0.3 NVLink efficiency) says the missing cost has that
shape but another cause. Diagnosis only: the values are printed, never used by the model.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass


@dataclass
class KnobDiagnosis:
    knob: str
    key: str
    preset: float
    best: float
    status: str
    mape_pct: float


def diagnose(suite: str, results, path=None, efficiency: str = "preset", engine: str = "sim",
             jobs: int = 2) -> list[tuple[str, float, list[KnobDiagnosis]]]:
    """Per GPU type of the family (a fit is of one system): (its label, the MAPE of its cases now,
    one KnobDiagnosis per knob), for `results` of `suite`; a GPU with fewer than two cases is left
    out (one case fits any knob)."""
    from pipesim.calibrate.runs_file import MeasuredRun
    from pipesim.calibrate.step_fit import KNOBS, fit_runs
    from pipesim.scenario.load import load_scenario
    from pipesim.whatif.validation import write_scenarios

    usable = [r for r in results if r.step_time_s and r.error_pct is not None]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        files = {p.stem: p for p in write_scenarios(tmp, path, efficiency, [suite])}
        groups: dict[str, list] = {}
        for r in usable:
            if r.case.id in files:
                groups.setdefault(load_scenario(files[r.case.id]).system.gpu.name, []).append(r)
        for gpu, rs in groups.items():
            if len(rs) < 2:
                continue
            # a throughput error e (+ = faster) means the published figure implies a step (1 + e) longer
            runs = [MeasuredRun(r.case.id, str(files[r.case.id]), (), "step_time_s",
                                r.step_time_s * (1 + r.error_pct / 100)) for r in rs]
            rows = []
            for knob in KNOBS.values():
                fit = fit_runs(runs, [knob], engine=engine, jobs=jobs)
                k = fit.knobs[0]
                rows.append(KnobDiagnosis(k.name, k.key, k.default, k.fitted, k.status, fit.mape("fitted_step_s")))
            label = suite if len(groups) == 1 else f"{suite} on {gpu} ({len(rs)} cases)"
            out.append((label, sum(abs(r.error_pct) for r in rs) / len(rs), rows))
    return out


def format_diagnosis(label: str, now: float, rows: list[KnobDiagnosis]) -> str:
    lines = [f"diagnosis {label}: each knob alone fitted to the family (MAPE now {now:.1f} %; the values "
             f"are a pointer, never used by the model)",
             f"  {'knob':8s} {'key':32s} {'preset':>8s} {'best':>8s} {'MAPE %':>7s}  status"]
    for d in sorted(rows, key=lambda d: d.mape_pct):
        lines.append(f"  {d.knob:8s} {d.key:32s} {d.preset:8.4g} {d.best:8.4g} {d.mape_pct:7.1f}  {d.status}")
    return "\n".join(lines)
