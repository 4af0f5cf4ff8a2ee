"""Evaluate prepared variants (in a process pool) into flat result rows.

A row: the swept keys, derived layout columns, `status` (ok | oom | pruned | error), `reason`,
and every scalar metric of the simulator report (nested dicts of scalars flattened with dots).
The evaluator is injectable (`evaluator=`, a picklable top-level callable scenario -> report
dict), so the sweep machinery is testable without the simulator.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from typing import Callable, Iterable

from pipesim.errors import OutOfMemoryError, PipesimError
from pipesim.whatif.grid import Prepared, short_reason

STATUS_OK, STATUS_OOM, STATUS_PRUNED, STATUS_ERROR = "ok", "oom", "pruned", "error"
SKIP_KEYS = {"events", "memory", "ranks", "stage_costs", "stages", "schedule_grid"}


def simulate_report(scenario, mode: str = "representative") -> dict:
    """Default evaluator: the SimPy simulator, metrics only (no trace events)."""
    from pipesim.sim import simulate
    return dict(simulate(scenario, mode=mode, trace=False).to_dict(), engine="sim")


def layout_columns(s) -> dict:
    """Columns every row carries, whatever the grid varied (the resolved layout)."""
    p, t = s.parallel, s.training
    return {"tensor": p.tensor, "context": p.context, "pipeline": p.pipeline, "data": p.data,
            "virtual_stages": p.virtual_stages,
            "micro_batch_size": t.micro_batch_size, "num_microbatches": s.num_microbatches,
            "schedule": t.schedule, "recompute": t.recompute, "zero_stage": t.zero_stage,
            "compression_bits": t.activation_compression_bits, "num_gpus": s.num_gpus}


def flatten(report: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in report.items():
        if key in SKIP_KEYS:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, bool) or isinstance(value, (int, float, str)) or value is None:
            out[name] = value
        elif isinstance(value, dict) and not prefix:
            out.update(flatten(value, prefix=f"{name}."))
    return out


# Memory screening: a layout whose closed-form peak exceeds the GPU memory by this factor is
# out of memory whatever the event order; it is kept as an infeasible row (peak and timing from
# the closed form, engine "analytic") without running the simulator. The closed form and the
# simulator share the stage costs and agree on peaks within 2 % for the schedules below on every
# simulated row of the GPT-3 1024-GPU grid (docs/WHATIF.md); the V-shaped schedules' closed-form
# peak is off by up to 28 %, so those are always simulated.
OOM_MARGIN = 1.10
SCREENED_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")


def screened_oom(s) -> dict | None:
    from pipesim.whatif.analytic import analytic_report
    if s.training.schedule not in SCREENED_SCHEDULES:
        return None
    rep = analytic_report(s)
    if rep["peak_memory_bytes"] > OOM_MARGIN * s.system.gpu.memory:
        return rep
    return None


def evaluate_one(item: Prepared, evaluator: Callable, mode: str, screen: bool = False) -> dict:
    row = {"index": item.index, **item.values}
    if item.scenario is None and item.raw is not None:
        from pipesim.scenario_load import load_scenario
        try:
            item = Prepared(item.index, item.values, scenario=load_scenario(item.raw))
        except PipesimError as exc:
            item = Prepared(item.index, item.values, reason=short_reason(str(exc)))
    if item.scenario is None:
        return {**row, "status": STATUS_PRUNED, "reason": item.reason}
    row.update(layout_columns(item.scenario))
    try:
        report = screened_oom(item.scenario) if screen else None
        if report is None:
            report = evaluator(item.scenario, mode)
    except OutOfMemoryError as exc:
        return {**row, "status": STATUS_OOM, "reason": short_reason(str(exc))}
    except PipesimError as exc:       # e.g. a schedule that cannot run this layout (PlanError)
        return {**row, "status": STATUS_PRUNED, "reason": short_reason(str(exc))}
    metrics = flatten(report)
    metrics.pop("status", None)
    if metrics.get("oom"):
        peak = metrics.get("peak_memory_bytes")
        cap = item.scenario.system.gpu.memory
        reason = (f"peak {peak / 2**30:.1f} GiB > {cap / 2**30:.1f} GiB per GPU" if peak else "out of memory")
        return {**row, **metrics, "status": STATUS_OOM, "reason": reason}
    return {**row, **metrics, "status": STATUS_OK, "reason": ""}


# Worker state: set once per process by the pool initializer (avoids pickling it per task).
_WORKER: dict = {}


def _init_worker(evaluator, mode, screen=False):
    _WORKER["evaluator"], _WORKER["mode"], _WORKER["screen"] = evaluator, mode, screen


def _work(item: Prepared) -> dict:
    try:
        return evaluate_one(item, _WORKER["evaluator"], _WORKER["mode"], _WORKER["screen"])
    except Exception as exc:       # a bug in one config must not kill the sweep; keep it as a row
        return {"index": item.index, **item.values, "status": STATUS_ERROR,
                "reason": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def evaluate_all(items: list[Prepared], evaluator: Callable = simulate_report, mode: str = "representative",
                 jobs: int = 1, progress=None, screen: bool = False) -> list[dict]:
    """Rows in the order of `items`. Pruned items never reach a worker. `progress(done, total)` is
    called as rows arrive. jobs <= 0 means one per CPU. `screen`: rows that the closed form puts
    over OOM_MARGIN x the GPU memory skip the evaluator (see screened_oom)."""
    jobs = jobs if jobs and jobs > 0 else (os.cpu_count() or 1)
    rows: dict[int, dict] = {}
    todo = []
    for it in items:
        if it.scenario is None and it.raw is None:
            rows[it.index] = evaluate_one(it, evaluator, mode)
        else:
            todo.append(it)
    total, done = len(items), len(rows)
    if progress:
        progress(done, total)
    if jobs == 1 or len(todo) <= 1:
        _init_worker(evaluator, mode, screen)
        for it in todo:
            rows[it.index] = _work(it)
            done += 1
            if progress:
                progress(done, total)
    else:
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        chunk = max(1, min(16, len(todo) // (jobs * 8)))
        with ctx.Pool(jobs, initializer=_init_worker, initargs=(evaluator, mode, screen)) as pool:
            for row in pool.imap_unordered(_work, todo, chunksize=chunk):
                rows[row["index"]] = row
                done += 1
                if progress:
                    progress(done, total)
    return [rows[it.index] for it in items]


class ProgressBar:
    """A one-line progress bar on a text stream (stderr), redrawn at most every `interval` s."""

    def __init__(self, stream, label: str = "sweep", width: int = 30, interval: float = 0.1):
        self.stream, self.label, self.width, self.interval = stream, label, width, interval
        self.start = None
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        if done < total and now - self.last < self.interval:
            return
        self.last = now
        frac = done / total if total else 1.0
        fill = int(round(frac * self.width))
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{total} "
                          f"{rate:6.1f}/s eta {eta:5.1f}s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def count_status(rows: Iterable[dict]) -> dict[str, int]:
    out = {STATUS_OK: 0, STATUS_OOM: 0, STATUS_PRUNED: 0, STATUS_ERROR: 0}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out
