"""Fit a few of pipesim's hardware efficiencies to step times measured on the user's own cluster
(`pipesim fit RUNS.yaml`).

pipesim's defaults come from datasheets and published kernel benchmarks and are never fitted to
training runs (`pipesim validate` only tests them). A team that owns a cluster has more: steps of
its own stack, timed. The fit moves named scenario keys only, each a physical quantity with a
preset default (KNOBS), and nothing else of the model:

    minimise  sum_runs (ln(t_pred / t_meas) / noise)^2  +  sum_knobs z^2,   z = (u - u0) / prior

u = ln(value) for the efficiencies (prior ln 2: a factor of two either way is plausible before
any run is seen), u = the value for the launch cost (prior 20 us); u0 is the preset's value. The
prior keeps a knob no run depends on at its preset value. The minimum is found by
scipy.optimize.least_squares (trust-region reflective, bounds; finite differences of the
simulator), the uncertainty is the Laplace approximation at it, cov(z) = (J^T J)^-1 with the
residuals in units of `noise` (the runs' relative timing noise), and `cross_validate` refits
without each run in turn and predicts it: the error to expect on a layout not measured.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from pipesim.calibrate.runs_file import MeasuredRun
from pipesim.errors import PipesimError

NOISE = 0.02            # default relative noise of a measured step (run-to-run spread of a few %)
DETERMINED = 0.5        # a knob is fitted when the runs shrink its prior width at least this much
SIG_DIGITS = 4          # fitted values are rounded so, and the table is recomputed with them
DESIGN_STEP = 1.5       # the coarse starting design's points, in prior widths from the presets
STARTS = 2              # local fits run from this many of its best points


@dataclass(frozen=True)
class Knob:
    name: str
    log: bool             # fitted as ln(value)
    low: float
    high: float
    prior: float          # prior width, in fit units (ln for log knobs)
    doc: str

    def key(self, s) -> str:
        """The scenario key this knob sets in scenario `s`."""
        if self.name == "compute":
            return COMPUTE_FLAT if _flat_matmul(s) else COMPUTE_CURVE
        return KEYS[self.name]

    def default(self, s) -> float:
        """The value scenario `s` runs with when the knob is not set."""
        from pipesim.costs.roofline import tensor_core_rate
        from pipesim.presets.gpus import GENERIC_MATMUL_EFFICIENCY
        gpu = s.system.gpu
        if self.name == "compute":
            if _flat_matmul(s):
                return gpu.matmul_efficiency if gpu.matmul_efficiency is not None else GENERIC_MATMUL_EFFICIENCY
            return tensor_core_rate(gpu, s.training.precision)["sustained_ratio"]
        if self.name == "memory":
            return gpu.memory_efficiency
        if self.name == "network":
            return s.system.inter_node.efficiency
        if self.name == "nvlink":
            return s.system.intra_node.efficiency
        return gpu.kernel_launch * 1e6

    def to_fit(self, value: float) -> float:
        return math.log(value) if self.log else value

    def from_fit(self, u: float) -> float:
        return math.exp(u) if self.log else u


COMPUTE_CURVE = "system.gpu.sustained_ratio"
COMPUTE_FLAT = "system.gpu.matmul_efficiency"
KEYS = {"memory": "system.gpu.memory_efficiency", "network": "system.inter_node.efficiency",
        "nvlink": "system.intra_node.efficiency", "launch": "system.gpu.kernel_launch_us"}
LN2 = math.log(2)
KNOBS = {k.name: k for k in (
    Knob("compute", True, 0.05, 1.0, LN2,
         "tensor-core rate: the sustained / burst ratio over the kernel curves (GEMMs and fused "
         "attention), or the flat matmul efficiency of a GPU without curves"),
    Knob("memory", True, 0.05, 1.0, LN2, "achievable fraction of HBM bandwidth (memory-bound ops)"),
    Knob("network", True, 0.05, 1.0, LN2, "achievable fraction of the inter-node link (per GPU)"),
    Knob("nvlink", True, 0.05, 1.0, LN2, "achievable fraction of the intra-node (NVLink) link"),
    Knob("launch", False, 0.0, 1000.0, 20.0, "host time per launched kernel (a floor under tiny ops)"),
)}
DEFAULT_KNOBS = ("compute", "network")


def _flat_matmul(s) -> bool:
    from pipesim.presets.gpus import curve
    gpu = s.system.gpu
    return gpu.matmul_efficiency is not None or curve(gpu.kernel_curve) is None


def parse_knobs(text: str) -> list[Knob]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise PipesimError(f"--fit {text!r}: expected knob names, among {', '.join(KNOBS)}")
    for n in names:
        if n not in KNOBS:
            raise PipesimError(f"--fit: unknown knob {n!r}; expected among {', '.join(KNOBS)}")
    if len(set(names)) != len(names):
        raise PipesimError(f"--fit {text}: a knob is named twice")
    return [KNOBS[n] for n in names]


@dataclass
class RunFit:
    name: str
    measured_step_s: float        # the step the measured figure implies
    default_step_s: float         # pipesim with the presets' values
    fitted_step_s: float          # pipesim with the fitted values
    loo_step_s: Optional[float] = None   # fitted without this run (cross-validation)
    oom: bool = False             # pipesim's memory model says the layout does not fit

    @staticmethod
    def error(pred: Optional[float], measured: float) -> Optional[float]:
        """Throughput error, % (+ = pipesim faster than measured), as `pipesim validate` signs it."""
        return None if pred is None else (measured / pred - 1) * 100


@dataclass
class KnobFit:
    name: str
    key: str
    default: float
    fitted: float
    sigma: float                  # one standard deviation, in the knob's unit
    status: str                   # fitted | prior only | at lower bound | at upper bound


@dataclass
class Prediction:
    scenario: str
    default_step_s: float         # with the presets' values
    step_s: float                 # with the fitted values
    sd_pct: float                 # one standard deviation from the fitted values' uncertainty, %


@dataclass
class FitResult:
    runs: list[RunFit]
    knobs: list[KnobFit]
    evaluations: int
    noise: float
    engine: str
    overrides: list[str] = field(default_factory=list)    # KEY=VALUE of the fitted knobs
    predictions: list[Prediction] = field(default_factory=list)

    def mape(self, which: str) -> Optional[float]:
        errs = [RunFit.error(getattr(r, which), r.measured_step_s) for r in self.runs]
        return None if any(e is None for e in errs) else sum(abs(e) for e in errs) / len(errs)


class _Model:
    """Simulated step times of the runs under knob values, memoised; `jobs` > 1 simulates the
    runs of one evaluation in parallel processes."""

    def __init__(self, runs: list[MeasuredRun], knobs: list[Knob], progress: Callable[[int], None] | None,
                 engine: str, pool=None):
        from pipesim.calibrate.host import with_host_model
        from pipesim.scenario.load import load_scenario
        self.runs, self.progress, self.engine, self.pool = runs, progress, engine, pool
        self.cache: dict = {}
        self.evaluations = 0
        # each run's file read once, with its overrides and its relative paths made absolute: every
        # evaluation builds the scenario from this mapping instead of reading the file again
        self.raws = [read_run(r.scenario, r.sets) for r in runs]
        scenarios = [load_scenario(raw) for raw in self.raws]
        first = scenarios[0]
        self.keys = [k.key(first) for k in knobs]
        for i, s in enumerate(scenarios):
            if with_host_model(s) is not s:
                raise PipesimError(f"run {runs[i].name!r}: costs.profile carries a measured CPU host model, which "
                                   f"sets the launch cost and the links itself; fit runs with GPU costs")
            if s.system.gpu.name != first.system.gpu.name:
                raise PipesimError(f"runs {runs[i].name!r} and {runs[0].name!r} are on different GPUs "
                                   f"({s.system.gpu.name}, {first.system.gpu.name}): fit one system at a time")
            for k, key in zip(knobs, self.keys):
                if k.key(s) != key:
                    raise PipesimError(f"run {runs[i].name!r} sets its compute rate by {k.key(s)}, run "
                                       f"{runs[0].name!r} by {key}: fit runs of one kind together")
        self.defaults = [k.default(first) for k in knobs]
        self.scenarios = scenarios
        self.reports = [_report(s, engine) for s in scenarios]
        self._count(len(runs))

    def _count(self, n: int) -> None:
        self.evaluations += n
        if self.progress:
            self.progress(self.evaluations)

    def prefetch(self, pairs) -> None:
        """Simulate every (run index, knob values) pair not yet known."""
        todo = list(dict.fromkeys(p for p in pairs if p not in self.cache))
        if not todo:
            return
        jobs = [(self.raws[i], self._sets(v), self.engine) for i, v in todo]
        self.cache.update(zip(todo, self.run_jobs(jobs)))

    def run_jobs(self, jobs: list) -> list[float]:
        """Step times of (scenario mapping, overrides, engine) jobs, in the pool when there is one."""
        steps = self.pool.map(_step_of, jobs) if self.pool is not None and len(jobs) > 1 else map(_step_of, jobs)
        out = list(steps)
        self._count(len(out))
        return out

    def _sets(self, values: tuple) -> tuple:
        return tuple(f"{k}={v!r}" for k, v in zip(self.keys, values))

    def step(self, i: int, values: tuple) -> float:
        self.prefetch([(i, values)])
        return self.cache[(i, values)]


def _report(s, engine: str) -> dict:
    from pipesim.whatif.analytic import analytic_report
    from pipesim.whatif.evaluate import simulate_report
    return analytic_report(s) if engine == "analytic" else simulate_report(s)


def read_run(path: str, sets=()) -> dict:
    """A scenario file's mapping with `sets` applied, then its relative paths (and those the
    overrides name, relative to the file as `load_scenario(path, sets)` reads them) made absolute."""
    from pathlib import Path
    from pipesim.scenario.file_paths import rebase
    from pipesim.scenario.load import apply_override, read_yaml
    raw = read_yaml(Path(path))
    for text in sets:
        raw = apply_override(raw, text)
    return rebase(raw, Path(path).parent)


def _step_of(job) -> float:
    """A run's step time under overrides (top level: a worker process runs it)."""
    from pipesim.scenario.load import load_scenario
    raw, sets, engine = job
    return _report(load_scenario(raw, sets), engine)["step_time_s"]


def fit_runs(runs: list[MeasuredRun], knobs: list[Knob], noise: float = NOISE, cross_validate: bool = False,
             progress: Callable[[int], None] | None = None, engine: str = "sim", jobs: int = 1,
             predict: tuple[str, ...] = ()) -> FitResult:
    """Fit `knobs` to `runs` (module docstring) and, with `cross_validate`, predict each run from
    a fit without it. `engine`: "sim" (the simulator) or "analytic" (the closed-form screen, for
    runs too large to simulate hundreds of times); `jobs` processes simulate the runs. `predict`:
    scenario files to predict with the fitted values, each with the spread the values' uncertainty
    gives it (var ln t = g^T cov(z) g, g = d ln t / dz by finite differences)."""
    import multiprocessing
    if not noise > 0:
        raise PipesimError(f"--noise {noise}: expected a positive relative noise, e.g. 0.02")
    if cross_validate and len(runs) < 2:
        raise PipesimError("--cross-validate needs at least two runs")
    if jobs > 1 and len(runs) > 1:
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        with ctx.Pool(min(jobs, len(runs))) as pool:
            return _fit(runs, knobs, noise, cross_validate, progress, engine, pool, predict)
    return _fit(runs, knobs, noise, cross_validate, progress, engine, None, predict)


def _fit(runs, knobs, noise, cross_validate, progress, engine, pool, predict) -> FitResult:
    import numpy as np
    from scipy.optimize import least_squares

    m = _Model(runs, knobs, progress, engine, pool)
    measured = [r.implied_step(rep, s) for r, rep, s in zip(runs, m.reports, m.scenarios)]
    u0 = [k.to_fit(min(max(d, k.low), k.high)) for k, d in zip(knobs, m.defaults)]
    lo = [k.to_fit(k.low) for k in knobs]
    hi = [k.to_fit(k.high) for k in knobs]
    z_lo = np.array([(a - c) / k.prior for a, c, k in zip(lo, u0, knobs)])
    z_hi = np.array([(b - c) / k.prior for b, c, k in zip(hi, u0, knobs)])

    def values(z) -> tuple:
        return tuple(k.from_fit(c + k.prior * float(x)) for k, c, x in zip(knobs, u0, z))

    def residuals(z, idx):
        v = values(z)
        m.prefetch([(i, v) for i in idx])
        data = [math.log(m.step(i, v) / measured[i]) / noise for i in idx]
        return np.array(data + [float(x) for x in z])

    def solve(idx, start):
        start = np.clip(start, z_lo, z_hi)
        return least_squares(residuals, start, args=(idx,), bounds=(z_lo, z_hi), diff_step=0.02,
                             xtol=1e-4, ftol=1e-6, max_nfev=30 * (len(knobs) + 1))

    def multistart(idx):
        # Overlapped communication makes a step flat in a knob until the transfer stops hiding
        # (max(compute, comm)): a local descent from the presets can stall on such a plateau, so
        # it starts from the best points of a coarse design over the prior, and the best end wins.
        starts = [np.clip(np.array(z, float), z_lo, z_hi) for z in _design(len(knobs))]
        m.prefetch([(i, values(z)) for z in starts for i in idx])
        ranked = sorted(starts, key=lambda z: float(np.sum(residuals(z, idx) ** 2)))
        ends = [solve(idx, z) for z in ranked[:STARTS]]
        return min(ends, key=lambda r: r.cost)

    everyone = list(range(len(runs)))
    best = multistart(everyone)
    rounded = tuple(_round(v) for v in values(best.x))
    jac = np.asarray(best.jac)
    cov_z = np.linalg.pinv(jac.T @ jac)
    sigma_z = np.sqrt(np.clip(np.diag(cov_z), 0, None))
    fits = []
    for j, (k, d, v) in enumerate(zip(knobs, m.defaults, rounded)):
        s = sigma_z[j]
        sigma = v * (math.exp(k.prior * s) - 1) if k.log else k.prior * s
        if best.x[j] <= z_lo[j] + 1e-3:
            status = "at lower bound"
        elif best.x[j] >= z_hi[j] - 1e-3:
            status = "at upper bound"
        else:
            status = "fitted" if s < DETERMINED else "prior only"
        fits.append(KnobFit(k.name, m.keys[j], d, v, sigma, status))
    out = [RunFit(r.name, measured[i], m.reports[i]["step_time_s"], m.step(i, rounded),
                  oom=bool(m.reports[i].get("oom"))) for i, r in enumerate(runs)]
    if cross_validate:
        for i in everyone:
            rest = [j for j in everyone if j != i]
            out[i].loo_step_s = m.step(i, values(multistart(rest).x))
    predictions = [_predict(m, path, engine, rounded, values, best.x, z_lo, z_hi, cov_z) for path in predict]
    return FitResult(out, fits, m.evaluations, noise, engine,
                     [f"{key}={v}" for key, v in zip(m.keys, rounded)], predictions)


PREDICT_STEP = 0.1      # finite-difference step of a prediction's gradient, in prior widths


def _predict(m, path, engine, rounded, values, z, z_lo, z_hi, cov_z) -> Prediction:
    """A scenario's step with the presets, with the fitted values, and the relative spread the
    fitted values' covariance gives it."""
    import numpy as np
    probes = [z]
    for j in range(len(z)):
        dz = PREDICT_STEP if z[j] + PREDICT_STEP <= z_hi[j] else -PREDICT_STEP
        probes.append(np.where(np.arange(len(z)) == j, np.clip(z[j] + dz, z_lo[j], z_hi[j]), z))
    raw = read_run(path)
    jobs = [(raw, (), engine), (raw, m._sets(rounded), engine)] + [(raw, m._sets(values(p)), engine) for p in probes]
    default, fitted, at_z, *moved = m.run_jobs(jobs)
    g = np.array([(math.log(t) - math.log(at_z)) / (p[j] - z[j]) if p[j] != z[j] else 0.0
                  for j, (t, p) in enumerate(zip(moved, probes[1:]))])
    sd = math.sqrt(max(0.0, float(g @ cov_z @ g)))
    return Prediction(path, default, fitted, (math.exp(sd) - 1) * 100)


def _design(p: int) -> list[tuple]:
    """Starting points, in prior widths: a 3-level grid for up to three knobs, else the presets and
    each knob alone at -DESIGN_STEP and +DESIGN_STEP."""
    from itertools import product
    levels = (-DESIGN_STEP, 0.0, DESIGN_STEP)
    if p <= 3:
        return list(product(levels, repeat=p))
    axis = [tuple(x if j == i else 0.0 for j in range(p)) for i in range(p) for x in levels[::2]]
    return [(0.0,) * p] + axis


def _round(value: float) -> float:
    return float(f"{value:.{SIG_DIGITS}g}")
